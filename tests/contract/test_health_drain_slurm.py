"""A health drain decided for any check name round-trips through real SLURM (22.05, 24.11).

decide's drain for a health verdict is written by the scontrol backend, read back as
slonkd's own (reason and cause set), and lifted by the backend once the check passes; with
revalidation on (the default) the passing check first adds ``revalidating``, which round-trips
too and is all that holds the node once the health cause is released.
"""

from __future__ import annotations

import pytest

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.core.decide import decide
from slonkd.core.health import CheckResult, decode_verdict, ok
from slonkd.core.plan import Kind, NodeView, Policy
from slonkd.core.reasons import ReasonOwner, reason_owner
from slonkd.core.revalidation import REVALIDATING, RevalidationPolicy
from slonkd.core.slurm_node import DrainStatus, NodeName, SlurmNode
from slonkd.core.slurm_plan import recorded_causes
from tests.unit.coordinator_fakes import knode, pod, view

pytestmark = pytest.mark.slurm


@pytest.fixture
def backend(any_backend: SlurmBackend) -> SlurmBackend:
    """Each backend of the port in turn (tests/contract/conftest.py)."""
    return any_backend


POLICY = Policy(failure_grace_s=120, unready_grace_s=60)
DIRECT = Policy(
    failure_grace_s=120, unready_grace_s=60, revalidation=RevalidationPolicy(enabled=False)
)
"""Without revalidation: a passing check releases the health cause at once."""


def _view(slurm: SlurmNode, health: dict[str, CheckResult]) -> NodeView:
    """n1's view with its pod Ready for an hour on a Ready K8s node."""
    return view(
        node=NodeName("n1"),
        slurm=slurm,
        pod=pod(name="n1", on="kn-1"),
        kube_node=knode(name="kn-1"),
        health=health,
    )


async def _read(backend: SlurmBackend) -> SlurmNode:
    node = await backend.read_node("n1")
    assert node is not None
    return node


@pytest.mark.parametrize(
    ("check", "verdict"),
    [
        ("mount:/x", "fail"),  # a fail without a cause: the check's name is the cause
        ("mount:/home", "fail:mount-home-deadline-missed:manual"),
    ],
)
async def test_a_health_drain_reads_back_as_slonkds_and_is_lifted(
    backend: SlurmBackend, check: str, verdict: str
) -> None:
    """A health drain written to SLURM is read back as slonkd's and lifted when it passes.

    The coordinator decodes a verdict for ``check``, decides a drain, SLURM stores it, slonkd
    reads the node back as drained for its own cause, and once the check passes decide
    releases that cause and the backend resumes the node (issue 15.7: a cause-less
    ``mount:/x`` was written as ``slonkd:health:mount:/x``, read back as foreign, never lifted).
    """
    failing = {check: decode_verdict(check, verdict)}
    plan = decide(_view(await _read(backend), failing), POLICY)
    (drain,) = [a for a in plan.actions if a.kind is Kind.DRAIN]
    assert (await backend.drain(["n1"], drain.cause, "by slonkd coordinator")).changed == ("n1",)
    n1 = await _read(backend)
    assert n1.state.drain is DrainStatus.DRAINED
    assert reason_owner(n1.reason) is ReasonOwner.SLONKD, n1.reason
    assert recorded_causes(n1) == {drain.cause}
    again = decide(_view(n1, failing), POLICY)
    assert [a for a in again.actions if a.kind in (Kind.DRAIN, Kind.RELEASE)] == []
    healed = decide(_view(n1, {check: ok(check)}), DIRECT)
    (release,) = [a for a in healed.actions if a.kind is Kind.RELEASE]
    assert release.cause == drain.cause
    assert (await backend.resume(["n1"], release.cause)).changed == ("n1",)
    n1 = await _read(backend)
    assert n1.state.drain is DrainStatus.NONE
    assert (n1.live_reason, n1.extra) == ("", "")


async def test_a_passing_check_adds_revalidating_which_round_trips_and_outlives_the_health_cause(
    backend: SlurmBackend,
) -> None:
    """With revalidation on, a check passing again does not resume the node: it adds a cause.

    ``revalidating`` joins the health cause in SLURM (both read back as slonkd's), and once
    the health cause is released ``revalidating`` alone holds the node drained.
    """
    check = "mount:/home"
    failing = {check: decode_verdict(check, "fail")}
    (drain,) = [a for a in decide(_view(await _read(backend), failing), POLICY).actions
                if a.kind is Kind.DRAIN]  # fmt: skip
    assert (await backend.drain(["n1"], drain.cause, "by slonkd coordinator")).changed == ("n1",)
    healed = decide(_view(await _read(backend), {check: ok(check)}), POLICY)
    assert [a for a in healed.actions if a.kind is Kind.RELEASE] == []
    (join,) = [a for a in healed.actions if a.kind is Kind.DRAIN]
    assert join.cause == REVALIDATING
    assert (await backend.drain(["n1"], join.cause, "by slonkd coordinator")).changed == ("n1",)
    n1 = await _read(backend)
    assert reason_owner(n1.reason) is ReasonOwner.SLONKD, n1.reason
    assert recorded_causes(n1) == {drain.cause, REVALIDATING}
    await backend.resume(["n1"], drain.cause)  # the health cause goes; revalidating holds it
    n1 = await _read(backend)
    assert n1.state.drain is DrainStatus.DRAINED
    assert recorded_causes(n1) == {REVALIDATING}

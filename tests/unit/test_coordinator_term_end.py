"""What a coordinator does when its term ends in the middle of a pass (fakes, no services).

Found by ``test_a_deleted_lease_under_a_running_pair_keeps_state_writes_going`` (1 run in 3
under load, and in CI): the Lease was deleted, a standby took a new term, and the old leader,
which learns of it only at its next renewal, evicted the failed node's pod. Its record of that
eviction (the failure handled, the ladder's attempt) was then refused for the newer token, and
the eviction request on its way when the term was cancelled left no audit record either. The
new leader, not knowing, cordoned the node the pod was re-placed on and waited for the ladder.
Neighbours: ``test_coordinator_pass`` (the fakes), ``slonkd.runtime.coordinating.remediating``
and ``.executing``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

from slonkd.adapters.kube.state import FencedError
from slonkd.adapters.slurm.results import UpdateResult
from slonkd.core.coordinator_state import CoordinatorState, StateCorrupt
from slonkd.core.health import Remediation, fail
from slonkd.core.kube_actions import REBOOT_TAINT
from slonkd.core.kube_changes import ChangeOutcome, ChangeResult
from slonkd.core.kube_objects import TaintEffect
from slonkd.core.plan import Policy
from slonkd.core.reasons import Cause
from slonkd.runtime.coordinating import Coordinator
from tests.unit.coordinator_fakes import (
    AuditRecorder,
    FakeNodeWriter,
    FakePodWriter,
    FakeSlurm,
    FakeStore,
    coordinator_with,
    kube_node,
    slurm_node,
)

FAILED = "IDLE+FAIL"


class _Refusing(FakeStore):
    """A state a newer leader has written: every write of this one is refused."""

    async def update(
        self, token: int, change: Callable[[CoordinatorState], CoordinatorState]
    ) -> CoordinatorState:
        """Refused, as for a newer token."""
        raise FencedError("the state holds token 8, this writer 7")


async def test_an_eviction_is_recorded_before_it_is_made_so_a_deposed_leader_makes_none() -> None:
    """The record of an eviction is written (fenced) first: refused, so is the eviction."""
    slurm = FakeSlurm([slurm_node(0, FAILED, "Kill task failed"), slurm_node(1)], failing=set())
    pods = FakePodWriter()
    c = coordinator_with(
        slurm, FakeNodeWriter(), [kube_node(0), kube_node(1)], pods=pods, store=_Refusing()
    )
    with pytest.raises(FencedError):
        await c.reconcile_all()
    assert pods.evicted == []


async def test_an_eviction_and_its_record_go_together() -> None:
    """Evicted: the failure is handled and the attempt counted; refused: neither is."""
    for outcome, recorded in ((ChangeOutcome.CHANGED, True), (ChangeOutcome.REFUSED, False)):
        slurm = FakeSlurm([slurm_node(0, FAILED, "Kill task failed"), slurm_node(1)], failing=set())
        pods = _Answering(outcome)
        c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0), kube_node(1)], pods=pods)
        await c.reconcile_all()
        state = c.memory.state
        assert pods.evicted == ["w-0"]
        assert ("w-0" in state.handled) is recorded, state
        assert ("kn-0" in state.remediation) is recorded, state


async def test_a_write_on_its_way_when_the_term_ends_is_finished_and_audited() -> None:
    """Cancelled mid-write (the term ended), the write's answer is still awaited and audited."""
    slurm = FakeSlurm([slurm_node(0, FAILED, "Kill task failed"), slurm_node(1)], failing=set())
    writer = _Blocking()
    c = coordinator_with(
        slurm, writer, [kube_node(0), kube_node(1)], policy=Policy(remediate=False)
    )
    audit = AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    work = asyncio.create_task(c.reconcile_all())
    await asyncio.wait_for(writer.entered.wait(), timeout=5)
    work.cancel()
    await asyncio.sleep(0.05)
    assert not work.done()  # it waits for the write's answer
    writer.release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(work, timeout=5)
    done = {(r["action"], r["outcome"]) for r in audit.records}
    assert {("cordon", "changed"), ("taint", "changed")} <= done, audit.records
    assert "condition" not in {what for what, _ in writer.calls}  # nothing after the end


def _rebooting(store: FakeStore, writer: FakeNodeWriter) -> tuple[list[str], Coordinator]:
    """A coordinator whose pass takes the ladder's reboot step on kn-0 (a GPU XID 79).

    Returned with the SLURM nodes it asked SLURM to reboot.
    """
    slurm = FakeSlurm([slurm_node(0), slurm_node(1)], failing=set())
    asked: list[str] = []

    async def request_reboot(names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        asked.extend(names)
        return UpdateResult(changed=(), calls=1)

    slurm.request_reboot = request_reboot  # type: ignore[attr-defined]
    c = coordinator_with(slurm, writer, [kube_node(0), kube_node(1)], store=store)
    c.health["w-0"] = ("kn-0", {"xid": fail("xid", "gpu-xid-79", Remediation.REBOOT)})
    return asked, c


async def test_a_reboot_request_is_recorded_before_it_is_made_so_a_deposed_leader_makes_none() -> (
    None
):
    """The ladder's later steps are fenced like an eviction: record refused, nothing requested.

    Found by the e2e ``test_a_second_failure_on_the_same_k8s_node_requests_a_reboot`` (CI, stop
    34): the taint and its "attempt 2" annotation were on the node while the state still said
    one attempt, because the attempt was written after the request. A leader deposed in that gap
    would have requested the reboot with no record of it, and the next one would ask again.
    """
    writer = FakeNodeWriter()
    asked, c = _rebooting(_Refusing(), writer)
    with pytest.raises(FencedError):
        await c.reconcile_all()
    assert not [call for call in writer.calls if REBOOT_TAINT in call[0]], writer.calls
    assert asked == []


async def test_a_reboot_request_is_on_record_when_the_node_shows_it() -> None:
    """When the taint is written the state already counts the attempt; not made: taken back."""
    for outcome, recorded in ((ChangeOutcome.CHANGED, 1), (ChangeOutcome.UNCHANGED, 0)):
        store = FakeStore()
        writer = _Seeing(store, outcome)
        _, c = _rebooting(store, writer)
        await c.reconcile_all()
        assert writer.seen == [1], writer.seen  # counted before the taint went out
        final = c.memory.state.remediation.get("kn-0")
        assert (final.attempts if final else 0) == recorded, c.memory.state
        if not recorded:  # nor does the node owe a revalidation
            assert "w-0" not in c.memory.state.revalidating, c.memory.state


class _Seeing(FakeNodeWriter):
    """Notes the attempts the state holds for kn-0 when its reboot taint is written."""

    def __init__(self, store: FakeStore, outcome: ChangeOutcome) -> None:
        super().__init__()
        self.store = store
        self.outcome = outcome
        self.seen: list[int] = []

    async def set_taint(
        self, name: str, key: str, effect: TaintEffect, value: str = ""
    ) -> ChangeResult:
        """Seen, then answered with the outcome."""
        if key == REBOOT_TAINT:
            was = self.store.state.remediation.get(name)
            self.seen.append(was.attempts if was else 0)
            self.calls.append((f"taint {key}", name))
            return ChangeResult(outcome=self.outcome)
        return await super().set_taint(name, key, effect, value)


class _Blocking(FakeNodeWriter):
    """A node writer whose joined cordon and taint waits for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def cordon_and_taint(
        self, name: str, *, cause: str, key: str, effect: TaintEffect, value: str = ""
    ) -> tuple[ChangeResult, ChangeResult]:
        """Sent; the answer comes when released."""
        self.entered.set()
        await self.release.wait()
        return await super().cordon_and_taint(
            name, cause=cause, key=key, effect=effect, value=value
        )


class _Answering(FakePodWriter):
    """Evictions answered with ``outcome``."""

    def __init__(self, outcome: ChangeOutcome) -> None:
        super().__init__()
        self.outcome = outcome

    async def evict(
        self, namespace: str, name: str, *, uid: str = "", grace_s: int | None = None
    ) -> ChangeResult:
        """Recorded, answered with the outcome."""
        self.evicted.append(name)
        return ChangeResult(outcome=self.outcome)


async def test_a_new_term_claims_the_state_before_it_acts_and_a_newer_one_ends_it() -> None:
    """The claim writes the term's token; a corrupt state is left to the pass; newer: raised."""
    slurm = FakeSlurm([slurm_node(0)], failing=set())
    tokens: list[int] = []

    class _Recording(FakeStore):
        async def update(
            self, token: int, change: Callable[[CoordinatorState], CoordinatorState]
        ) -> CoordinatorState:
            tokens.append(token)
            return await super().update(token, change)

    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0)], store=_Recording())
    await c.memory.claim(7)
    assert tokens == [7]

    class _Corrupt(FakeStore):
        async def update(
            self, token: int, change: Callable[[CoordinatorState], CoordinatorState]
        ) -> CoordinatorState:
            raise StateCorrupt("remediation: not an object")

    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0)], store=_Corrupt())
    await c.memory.claim(7)  # no raise: the pass pauses on it
    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0)], store=_Refusing())
    with pytest.raises(FencedError):
        await c.memory.claim(7)

"""The compare-and-set read of one node (``sinfo -N -n``) against real SLURM 22.05 and 24.11.

It must show every node the way the full ``scontrol`` read does for the decisions, cost one
call when nothing is ambiguous, and leave what sinfo cannot print exactly to the full read.
"""

from __future__ import annotations

import pytest

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import SlurmNode
from slonkd.core.slurm_plan import SkipReason, recorded_causes
from slonkd_sandbox.slurm.cluster import SlurmCluster

pytestmark = pytest.mark.slurm

POD = Cause.parse("pod-terminating")
HEALTH = Cause.parse("health:gpu-xid-79")


async def test_several_nodes_are_read_with_one_scontrol_call(backend: ScontrolBackend) -> None:
    """For several nodes sinfo saves slurmctld nothing: one scontrol read, full nodes."""
    before = backend.calls
    nodes = await backend.read_for_update(["n1", "n2", "n3"])
    assert backend.calls - before == 1
    assert sorted(nodes) == ["n1", "n2", "n3"]
    assert all(n.cpus > 0 for n in nodes.values())  # only the full read knows CPUs
    assert await backend.read_for_update(["n1"]) != {}
    assert (await backend.read_for_update(["n1"]))["n1"].cpus == 0  # the partial sinfo node


async def test_cas_read_agrees_with_the_full_read(
    backend: ScontrolBackend, cluster: SlurmCluster
) -> None:
    """State, reason and extra of drained, down, failed, idle and slonkd-held nodes agree."""
    await backend.drain(["n1"], POD, "bye")
    cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=down it")
    cluster.run("scontrol", "update", "nodename=n3", "state=fail", "reason=Kill task failed")
    cluster.run("scontrol", "update", "nodename=n4", 'extra={"rack":"r4"}')
    names = ["n1", "n2", "n3", "n4"]
    full: dict[str, SlurmNode] = {n.name: n for n in await backend.read_nodes(names)}
    for name in names:
        before = backend.calls
        cas = await backend.read_for_update([name])
        assert backend.calls - before == 1  # sinfo alone: nothing was ambiguous
        a, b = cas[name], full[name]
        assert (a.state.drain, a.state.down, a.state.failed) == (
            b.state.drain,
            b.state.down,
            b.state.failed,
        ), name
        assert (a.live_reason, a.extra, a.reason_user) == (b.live_reason, b.extra, b.reason_user)
        assert a.reason_time == b.reason_time


async def test_single_drain_is_one_read_and_one_update(backend: ScontrolBackend) -> None:
    """A drain and its resume each cost two calls: the sinfo read and the update.

    Also the next drain of a resumed node (24.11 keeps slonkd's old reason on it).
    """
    for _ in range(2):
        assert (await backend.drain(["n1"], POD)).calls == 2
        assert (await backend.resume(["n1"], POD)).calls == 2


async def test_literal_null_extra_is_not_overwritten(
    backend: ScontrolBackend, cluster: SlurmCluster
) -> None:
    """sinfo prints ``(null)`` for no extra; an operator's literal ``(null)`` stays theirs.

    Adding a second cause writes slonkd's cause set into extra: the hold re-reads such a
    node exactly and refuses to overwrite foreign text.
    """
    await backend.drain(["n1"], POD)
    cluster.run("scontrol", "update", "nodename=n1", "extra=(null)")
    before = backend.calls
    result = await backend.drain(["n1"], HEALTH)
    assert backend.calls - before == 2  # sinfo, then scontrol for the unsure extra; no update
    assert result.skipped_for(SkipReason.FOREIGN_EXTRA) == {"n1"}
    n1 = await backend.read_node("n1")
    assert n1 is not None
    assert n1.extra == "(null)"
    assert recorded_causes(n1) == {POD}
    # A release never writes extra for a single cause: the sinfo read suffices.
    assert (await backend.resume(["n1"], POD)).changed == ("n1",)


async def test_reason_with_a_pipe_or_none_is_read_exactly(
    backend: ScontrolBackend, cluster: SlurmCluster
) -> None:
    """Foreign reasons sinfo cannot print unambiguously are read with scontrol, and kept."""
    cluster.run("scontrol", "update", "nodename=n1", "state=drain", "reason=a|b")
    cluster.run("scontrol", "update", "nodename=n2", "state=drain", "reason=none")
    for name in ("n1", "n2"):
        before = backend.calls
        result = await backend.drain([name], POD)
        assert backend.calls - before == 2  # sinfo, then scontrol; no update
        assert result.skipped_for(SkipReason.FOREIGN_REASON) == {name}
    reasons = {n.name: n.reason for n in await backend.read_nodes(["n1", "n2"])}
    assert reasons == {"n1": "a|b", "n2": "none"}

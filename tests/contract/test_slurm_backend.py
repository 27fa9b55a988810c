"""Each backend of the SLURM port against real SLURM 22.05 and 24.11: every operation round-trips.

The same tests for the scontrol backend and the pyslurm one (``any_backend``), with the same
expectations except where the two are documented to differ
(:mod:`slonkd.adapters.slurm.pyslurm_writes`): the calls a write makes (:data:`CALLS`:
pyslurm's one-node read is two RPCs, the node and the partitions; scontrol's a client run),
an ``extra`` a release empties of slonkd's causes (``{}`` through pyslurm: it cannot send
an empty text), a reason group (one a node through pyslurm), and who set a reason (pyslurm
leaves ``reason_uid`` unset: slurmctld shows its own user or none). A test that only one
backend can pass is the scontrol backend's own, and says so.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.parsing import ReasonGroup
from slonkd.adapters.slurm.parsing_show_node import parse_show_node
from slonkd.adapters.slurm.pyslurm_writes import EMPTY_EXTRA
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import MAX_REASON_CHARS, Cause, ReasonOwner, decode_causes, reason_owner
from slonkd.core.slurm_node import DrainStatus, NodeFlag, SlurmNode
from slonkd.core.slurm_plan import SkipReason, recorded_causes
from slonkd.core.topology import TopologySpec, render, stamped
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests.contract.conftest import kind_of, settings_for

pytestmark = pytest.mark.slurm

POD = Cause.parse("pod-terminating")
HEALTH = Cause.parse("health:gpu-xid-79")

CALLS = {
    "scontrol": {"all": 1, "one": 2, "bulk4": 2, "two_extras": 4},
    "pyslurm": {"all": 2, "one": 3, "bulk4": 3, "two_extras": 6},
}
"""SLURM calls: the whole table read; a one-node drain (read, update); a drain of four nodes
with other extras (one read, one hostlist update); two nodes whose extras now differ (read,
update, the second chunk read again, update). scontrol counts client runs; pyslurm RPCs, and
its reads are two RPCs each (``Nodes.load``/``Node.load`` also load the partitions)."""


@pytest.fixture
def backend(any_backend: SlurmBackend) -> SlurmBackend:
    """Each backend in turn (tests/contract/conftest.py)."""
    return any_backend


async def _node(backend: SlurmBackend, name: str) -> SlurmNode:
    node = await backend.read_node(name)
    assert node is not None
    return node


async def _available(backend: SlurmBackend, name: str) -> bool:
    # Right after a resume, 22.05 shows the node idle* (NOT_RESPONDING) for about a second.
    return (await _node(backend, name)).state.available


def _by_name(nodes: list[SlurmNode]) -> dict[str, SlurmNode]:
    return {n.name: n for n in nodes}


def _logged(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text()


async def _wait_for(what: str, probe: object, timeout_s: float = 60.0) -> None:
    assert callable(probe)
    deadline = time.monotonic() + timeout_s
    while not await probe():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        await asyncio.sleep(0.2)


async def test_reads_all_one_and_missing(backend: SlurmBackend) -> None:
    """All nodes come in one call, one node by name, and an unknown name reads as None."""
    before = backend.calls
    nodes = await backend.read_nodes()
    assert backend.calls - before == CALLS[kind_of(backend)]["all"]
    assert sorted(n.name for n in nodes) == ["n1", "n2", "n3", "n4"]
    assert all(n.state.available for n in nodes)
    n2 = await _node(backend, "n2")
    assert n2.cpus == 2
    assert n2.features == ("f_a", "f_b")
    assert await backend.read_node("nope") is None


async def test_drain_and_resume_round_trip(backend: SlurmBackend, cluster: SlurmCluster) -> None:
    """Drain writes slonkd's reason and cause set; resume lifts both and the node is idle."""
    result = await backend.drain(["n1"], POD, "pod worker-1 deleted")
    assert result.changed == ("n1",)
    assert result.calls == CALLS[kind_of(backend)]["one"]  # one compare-and-set read, one update
    n1 = await _node(backend, "n1")
    assert n1.state.drain is DrainStatus.DRAINED
    assert n1.reason == "slonkd:pod-terminating pod worker-1 deleted"
    assert reason_owner(n1.reason) is ReasonOwner.SLONKD
    assert recorded_causes(n1) == {POD}
    if kind_of(backend) == "scontrol":
        assert n1.reason_user == "root"  # pyslurm leaves reason_uid unset (display only)
    result = await backend.resume(["n1"], POD)
    assert result.changed == ("n1",)
    n1 = await _node(backend, "n1")
    assert (n1.live_reason, n1.extra) == ("", "")  # 24.11 keeps the old text; one cause: no extra
    assert decode_causes(n1.extra) == frozenset()
    assert n1.state.drain is DrainStatus.NONE
    await _wait_for("n1 idle", lambda: _available(backend, "n1"))
    assert cluster.node_states()["n1"] == "idle"


async def test_down_fail_and_undrain_round_trip(backend: SlurmBackend) -> None:
    """down, fail and undrain each show in the next read and are undone by resume."""
    assert (await backend.down(["n2"], POD)).changed == ("n2",)
    assert (await _node(backend, "n2")).state.down
    assert (await backend.resume(["n2"], POD)).changed == ("n2",)
    assert (await backend.fail(["n3"], HEALTH)).changed == ("n3",)
    assert (await _node(backend, "n3")).state.failed
    assert (await backend.resume(["n3"], HEALTH)).changed == ("n3",)
    assert (await backend.drain(["n4"], POD)).changed == ("n4",)
    assert (await backend.undrain(["n4"], POD)).changed == ("n4",)

    async def all_up() -> bool:
        return all(n.state.available for n in await backend.read_nodes())

    await _wait_for("n2..n4 back in service", all_up)


async def test_second_cause_holds_the_node_until_both_are_released(
    backend: SlurmBackend,
) -> None:
    """Two slonkd causes: the reason shows the higher; one release keeps the drain."""
    await backend.drain(["n1"], POD, "bye")
    result = await backend.drain(["n1"], HEALTH, "xid 79")
    assert result.changed == ("n1",)
    n1 = await _node(backend, "n1")
    assert n1.reason.startswith("slonkd:health:gpu-xid-79")
    assert recorded_causes(n1) == {POD, HEALTH}
    assert decode_causes(n1.extra) == {POD, HEALTH}
    again = await backend.drain(["n1"], HEALTH, "xid 79")
    assert again.skipped_for(SkipReason.ALREADY_HELD) == {"n1"}
    result = await backend.resume(["n1"], HEALTH)
    assert result.changed == ()
    assert result.skipped_for(SkipReason.OTHER_CAUSES) == {"n1"}
    n1 = await _node(backend, "n1")
    assert n1.state.drain is DrainStatus.DRAINED
    assert n1.reason.startswith("slonkd:pod-terminating")
    assert recorded_causes(n1) == {POD}
    # the cause set left in ``extra`` went with HEALTH: "" (scontrol) or "{}" (pyslurm)
    assert n1.extra == {"scontrol": "", "pyslurm": EMPTY_EXTRA}[kind_of(backend)]
    assert (await backend.resume(["n1"], POD)).changed == ("n1",)
    await _wait_for("n1 idle", lambda: _available(backend, "n1"))


async def test_draining_with_a_job_then_drained(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """A node with a running job reads draining after the drain, drained when the job ends."""
    cluster.run("sbatch", "-o", "/dev/null", "-w", "n2", "-n1", "--wrap", "sleep 4")

    async def running() -> bool:
        return bool(await backend.jobs_on("n2"))

    await _wait_for("job running on n2", running)
    await backend.drain(["n2"], POD)
    n2 = await _node(backend, "n2")
    assert n2.state.drain is DrainStatus.DRAINING
    assert n2.busy

    async def drained() -> bool:
        return (await _node(backend, "n2")).state.drain is DrainStatus.DRAINED

    await _wait_for("n2 drained after the job", drained)


async def test_drain_never_replaces_a_foreign_reason(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """Nodes drained or down under an operator's reason are skipped and keep their reason."""
    cluster.run("scontrol", "update", "nodename=n3", "state=drain", "reason=admin maint")
    cluster.run("scontrol", "update", "nodename=n4", "state=down", "reason=cable swap")
    result = await backend.drain(["n1", "n3", "n4", "ghost"], POD)
    assert result.changed == ("n1",)
    assert result.skipped_for(SkipReason.FOREIGN_REASON) == {"n3", "n4"}
    assert result.skipped_for(SkipReason.NOT_FOUND) == {"ghost"}
    assert (await _node(backend, "n3")).reason == "admin maint"
    assert (await _node(backend, "n4")).reason == "cable swap"
    down = await backend.down(["n3"], POD)
    assert down.skipped_for(SkipReason.FOREIGN_REASON) == {"n3"}


async def test_resume_refuses_foreign_and_redrained_nodes(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """Resume leaves a foreign drain, and a node an operator re-drained after slonkd, drained."""
    cluster.run("scontrol", "update", "nodename=n1", "state=drain", "reason=admin maint")
    await backend.drain(["n2"], POD)
    cluster.run("scontrol", "update", "nodename=n2", "state=drain", "reason=operator took it")
    result = await backend.resume(["n1", "n2"], POD)
    assert result.changed == ()
    assert result.skipped_for(SkipReason.FOREIGN_REASON) == {"n1", "n2"}
    states = cluster.node_states()
    assert (states["n1"], states["n2"]) == ("drained", "drained")
    assert (await _node(backend, "n2")).reason == "operator took it"


HOSTILE = [
    "line1\nline2 State=IDLE",
    "a=b c=d Reason=fake Comment=x",
    "quote \" and ' and `",
    "fake suffix [root@2026-01-01T00:00:00]",
    "x" * 10_000,
    "tab\tctl\x01\x7f nul-free",
]


@pytest.mark.parametrize("text", HOSTILE)
async def test_hostile_reasons_are_stored_safely(
    backend: SlurmBackend, cluster: SlurmCluster, text: str
) -> None:
    """Hostile text is sanitised: one line per node, same reason in text and JSON, bounded."""
    await backend.drain(["n1"], POD, text)
    await backend.set_comment(["n2"], text)
    shown = cluster.run("scontrol", "-o", "show", "node").stdout
    assert len(shown.splitlines()) == 4
    by_text = _by_name(parse_show_node(shown))
    json_reads = ScontrolBackend(settings_for(cluster))  # what a second reader sees, exactly
    by_json = _by_name(await json_reads.read_nodes_json(()))
    assert _by_name(await backend.read_nodes())["n1"].reason == by_json["n1"].reason
    assert by_text["n1"].reason == by_json["n1"].reason
    assert by_text["n2"].comment == by_json["n2"].comment
    assert len(by_json["n1"].reason) <= MAX_REASON_CHARS
    assert reason_owner(by_json["n1"].reason) is ReasonOwner.SLONKD
    assert "\n" not in by_json["n1"].reason
    assert by_json["n3"].state.available  # nothing leaked into another node or field
    assert cluster.node_states()["n1"] == "drained"


async def test_foreign_hostile_reason_falls_back_to_json(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """A foreign reason that breaks the text format is read exactly through JSON."""
    reason = "line1\nline2 Comment=x Reason=slonkd:pod-terminating"
    cluster.run("scontrol", "update", "nodename=n3", "state=drain", f"reason={reason}")
    nodes = _by_name(await backend.read_nodes())
    assert nodes["n3"].reason == reason
    assert reason_owner(nodes["n3"].reason) is ReasonOwner.FOREIGN
    groups = await backend.read_reasons()
    assert [g.reason for g in groups if "n3" in g.nodes] == [reason]
    result = await backend.resume(["n3"], POD)
    assert result.skipped_for(SkipReason.FOREIGN_REASON) == {"n3"}


async def test_reasons_read_lists_only_nodes_with_a_reason(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """The cheap read returns the nodes that carry a reason, with setter and time."""
    await backend.drain(["n1", "n2"], POD, "bye")
    cluster.run("scontrol", "update", "nodename=n4", "state=down", "reason=cable swap")
    groups = await backend.read_reasons()
    by_node: dict[str, ReasonGroup] = {n: g for g in groups for n in g.nodes}
    assert set(by_node) == {"n1", "n2", "n4"}
    if kind_of(backend) == "scontrol":
        assert by_node["n1"] is by_node["n2"]  # one group, one hostlist (sinfo -R's)
    else:
        assert by_node["n1"].reason == by_node["n2"].reason  # pyslurm: a group a node
    assert by_node["n1"].reason == "slonkd:pod-terminating bye"
    assert by_node["n4"].state.startswith("down")
    assert by_node["n4"].time is not None


async def test_requeue_jobs_of_a_node(backend: SlurmBackend, cluster: SlurmCluster) -> None:
    """Requeueable jobs of a node go back to the queue; a --no-requeue job is reported."""
    cluster.run("sbatch", "-o", "/dev/null", "-w", "n4", "-n1", "--wrap", "sleep 300")
    cluster.run(
        "sbatch", "-o", "/dev/null", "-w", "n4", "-n1", "--no-requeue", "--wrap", "sleep 301"
    )

    async def two_running() -> bool:
        return len(await backend.jobs_on("n4")) == 2

    await _wait_for("two jobs on n4", two_running)
    jobs = await backend.jobs_on("n4")
    result = await backend.requeue_jobs("n4")
    assert len(result.requeued) == 1
    assert len(result.not_requeueable) == 1
    assert {*result.requeued, *result.not_requeueable} == {j.job_id for j in jobs}
    out = cluster.run("squeue", "-h", "-o", "%i %T", "-j", str(result.requeued[0])).stdout
    assert out.split()[1] in {"COMPLETING", "PENDING", "REQUEUED", "CONFIGURING", "RUNNING"}
    # The requeued job restarts later (BeginTime); it is no longer the original run.
    assert str(result.not_requeueable[0]) in cluster.run("squeue", "-h", "-o", "%i").stdout


async def test_reboot_request_drains_with_slonkds_reason(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """A reboot request shows REBOOT_* flags with slonkd's reason; foreign nodes are skipped."""
    cluster.run("scontrol", "update", "nodename=n2", "state=drain", "reason=admin maint")
    result = await backend.request_reboot(["n1", "n2"], HEALTH, "xid 79")
    assert result.changed == ("n1",)
    assert result.skipped_for(SkipReason.FOREIGN_REASON) == {"n2"}
    n1 = await _node(backend, "n1")
    assert n1.state.flags & {NodeFlag.REBOOT_REQUESTED, NodeFlag.REBOOT_ISSUED}
    assert n1.reason.startswith("slonkd:health:gpu-xid-79")
    log = Path(cluster.root / "log" / "reboot.log")

    async def rebooted() -> bool:
        return await asyncio.to_thread(_logged, log, "reboot requested")

    await _wait_for("RebootProgram ran for n1", rebooted, timeout_s=30)


async def test_reboot_of_a_node_slonkd_already_drained_is_sent_once(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """The ladder's normal path: slonkd drained the node for the failure, then asks a reboot.

    ``scontrol reboot`` reaches slurmctld (REBOOT_* flag, the RebootProgram runs), the
    node keeps slonkd's reason and every cause it held, and a second request while the
    reboot is pending sends nothing (issue 15 item 9).
    """
    await backend.drain(["n1"], HEALTH, "xid 79")
    await backend.drain(["n1"], POD, "bye")
    result = await backend.request_reboot(["n1"], HEALTH, "by slonkd")
    assert result.changed == ("n1",), result
    n1 = await _node(backend, "n1")
    assert n1.state.flags & {NodeFlag.REBOOT_REQUESTED, NodeFlag.REBOOT_ISSUED}, n1.state
    assert reason_owner(n1.reason) is ReasonOwner.SLONKD, n1.reason
    assert n1.reason.startswith("slonkd:health:gpu-xid-79"), n1.reason
    assert recorded_causes(n1) == {HEALTH, POD}
    again = await backend.request_reboot(["n1"], HEALTH, "by slonkd")
    assert again.changed == ()
    assert again.skipped_for(SkipReason.REBOOT_PENDING) == {"n1"}, again
    log = Path(cluster.root / "log" / "reboot.log")

    async def rebooted() -> bool:
        return await asyncio.to_thread(_logged, log, "reboot requested")

    await _wait_for("RebootProgram ran for n1", rebooted, timeout_s=30)
    await asyncio.sleep(2)  # a second request would have run the program again by now
    runs = (await asyncio.to_thread(log.read_text)).count("reboot requested")
    assert runs == 1, f"RebootProgram ran {runs} times"


async def test_comment_round_trips(backend: SlurmBackend) -> None:
    """A comment is written sanitised to every named node and reads back."""
    await backend.set_comment(["n1", "n2"], 'rack "r1"\nrow 2')
    nodes = _by_name(await backend.read_nodes())
    assert nodes["n1"].comment == "rack 'r1' row 2"
    assert nodes["n2"].comment == "rack 'r1' row 2"
    assert nodes["n3"].comment == ""
    assert json.dumps(nodes["n1"].comment)


async def test_nodes_with_different_extra_drain_in_one_call(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """Someone else's per-node extra neither splits a bulk drain nor gets overwritten."""
    for i in range(1, 5):
        cluster.run("scontrol", "update", f"nodename=n{i}", f'extra={{"rack":"r{i}"}}')
    result = await backend.drain(["n1", "n2", "n3", "n4"], POD)
    assert result.calls == CALLS[kind_of(backend)]["bulk4"]  # one read, one hostlist update
    nodes = _by_name(await backend.read_nodes())
    assert [nodes[f"n{i}"].extra for i in range(1, 5)] == [
        f'{{"rack":"r{i}"}}' for i in range(1, 5)
    ]
    assert all(recorded_causes(n) == {POD} for n in nodes.values())
    second = await backend.drain(["n1", "n2"], HEALTH)
    # two different extras now need writing: one update each, the second chunk read again
    # right before its write (the compare-and-set window is one chunk, see cas_window)
    assert second.calls == CALLS[kind_of(backend)]["two_extras"]
    assert json.loads(_by_name(await backend.read_nodes())["n1"].extra) == {
        "rack": "r1",
        "slonkd": ["health:gpu-xid-79", "pod-terminating"],
    }


async def test_the_topology_reads_as_scontrol_prints_it(
    backend_factory: Callable[..., SlurmBackend],
    cluster_factory: Callable[..., SlurmCluster],
) -> None:
    """A tree topology: each backend's ``show_topology`` is ``scontrol show topology``'s text.

    pyslurm reads none: its backend prints ``slurm_load_topo``'s answer with the function
    scontrol prints it with (ctypes, ``libslurm_extra.py``); the drift check parses either.
    """
    cluster = cluster_factory(SlurmLayout(topology_plugin="topology/tree"))
    labels = {
        n: {
            "topology.kubernetes.io/zone": "z0",
            "slonk.dev/spine": "s0",
            "slonk.dev/leaf": f"r{i % 2}",
        }
        for i, n in enumerate(cluster.layout.nodes)
    }
    cluster.topology_conf.write_text(stamped(render(labels, TopologySpec())))
    cluster.run("scontrol", "reconfigure")
    shown = cluster.run("scontrol", "show", "topology").stdout
    assert "Switches=l2-z0_s0_r0,l2-z0_s0_r1" in shown  # the tree, not one flat switch
    assert await backend_factory(cluster).show_topology() == shown

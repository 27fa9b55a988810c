"""One coordinator pass with fakes for SLURM, the state store and the K8s writers.

No service is needed: the informers' caches are filled by hand, the writers (typed against
the protocols of ``slonkd.adapters.kube.ports`` and ``SlurmBackend``) are recording fakes
handed to the coordinator as its ``Parts``. What is tested is the pass's orchestration: one
failing action never aborts the rest of the pass (issue 15 item 9), admission within the
budget, the fast path's marks through the same budget, the dry run, the executors' table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

import pytest
import structlog

from slonkd.adapters.kube.state import FencedError
from slonkd.adapters.slurm.results import UpdateResult
from slonkd.core.errors import OutcomeUnknownError, SlonkdError, TransientError
from slonkd.core.health import Remediation, fail
from slonkd.core.kube_changes import ChangeResult
from slonkd.core.kube_objects import (
    KubeNodeName,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)
from slonkd.core.plan import Kind, Policy
from slonkd.core.reasons import Cause, format_reason
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd.runtime.coordinating.executing import SLURM_KINDS
from slonkd.runtime.coordinating.reconciling import Coordinator
from tests.unit.coordinator_fakes import (
    AuditRecorder,
    FakeElector,
    FakeNodeWriter,
    FakeSlurm,
    FakeStore,
    coordinator_with,
    kube_node,
    saw,
    slurm_node,
    worker_pod,
)


async def test_a_failing_slurm_write_does_not_abort_the_rest_of_the_pass() -> None:
    """The drain for one cause fails: the other cause's drain and the K8s marks still run."""
    slurm = FakeSlurm(
        [slurm_node(0), slurm_node(1), slurm_node(2, "IDLE+FAIL", "Kill task failed")],
        failing={"k8s-cordoned"},
    )
    writer = FakeNodeWriter()
    nodes = [kube_node(0, cordoned=True), kube_node(1, taint="maint.example/repair"), kube_node(2)]
    c = coordinator_with(slurm, writer, nodes)
    await c.reconcile_all()
    assert slurm.drained == [("k8s-tainted:repair", ["w-1"])]
    assert ("cordon", "kn-2") in writer.calls  # the SLURM failure on w-2 is still marked
    assert c.passes == 1


async def test_a_slurm_write_of_unknown_outcome_is_recorded_so_and_the_next_pass_reads_it() -> None:
    """The drain timed out after it left (issue 37 item 2): audited and logged as unknown.

    slurmctld applied it late; the next pass reads the drain and sends nothing again. The
    adapter never re-sends such a write itself; a pass is what judges it, on its own read.
    """
    slurm = FakeSlurm([slurm_node(0), slurm_node(1)], failing=set())
    sent: list[list[str]] = []

    async def answered_late(names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        sent.append(list(names))
        slurm.nodes[0] = slurm_node(0, "IDLE+DRAIN", format_reason(cause, text))  # applied, late
        raise OutcomeUnknownError(
            "scontrol update timed out after 20.0 s; it may have been applied"
        )

    slurm.drain = answered_late  # type: ignore[method-assign]
    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0, cordoned=True), kube_node(1)])
    audit = AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    with structlog.testing.capture_logs() as logs:
        await c.reconcile_all()
    (record,) = [r for r in audit.records if r["action"] == "drain"]
    assert record["outcome"].startswith("outcome unknown: scontrol update timed out"), record
    (line,) = [e for e in logs if e["event"] == "coordinator.action_outcome_unknown"]
    assert (line["nodes"], line["cause"]) == (["w-0"], "k8s-cordoned")
    assert not [e for e in logs if e["event"] == "coordinator.action_failed"]
    await c.reconcile_all()
    assert sent == [["w-0"]]


async def test_a_failing_kube_write_does_not_abort_the_other_nodes() -> None:
    """Cordoning one K8s node fails: the other failing node is still cordoned."""
    slurm = FakeSlurm(
        [
            slurm_node(0, "IDLE+FAIL", "Kill task failed"),
            slurm_node(1, "IDLE+FAIL", "Kill task failed"),
        ],
        failing=set(),
    )
    writer = FakeNodeWriter(failing={"kn-0"})
    c = coordinator_with(slurm, writer, [kube_node(0), kube_node(1)])
    await c.reconcile_all()
    assert ("cordon", "kn-1") in writer.calls


async def test_the_cordon_records_the_slurm_node_it_is_for() -> None:
    """slonkd's cordon for w-1's SLURM failure names w-1: only w-1's view may undo it."""
    slurm = FakeSlurm(
        [slurm_node(0), slurm_node(1, "IDLE+FAIL", "Kill task failed")], failing=set()
    )
    writer = FakeNodeWriter()
    c = coordinator_with(
        slurm, writer, [kube_node(0), kube_node(1)], policy=Policy(remediate=False)
    )
    await c.reconcile_all()
    assert ("cordon", "kn-1") in writer.calls
    assert writer.cache["kn-1"].marked_for == "w-1"


async def test_a_lost_lease_still_stops_the_pass() -> None:
    """Isolation never hides a lost lease: after it, no further write of the pass happens."""
    slurm = FakeSlurm(
        [slurm_node(0), slurm_node(1, "IDLE+FAIL", "Kill task failed")], failing=set()
    )
    writer = FakeNodeWriter()
    c = coordinator_with(slurm, writer, [kube_node(0, cordoned=True), kube_node(1)])
    elector = cast(FakeElector, c.elector)

    async def drain_then_lose(names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        elector.valid = False
        raise TransientError("scontrol timed out")

    slurm.drain = drain_then_lose  # type: ignore[method-assign]
    with pytest.raises(SlonkdError):
        await c.reconcile_all()
    assert writer.calls == []  # kn-1's cordon was never sent


async def test_after_a_reset_standing_failures_are_taken_within_the_budget() -> None:
    """Six failures at once open the breaker; after a reset two are taken, none reopens it.

    The failures still standing when a human resets the breaker are no mass event
    (issue 15 item 12): the budget (2) admits two, the rest wait, the breaker stays shut.
    """
    fails = [slurm_node(i, "IDLE+FAIL", "Kill task failed") for i in range(6)]
    slurm = FakeSlurm([*fails, *(slurm_node(i) for i in range(6, 20))], failing=set())
    writer = FakeNodeWriter()
    c = coordinator_with(
        slurm,
        writer,
        [kube_node(i) for i in range(20)],
        max_out=2,
        mass_percent=20,
        policy=Policy(remediate=False),  # marks only: the fakes do not restart pods
    )
    await c.reconcile_all()
    store = cast(FakeStore, c.memory.store)
    assert store.state.breaker_open
    assert "mass event" in store.state.breaker_reason
    assert not [call for call in writer.calls if call[0] == "cordon"]
    store.state = replace(store.state, breaker_open=False, breaker_reason="reset by alice")
    await c.reconcile_all()
    await c.reconcile_all()
    assert not store.state.breaker_open, store.state.breaker_reason
    cordoned = {name for what, name in writer.calls if what == "cordon"}
    assert len(cordoned) == 2, writer.calls


async def test_a_failing_scontrol_reboot_still_requests_the_reboot_on_the_k8s_node() -> None:
    """``scontrol reboot`` fails (no RebootProgram): the K8s reboot taint is still set.

    The reboot request is for the site's tooling first; SLURM's half failing must not keep
    the K8s half from happening, nor abort the pass (issue 15 item 9).
    """
    slurm = FakeSlurm(
        [slurm_node(0), slurm_node(1, "IDLE+FAIL", "Kill task failed")], failing=set()
    )

    async def no_reboot_program(names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        raise TransientError("scontrol reboot: RebootProgram isn't defined")

    slurm.request_reboot = no_reboot_program  # type: ignore[attr-defined]
    writer = FakeNodeWriter()
    c = coordinator_with(slurm, writer, [kube_node(0), kube_node(1)])
    fake_health = {"xid": fail("xid", "gpu-xid-79", Remediation.REBOOT)}
    c.health["w-0"] = ("kn-0", fake_health)
    audit = AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    await c.reconcile_all()
    assert ("taint slonk.dev/reboot-requested", "kn-0") in writer.calls
    assert ("cordon", "kn-1") in writer.calls
    (failed,) = [r for r in audit.records if r["action"] == "slurm-reboot"]
    assert failed["outcome"].startswith("failed: scontrol reboot: RebootProgram"), failed


async def test_a_reboot_step_requests_the_reboot_from_slurm_once_and_audits_it() -> None:
    """The ladder's reboot step on a node slonkd drained: SLURM is asked once, and it is audited.

    Two passes (the second inside the cool-down) send one ``request_reboot`` for the failure's
    cause; the audit log has a ``slurm-reboot`` record with that cause next to the K8s half.
    """
    held = slurm_node(0, "IDLE+DRAIN", "slonkd:health:gpu-xid-79 by slonkd agent")
    slurm = FakeSlurm([held, slurm_node(1)], failing=set())
    asked: list[tuple[list[str], str]] = []

    async def request_reboot(names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        asked.append((list(names), str(cause)))
        return UpdateResult(changed=tuple(NodeName(n) for n in names), calls=2)

    slurm.request_reboot = request_reboot  # type: ignore[attr-defined]
    writer = FakeNodeWriter()
    c = coordinator_with(slurm, writer, [kube_node(0), kube_node(1)])
    audit = AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    c.health["w-0"] = ("kn-0", {"xid": fail("xid", "gpu-xid-79", Remediation.REBOOT)})
    await c.reconcile_all()
    await c.reconcile_all()
    assert asked == [(["w-0"], "health:gpu-xid-79")]
    reboots = [r for r in audit.records if r["action"] == "slurm-reboot"]
    assert [(r["node"], r["cause"], r["outcome"]) for r in reboots] == [
        ("w-0", "health:gpu-xid-79", "changed")
    ]
    assert ("taint slonk.dev/reboot-requested", "kn-0") in writer.calls


async def test_a_newer_leaders_token_ends_the_pass() -> None:
    """A write refused for a newer fencing token is never isolated: the term ends at once."""
    slurm = FakeSlurm(
        [
            slurm_node(0, "IDLE+FAIL", "Kill task failed"),
            slurm_node(1, "IDLE+FAIL", "Kill task failed"),
        ],
        failing=set(),
    )
    writer = FakeNodeWriter()

    async def fenced(name: str, *, cause: str) -> ChangeResult:
        raise FencedError("state written by token 9")

    writer.cordon = fenced  # type: ignore[method-assign]
    c = coordinator_with(slurm, writer, [kube_node(0), kube_node(1)])
    with pytest.raises(FencedError):
        await c.reconcile_all()
    assert writer.calls == []


async def test_a_pass_takes_out_only_what_the_budget_admits() -> None:
    """Five failures, a budget of two: two K8s nodes are cordoned, three are refused.

    Below the mass-event threshold the budget admits what fits and refuses the rest (in the
    pass's snapshot, none of theirs cordoned); the exhausted budget opens the breaker.
    """
    fails = [slurm_node(i, "IDLE+FAIL", "Kill task failed") for i in range(5)]
    slurm = FakeSlurm([*fails, *(slurm_node(i) for i in range(5, 20))], failing=set())
    writer = FakeNodeWriter()
    c = coordinator_with(
        slurm, writer, [kube_node(i) for i in range(20)], max_out=2, policy=Policy(remediate=False)
    )
    await c.reconcile_all()
    cordoned = {name for what, name in writer.calls if what == "cordon"}
    assert len(cordoned) == 2, writer.calls
    assert c.snapshot is not None
    refused = set(c.snapshot.admission.refused)
    assert len(refused) == 3
    assert not cordoned & {f"kn-{n.removeprefix('w-')}" for n in refused}
    assert set(c.snapshot.admission.refused.values()) == {
        "budget of pool default exhausted: 0 of 20 out, limit 2, 5 more wanted"
    }
    assert cast(FakeStore, c.memory.store).state.breaker_open


async def test_fast_marks_go_through_the_budget_and_only_mark() -> None:
    """The poll sees three SLURM failures: with a budget of one, one K8s node is cordoned.

    The fast path between passes takes marking actions only (no drain, no eviction) and
    asks the same budget as a pass: the other two wait for it.
    """
    slurm = FakeSlurm([slurm_node(i) for i in range(10)], failing=set())
    writer = FakeNodeWriter()
    c = coordinator_with(slurm, writer, [kube_node(i) for i in range(10)], max_out=1)
    await c.reconcile_all()  # the last full read the fast path patches
    assert writer.calls == []
    saw(c, [slurm_node(i, "IDLE+FAIL", "Kill task failed") for i in range(3)])
    assert c.observer.dirty.is_set()
    await c.fast_path.mark()
    cordoned = {name for what, name in writer.calls if what == "cordon"}
    assert len(cordoned) == 1, writer.calls
    marks = [what for what, _ in writer.calls]
    assert all(w in ("cordon", "condition") or w.startswith("taint ") for w in marks), marks
    assert slurm.drained == []
    assert c.changes.empty()  # taken: the next fast path does not mark them again


async def test_fast_marks_meeting_a_newer_token_end_the_term() -> None:
    """Issue 37 item 8c: a FencedError in the fast path propagates out of ``mark``.

    A write refused for a newer fencing token is not a failed mark to leave to the next pass:
    the term must end (the elector gives the Lease up), as in a pass.
    """
    slurm = FakeSlurm([slurm_node(i) for i in range(3)], failing=set())
    writer = FakeNodeWriter()
    c = coordinator_with(slurm, writer, [kube_node(i) for i in range(3)])
    await c.reconcile_all()

    async def fenced(name: str, *, cause: str, **_: Any) -> Any:
        raise FencedError("state written by token 9")

    writer.cordon = fenced  # type: ignore[method-assign]
    writer.cordon_and_taint = fenced  # type: ignore[method-assign]
    saw(c, [slurm_node(1, "IDLE+FAIL", "Kill task failed")])
    with pytest.raises(FencedError):
        await c.fast_path.mark()
    assert writer.calls == []


async def test_fast_marks_leave_reasons_that_are_not_slurms_to_the_pass() -> None:
    """A reason an operator set (not SLURM's own) is not the fast path's: nothing is marked."""
    slurm = FakeSlurm([slurm_node(i) for i in range(3)], failing=set())
    writer = FakeNodeWriter()
    c = coordinator_with(slurm, writer, [kube_node(i) for i in range(3)])
    await c.reconcile_all()
    saw(c, [slurm_node(0, "IDLE+DRAIN", "disk swap by alice")])
    await c.fast_path.mark()
    assert writer.calls == []


async def test_a_dry_run_writes_nothing_and_audits_each_plan_once() -> None:
    """dry_run: no SLURM or K8s write; every planned action is audited as observed, once."""
    slurm = FakeSlurm(
        [slurm_node(0), slurm_node(1, "IDLE+FAIL", "Kill task failed")], failing=set()
    )
    writer = FakeNodeWriter()
    c = coordinator_with(slurm, writer, [kube_node(0, cordoned=True), kube_node(1)], dry_run=True)
    audit = AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    await c.reconcile_all()
    await c.reconcile_all()
    assert writer.calls == []
    assert slurm.drained == []
    planned = sorted((r["action"], r["node"]) for r in audit.records)
    assert ("drain", "w-0") in planned
    assert ("cordon", "w-1") in planned
    assert len(planned) == len(set(planned)), planned  # the second pass said nothing again
    assert {r["outcome"] for r in audit.records} == {"observed"}  # dry run: observe everywhere
    assert all(r["dry_run"] and r["mode"] == "observe" for r in audit.records)


def test_every_action_kind_has_exactly_one_executor() -> None:
    """The executors' table covers every Kind once: SLURM kinds there, K8s kinds here."""
    c = coordinator_with(FakeSlurm([], failing=set()), FakeNodeWriter(), [])
    kube = set(c.executor.kube_writes)
    assert not kube & SLURM_KINDS
    assert kube | SLURM_KINDS == set(Kind)
    assert set(c.executor.slurm_writes) == SLURM_KINDS - {Kind.REQUEUE}  # per node: its own


async def test_a_node_the_pass_releases_is_not_out_when_the_budget_weighs_a_cordon() -> None:
    """The soak's I4 (seed 2026, t = 1,697 s): a cordon admitted on an outage it releases.

    w-0 and w-1 share K8s node kn-0; the pool's budget is one node. An operator drained w-0
    and had cordoned kn-0, so slonkd drained w-1 after the cordon (k8s-cordoned); then the
    operator uncordoned kn-0 and w-0's health failed. In the next pass slonkd releases w-1
    (its cause is gone) and wants kn-0 cordoned for w-0: that cordon takes w-1 out again, on
    top of w-0, two out against a limit of one. Counting w-1 as already out because of the
    drain this very pass lifts made the cordon free; it must be refused.
    """
    operator = slurm_node(0, "IDLE+DRAIN", "ops: maintenance ticket 675")
    mirrored = slurm_node(1, "IDLE+DRAIN", "slonkd:k8s-cordoned")
    slurm = FakeSlurm([operator, mirrored, *(slurm_node(i) for i in range(2, 10))], failing=set())
    writer = FakeNodeWriter()
    nodes = [kube_node(i) for i in range(10) if i != 1]  # kn-1 holds no pod: w-1 is on kn-0
    c = coordinator_with(slurm, writer, nodes, max_out=1, policy=Policy(remediate=False))
    c.pods._cache["slonk/w-1"] = replace(worker_pod(1), node_name=KubeNodeName("kn-0"))
    c.observer.health["w-0"] = (
        "kn-0",
        {"mounts": fail("mounts", "mount-missing", Remediation.MANUAL, "/home missing")},
    )
    await c.reconcile_all()
    assert c.snapshot is not None
    assert "w-0" in c.snapshot.admission.refused, c.snapshot.admission
    assert ("cordon", "kn-0") not in writer.calls, writer.calls
    assert slurm.resumed == [("k8s-cordoned", ["w-1"])]  # the release itself goes ahead


async def test_the_cordon_and_the_taint_go_as_one_write_and_fail_together() -> None:
    """A failure's cordon and taint are one write (issue 21), in a pass and in the fast path.

    Each is still audited on its own; when the joined write fails, both are audited failed.
    """
    slurm = FakeSlurm(
        [slurm_node(0, "IDLE+FAIL", "Kill task failed"), slurm_node(1)], failing=set()
    )
    writer = FakeNodeWriter()
    c = coordinator_with(
        slurm, writer, [kube_node(0), kube_node(1)], policy=Policy(remediate=False)
    )
    audit = AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    await c.reconcile_all()
    assert writer.joined == ["kn-0"]
    assert {(r["action"], r["outcome"]) for r in audit.records} >= {
        ("cordon", "changed"),
        ("taint", "changed"),
    }
    slurm = FakeSlurm([slurm_node(0), slurm_node(1)], failing=set())
    writer = FakeNodeWriter(failing={"kn-1"})
    c = coordinator_with(
        slurm, writer, [kube_node(0), kube_node(1)], policy=Policy(remediate=False)
    )
    audit = AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    await c.reconcile_all()
    saw(c, [slurm_node(1, "IDLE+FAIL", "Kill task failed")])
    await c.fast_path.mark()
    failed = {r["action"] for r in audit.records if r["outcome"].startswith("failed")}
    assert {"cordon", "taint"} <= failed, audit.records


async def test_a_pass_right_after_the_polls_read_takes_its_table() -> None:
    """The poll's table (no write since) serves the pass: no read, no turn of the read limit."""
    slurm = FakeSlurm([slurm_node(0), slurm_node(1)], failing=set())
    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0), kube_node(1)])
    c.pass_read.max_age_s = 60.0  # the poll's period (0 in these settings: no poll)
    c.table.keep(*c.table.begin(), [slurm_node(0, "IDLE+FAIL", "Kill task failed"), slurm_node(1)])
    writer_calls = c.executor.nodes
    await c.reconcile_all()
    assert (slurm.reads, c.reads.reads, c.pass_read.reused) == (0, 0, 1)
    assert ("cordon", "kn-0") in cast(FakeNodeWriter, writer_calls).calls  # acted on it
    c.table.table = None  # a write of slonkd's since (a K8s write drops nothing)
    await c.reconcile_all()
    assert (slurm.reads, c.reads.reads, c.pass_read.reused) == (1, 1, 1)


async def _pass_while_the_poll_reads(
    during: Callable[[Coordinator, FakeSlurm], None] = lambda c, slurm: None,
) -> tuple[Coordinator, FakeSlurm]:
    """A pass begun while the poll's whole read is on its way; ``during`` runs before it ends."""
    slurm = FakeSlurm([slurm_node(0), slurm_node(1)], failing=set())
    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0), kube_node(1)])
    c.pass_read.max_age_s = 60.0  # the poll's period (0 in these settings: no poll)
    answer = asyncio.Event()
    read = slurm.read_nodes

    async def slow(names: Sequence[str] = ()) -> list[SlurmNode]:
        await answer.wait()
        return await read(names)

    slurm.read_nodes = slow  # type: ignore[method-assign]
    poll = asyncio.create_task(c.slurm.read_nodes())  # the poll's read, on its way
    await asyncio.sleep(0)
    passing = asyncio.create_task(c.reconcile_all())
    await asyncio.sleep(0.05)
    during(c, slurm)
    slurm.read_nodes = read  # type: ignore[method-assign]  # later reads answer at once
    answer.set()
    await asyncio.wait_for(asyncio.gather(poll, passing), 5)
    return c, slurm


async def test_a_pass_while_the_poll_reads_waits_for_that_read() -> None:
    """A pass that comes while the poll's whole read is on its way takes it: no second request.

    At 5,000 nodes the poll's read takes a few tenths of its 0.7 s period, and a pass that
    came then read the whole table again (the issue-38 comparison: resync_5000_slurm_read_ms
    0 -> 68, half the passes reading twice what the poll was reading).
    """
    c, slurm = await _pass_while_the_poll_reads()
    assert (slurm.reads, c.reads.reads, c.pass_read.reused) == (1, 0, 1)


async def test_a_pass_reads_on_its_own_when_the_read_it_waited_for_crossed_a_write() -> None:
    """The poll's read on its way when slonkd wrote: its table is never served, the pass reads."""

    def write(c: Coordinator, _slurm: FakeSlurm) -> None:
        with c.table.writing():  # a write of slonkd's while the poll reads
            pass

    c, slurm = await _pass_while_the_poll_reads(write)
    assert (slurm.reads, c.reads.reads, c.pass_read.reused) == (2, 1, 0)


async def test_a_failure_the_poll_hands_over_during_a_pass_read_is_still_marked() -> None:
    """The poll's read, newer than the pass's, hands a failure while the pass reads: kept.

    The pass's read began before the failure and does not show it; dropping what the poll
    handed over meanwhile ("this read has them all") left the failure unmarked until another
    pass read SLURM again.
    """

    class Slow(FakeSlurm):
        async def read_nodes(self, names: Sequence[str] = ()) -> list[SlurmNode]:
            nodes = list(self.nodes)  # the state when the read began
            await asyncio.sleep(0.01)
            saw(c, [slurm_node(1, "IDLE+FAIL", "Kill task failed")])
            return nodes

    slurm = Slow([slurm_node(i) for i in range(3)], failing=set())
    writer = FakeNodeWriter()
    c = coordinator_with(slurm, writer, [kube_node(i) for i in range(3)])
    await c.reconcile_all()
    assert writer.calls == []  # the pass's read had no failure
    await c.fast_path.mark()
    assert ("cordon", "kn-1") in writer.calls, writer.calls


async def test_a_gpu_pools_tolerated_taint_opens_no_breaker_and_maintenance_still_drains() -> None:
    """Issue 37 item 1: every node tainted nvidia.com/gpu=present:NoSchedule, tolerated.

    The pool tolerates its nodes' taint (the chart's ``pools[].tolerations``): the first pass
    under the default budget (10 %, mass 20 %) drains nothing, refuses nothing and leaves the
    breaker shut; it wanted all twenty out as ``k8s-tainted`` and opened it. A maintenance
    taint the pool does not tolerate on one node then drains that node alone.
    """
    gpu = Taint(key="nvidia.com/gpu", effect=TaintEffect.NO_SCHEDULE, value="present")
    slurm = FakeSlurm([slurm_node(i) for i in range(20)], failing=set())
    writer = FakeNodeWriter()
    nodes = [replace(kube_node(i), taints=(gpu,)) for i in range(20)]
    c = coordinator_with(slurm, writer, nodes, max_out=10, max_out_percent=10, mass_percent=20)
    toleration = Toleration(key="nvidia.com/gpu", operator=TolerationOperator.EXISTS)
    for key, p in c.pods._cache.items():
        c.pods._cache[key] = replace(p, tolerations=(toleration,))
    await c.reconcile_all()
    store = cast(FakeStore, c.memory.store)
    assert not store.state.breaker_open, store.state.breaker_reason
    assert c.snapshot is not None
    assert c.snapshot.admission.refused == {}
    assert (slurm.drained, writer.calls) == ([], [])
    maint = Taint(key="example.com/maint", effect=TaintEffect.NO_EXECUTE)
    c.nodes._cache["kn-3"] = replace(nodes[3], taints=(gpu, maint))
    await c.reconcile_all()
    assert slurm.drained == [("k8s-tainted:maint", ["w-3"])]
    assert not store.state.breaker_open, store.state.breaker_reason

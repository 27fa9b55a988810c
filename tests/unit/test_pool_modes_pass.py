"""A pool's mode in a coordinator's pass (issue 40 item 1), on the fakes of a pass.

``observe`` decides and reports but changes nothing (no SLURM, K8s or pod write; audited
``observed``, counted, one Event per node and action, not every pass); ``quarantine`` marks
without the ladder (no eviction); a pool switched to ``full`` takes what it held back within
the budget, never as a mass event. Neighbours: :mod:`slonkd.core.modes` (the rules, tested in
``test_modes``), :mod:`slonkd.runtime.coordinating.pool_modes`, ``coordinator_fakes``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from slonkd.core.coordinator_state import PoolMode
from slonkd.core.plan import Policy
from slonkd.runtime.coordinating.reconciling import Coordinator
from tests.unit import coordinator_fakes as fakes


def _switch(store: fakes.FakeStore, mode: str, by: str = "ops") -> None:
    """What ``slonkd mode default MODE`` writes to the state ConfigMap."""
    store.state = replace(store.state, pool_modes={"default": PoolMode(mode=mode, by=by, at=1.0)})


def _events(c: Coordinator) -> list[str]:
    return cast(fakes.FakeEvents, c.executor.events).reasons


async def test_observe_changes_nothing_and_reports_each_action_once() -> None:
    """Failures and maintenance in an observe pool: nothing written, all audited and counted."""
    slurm = fakes.FakeSlurm(
        [
            fakes.slurm_node(0),
            fakes.slurm_node(1, "IDLE+FAIL", "Kill task failed"),
            fakes.slurm_node(2),
        ],
        failing=set(),
    )
    writer, pods, store = fakes.FakeNodeWriter(), fakes.FakePodWriter(), fakes.FakeStore()
    _switch(store, "observe")
    c = fakes.coordinator_with(
        slurm, writer, [fakes.kube_node(0, cordoned=True), fakes.kube_node(1), fakes.kube_node(2)],
        pods=pods, store=store,
    )  # fmt: skip
    audit = fakes.AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    await c.reconcile_all()
    await c.reconcile_all()
    assert writer.calls == []
    assert slurm.drained == []
    assert pods.evicted == []
    assert not store.state.breaker_open
    assert store.state.nodes_out == frozenset()
    observed = [(r["action"], r["node"]) for r in audit.records]
    assert {r["outcome"] for r in audit.records} == {"observed"}
    assert {r["mode"] for r in audit.records} == {"observe"}
    assert ("drain", "w-0") in observed  # the cordoned K8s node's maintenance drain
    assert {"cordon", "taint", "evict"} <= {a for a, n in observed if n == "w-1"}
    assert len(observed) == len(set(observed)), observed  # the second pass said nothing again
    assert _events(c).count("SlonkdWouldAct") == len(observed)  # one Event per node and action
    counted = c.metrics.registry.get_sample_value(
        "slonkd_would_act_total", {"mode": "observe", "action": "cordon", "cause": "slurm-failure"}
    )
    assert counted == 1
    assert c.status_sections()["modes"]["default"]["mode"] == "observe"


async def test_observe_holds_back_the_fast_paths_marks_too() -> None:
    """The poll sees a failure in an observe pool: the fast path marks nothing."""
    slurm = fakes.FakeSlurm([fakes.slurm_node(i) for i in range(3)], failing=set())
    writer, store = fakes.FakeNodeWriter(), fakes.FakeStore()
    _switch(store, "observe")
    c = fakes.coordinator_with(slurm, writer, [fakes.kube_node(i) for i in range(3)], store=store)
    await c.reconcile_all()
    fakes.saw(c, [fakes.slurm_node(0, "IDLE+FAIL", "Kill task failed")])
    await c.fast_path.mark()
    assert writer.calls == []


async def test_quarantine_drains_and_marks_but_never_evicts() -> None:
    """A SLURM failure and a failing check in a quarantine pool: marks, drains, no ladder."""
    slurm = fakes.FakeSlurm(
        [fakes.slurm_node(0, "IDLE+FAIL", "Kill task failed"), fakes.slurm_node(1)], failing=set()
    )
    writer, pods, store = fakes.FakeNodeWriter(), fakes.FakePodWriter(), fakes.FakeStore()
    _switch(store, "quarantine")
    c = fakes.coordinator_with(
        slurm,
        writer,
        [fakes.kube_node(0), fakes.kube_node(1, cordoned=True)],
        pods=pods,
        store=store,
    )
    audit = fakes.AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    await c.reconcile_all()
    await c.reconcile_all()
    assert ("cordon", "kn-0") in writer.calls
    assert any(w.startswith("taint ") and n == "kn-0" for w, n in writer.calls)
    assert ("k8s-cordoned", ["w-1"]) in slurm.drained  # SLURM drains are taken
    assert pods.evicted == []  # the ladder's first rung is held back ...
    held = [(r["action"], r["node"]) for r in audit.records if r["outcome"] == "observed"]
    assert held == [("evict", "w-0")]  # ... and reported, once
    assert store.state.remediation == {}  # no rung recorded as tried


async def test_switching_to_full_takes_the_standing_failures_within_the_budget() -> None:
    """Six failures held back in observe, a budget of two: full takes two, opens no breaker.

    Without the modes' standing (the six asking at once in the first full pass) they would be
    a mass event (more than 20 % of 20 = 4): the breaker would open and take none.
    """
    fails = [fakes.slurm_node(i, "IDLE+FAIL", "Kill task failed") for i in range(6)]
    slurm = fakes.FakeSlurm([*fails, *(fakes.slurm_node(i) for i in range(6, 20))], failing=set())
    writer, store = fakes.FakeNodeWriter(), fakes.FakeStore()
    _switch(store, "observe")
    c = fakes.coordinator_with(
        slurm, writer, [fakes.kube_node(i) for i in range(20)], store=store,
        max_out=2, mass_percent=20, policy=Policy(remediate=False),
    )  # fmt: skip
    audit = fakes.AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    await c.reconcile_all()
    assert writer.calls == []
    _switch(store, "full", by="alice")
    await c.reconcile_all()
    cordoned = {name for what, name in writer.calls if what == "cordon"}
    assert len(cordoned) == 2, writer.calls
    assert not store.state.breaker_open, store.state.breaker_reason
    assert c.snapshot is not None
    assert len(c.snapshot.admission.refused) == 4
    assert all("deferred" in why for why in c.snapshot.admission.refused.values())
    switched = [r for r in audit.records if r["action"] == "mode"]
    assert [(r["outcome"], r["by"]) for r in switched] == [("observe -> full", "alice")]
    await c.reconcile_all()  # the two are out now: no room, nothing more, still no breaker
    assert {name for what, name in writer.calls if what == "cordon"} == cordoned
    assert not store.state.breaker_open


async def test_a_held_back_action_that_ends_and_comes_back_is_reported_again() -> None:
    """Reported once while it stands; gone, then back (a new failure): reported again."""
    failed = fakes.slurm_node(0, "IDLE+FAIL", "Kill task failed")
    slurm = fakes.FakeSlurm([failed, fakes.slurm_node(1)], failing=set())
    writer, store = fakes.FakeNodeWriter(), fakes.FakeStore()
    _switch(store, "observe")
    c = fakes.coordinator_with(
        slurm,
        writer,
        [fakes.kube_node(0), fakes.kube_node(1)],
        store=store,
        policy=Policy(remediate=False),
    )
    audit = fakes.AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]

    def cordons() -> int:
        return sum(1 for r in audit.records if r["action"] == "cordon" and r["node"] == "w-0")

    await c.reconcile_all()
    await c.reconcile_all()
    assert cordons() == 1
    slurm.nodes = [fakes.slurm_node(0), fakes.slurm_node(1)]
    await c.reconcile_all()
    slurm.nodes = [failed, fakes.slurm_node(1)]
    await c.reconcile_all()
    assert cordons() == 2
    assert writer.calls == []

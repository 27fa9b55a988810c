"""Quarantined hardware and ``slonkd return``'s decision (pure: slonkd.core.quarantine)."""

from __future__ import annotations

from datetime import UTC, datetime

from slonkd.core.coordinator_state import Attempts, CoordinatorState
from slonkd.core.health import Remediation, fail, ok
from slonkd.core.kube_actions import FAILURE_TAINT, MANUAL_TAINT, REBOOT_TAINT
from slonkd.core.kube_objects import (
    Taint,
    TaintEffect,
)
from slonkd.core.plan import Kind
from slonkd.core.quarantine import (
    Rung,
    longest,
    mark_returned,
    quarantined,
    return_actions,
    return_refusal,
)
from tests.unit.coordinator_fakes import marked_node as marked
from tests.unit.coordinator_fakes import pod, quarantine_taint, slurm

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC).timestamp()


def test_a_marked_machine_without_a_worker_pod_is_quarantined_with_rung_since_and_why() -> None:
    """The pod was evicted elsewhere: the machine is listed, from the history's last step."""
    history = {"kn-0": Attempts(attempts=1, last_at=T0)}
    found = quarantined([marked()], [pod(on="kn-9")], history)
    assert len(found) == 1
    q = found[0]
    assert (q.kube_node, q.rung, q.attempts, q.since) == ("kn-0", Rung.EVICTED, 1, T0)
    assert q.why == "health:gpu-xid-79"
    assert q.slurm_node == "w-0"
    assert q.marks == ("cordon", f"taint:{FAILURE_TAINT}", "condition")
    row = q.as_json(T0 + 3600)
    assert row["since"] == "2026-12-01T10:00:00+00:00"
    assert row["for_s"] == 3600.0
    assert longest(found, T0 + 7200) == 7200


def test_the_highest_rung_names_since_and_why_from_its_annotation() -> None:
    """Manual repair over a reboot request: its annotation's time and cause."""
    node = marked(
        ours=(FAILURE_TAINT, REBOOT_TAINT, MANUAL_TAINT),
        annotations={
            REBOOT_TAINT: "2026-12-01T08:00:00Z health:dcgm-pcie (attempt 2)",
            MANUAL_TAINT: "2026-12-01T10:00:00Z health:dcgm-pcie (attempt 3)",
        },
    )
    (q,) = quarantined([node], [], {"kn-0": Attempts(attempts=3, last_at=T0 - 60)})
    assert q.rung is Rung.MANUAL
    assert q.since == T0
    assert q.why == "health:dcgm-pcie"


def test_marks_without_history_fall_back_to_the_condition_time() -> None:
    """No ladder step on record (remediation off): rung marked, since the condition's change."""
    (q,) = quarantined([marked()], [], {})
    assert q.rung is Rung.MARKED
    assert q.since == datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp()


def test_a_machine_with_a_worker_pod_or_without_slonkds_marks_is_not_quarantined() -> None:
    """A pod there (even terminating) is judged by the pass; foreign marks are not slonkd's."""
    foreign_only = marked(
        "kn-1", ours=(), cordon=None, condition=False, foreign=(quarantine_taint("vendor/broken"),)
    )
    nodes = [marked("kn-0"), foreign_only]
    assert quarantined(nodes, [pod(on="kn-0", terminating=True)], {}) == []


def test_a_returned_history_does_not_make_the_machine_evicted_again() -> None:
    """After a return the history is kept, marked returned: new marks start as ``marked``."""
    returned = mark_returned(Attempts(attempts=2, last_at=T0), "alice", T0 + 10)
    assert (returned.attempts, returned.returned_by) == (2, "alice")
    (q,) = quarantined([marked()], [], {"kn-0": returned})
    assert q.rung is Rung.MARKED
    state = CoordinatorState(remediation={"kn-0": returned})
    back = CoordinatorState.from_data(state.to_data())
    assert back.remediation["kn-0"] == returned  # stored and read back


def test_return_is_refused_while_a_health_check_fails_on_that_machine() -> None:
    """An agent's failing verdict measured there: one line, naming the check."""
    health = {"w-0": ("kn-0", {"gpu": fail("gpu", "xid-79", Remediation.REBOOT)})}
    why = return_refusal(marked(), "kn-0", pods=[], health=health, slurm=None)
    assert "health check gpu fails on kn-0" in str(why)
    assert "\n" not in str(why)
    elsewhere = {"w-0": ("kn-9", {"gpu": fail("gpu", "xid-79", Remediation.REBOOT)})}
    passing = {"w-1": ("kn-0", {"gpu": ok("gpu")})}
    for other in (elsewhere, passing):
        assert return_refusal(marked(), "kn-0", pods=[], health=other, slurm=None) is None


def test_return_is_refused_while_the_slurm_node_the_marks_are_for_still_fails_here() -> None:
    """SLURM's failure (or slonkd's failure cause) stands and the pod ran nowhere else."""
    for failing in (
        slurm("DOWN", reason="Not responding"),
        slurm("IDLE+DRAIN", reason="slonkd:health:gpu-xid-79 by slonkd coordinator"),
        slurm(
            "IDLE+DRAIN",
            reason="slonkd:pod-not-ready by slonkd coordinator",
            causes=("pod-not-ready", "health:gpu-xid-79"),
        ),
    ):
        pending = pod(on="", ready=False)
        why = return_refusal(marked(), "kn-0", pods=[pending], health={}, slurm=failing)
        assert str(why).startswith("SLURM node w-0 is still failing"), failing
    # the same failure while the pod runs Ready on other hardware: it is not this machine's
    moved = pod(on="kn-9")
    down = slurm("DOWN", reason="Not responding")
    assert return_refusal(marked(), "kn-0", pods=[moved], health={}, slurm=down) is None
    # a lifecycle drain (the preStop hook's DOWN of the evicted pod) is no failure
    prestop = slurm("DOWN", reason="slonkd:pod-terminating by slonkd prestop")
    assert return_refusal(marked(), "kn-0", pods=[], health={}, slurm=prestop) is None


def test_return_is_refused_with_a_worker_pod_there_or_nothing_of_slonkds() -> None:
    """Not quarantined: slonkd judges it itself, or there is nothing to lift."""
    here = return_refusal(marked(), "kn-0", pods=[pod(on="kn-0")], health={}, slurm=None)
    assert str(here).startswith("worker pod w-0 runs on kn-0")
    bare = marked(ours=(), cordon=None, condition=False)
    assert "none of slonkd's marks" in (
        return_refusal(bare, "kn-0", pods=[], health={}, slurm=None) or ""
    )
    assert return_refusal(None, "kn-7", pods=[], health={}, slurm=None) == "no K8s node 'kn-7'"


def test_return_lifts_only_slonkds_own_marks() -> None:
    """slonkd's cordon, taints and condition go; a foreign taint and a foreign cordon stay."""
    vendor = quarantine_taint("vendor.io/gpu-broken")
    spoof = Taint(key=MANUAL_TAINT, effect=TaintEffect.NO_SCHEDULE, value="by-hand")
    node = marked(ours=(FAILURE_TAINT, REBOOT_TAINT), foreign=(vendor, spoof))
    actions = return_actions(node, "alice@example")
    assert [(a.kind, a.key) for a in actions] == [
        (Kind.UNCORDON, ""),
        (Kind.UNTAINT, REBOOT_TAINT),
        (Kind.UNTAINT, FAILURE_TAINT),
        (Kind.SET_CONDITION, "True"),
    ]
    assert {str(a.cause) for a in actions} == {"returned:alice-example"}
    someone_cordoned = marked(cordon=None)  # cordoned, but not with slonkd's annotation
    kinds = [a.kind for a in return_actions(someone_cordoned, "bob")]
    assert Kind.UNCORDON not in kinds


def test_each_single_mark_alone_makes_a_machine_quarantined() -> None:
    """The pass's quick test for marks (most nodes carry none) misses none of the three kinds."""
    only_cordon = marked("kn-1", ours=(), condition=False)
    only_taint = marked("kn-2", cordon=None, unschedulable=False, condition=False)
    only_condition = marked("kn-3", ours=(), cordon=None, unschedulable=False)
    foreign_cordon = marked("kn-4", ours=(), cordon=None, condition=False)  # not slonkd's
    found = quarantined([only_cordon, only_taint, only_condition, foreign_cordon], [], {})
    assert [(q.kube_node, q.marks) for q in found] == [
        ("kn-1", ("cordon",)),
        ("kn-2", (f"taint:{FAILURE_TAINT}",)),
        ("kn-3", ("condition",)),
    ]

"""The soak checker's read after a slurmctld restart (bench/soak_check.py), with a fake reader."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

import pytest

from bench import soak_check, soak_fleet
from bench.soak_check import Checker, Mark, Marks, SlurmView, Timeline, carries, parse_sinfo
from bench.soak_fleet import SoakFleet
from slonkd.core.kube_objects import CORDONED_BY_ANNOTATION

REASON = "ops: maintenance ticket 25"


class FakeClock:
    """Monotonic seconds that move only when the checker sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        """The current fake time."""
        return self.now

    def sleep(self, seconds: float) -> None:
        """Move the fake time on instead of waiting."""
        self.now += seconds


class FakeReader:
    """sinfo that does not answer the first ``silent`` times, then answers ``view``."""

    def __init__(self, view: SlurmView | None, silent: int = 0) -> None:
        self.view = view
        self.silent = silent
        self.calls = 0

    def __call__(self) -> SlurmView | None:
        """One sinfo read."""
        self.calls += 1
        return None if self.calls <= self.silent else self.view


def _checker(tmp_path: Path) -> Checker:
    marks = Marks()
    marks.slurm["w-1"] = Mark(event=25, since=time.time(), reason=REASON)
    timeline = Timeline(tmp_path / "timeline.jsonl", time.time())
    return Checker(fleet=cast(SoakFleet, object()), marks=marks, timeline=timeline)


def _events(checker: Checker, kind: str) -> list[dict[str, Any]]:
    checker.timeline.close()
    lines = checker.timeline.path.read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def test_the_read_is_retried_until_sinfo_answers_and_logged(tmp_path: Path) -> None:
    """Two unanswered reads, then an answer: the mark is checked on it and the read logged."""
    checker, clock = _checker(tmp_path), FakeClock()
    read = FakeReader({"w-1": ("drained", REASON, "root")}, silent=2)
    lost = checker.after_slurmctld_restart(read, clock=clock, sleep=clock.sleep)
    assert lost == 0
    assert read.calls == 3
    assert "w-1" in checker.marks.slurm
    (logged,) = _events(checker, "slurmctld_restart_read")
    assert logged["answered"] is True
    assert logged["calls"] == 3
    assert logged["marks"] == {"w-1": ["drained", REASON]}
    assert logged["lost"] == []


def test_a_mark_missing_from_the_first_answer_is_lost_to_the_fault(tmp_path: Path) -> None:
    """The node came back idle without the operator's reason: counted lost, mark dropped."""
    checker, clock = _checker(tmp_path), FakeClock()
    lost = checker.after_slurmctld_restart(
        FakeReader({"w-1": ("idle", "", "Unknown")}), clock=clock, sleep=clock.sleep
    )
    assert lost == 1
    assert checker.foreign_lost == 1
    assert "w-1" not in checker.marks.slurm
    (gone,) = _events(checker, "foreign_mark_lost")
    assert gone["node"] == "w-1"
    assert gone["causes"] == ["slurmctld_restart"]


def test_the_retries_end_at_the_bound_and_the_silence_is_logged(tmp_path: Path) -> None:
    """sinfo never answers: about timeout/interval tries, then nothing changed, and a record."""
    checker, clock = _checker(tmp_path), FakeClock()
    read = FakeReader(None)
    lost = checker.after_slurmctld_restart(
        read, timeout_s=30.0, interval_s=0.5, clock=clock, sleep=clock.sleep
    )
    assert lost == 0
    assert read.calls == 61
    assert clock.now == 30.0
    assert "w-1" in checker.marks.slurm
    (logged,) = _events(checker, "slurmctld_restart_read")
    assert logged["answered"] is False
    assert logged["calls"] == 61


def test_a_mark_is_carried_only_with_its_reason_and_an_out_state() -> None:
    """Drained, draining, fail or down with the operator's reason hold the mark; nothing else."""
    mark = Mark(event=1, since=0.0, reason=REASON)
    assert carries(mark, "drained", REASON)
    assert carries(mark, "draining", REASON)
    assert carries(mark, "fail", REASON)
    assert carries(mark, "down*", REASON)
    assert not carries(mark, "idle", REASON)
    assert not carries(mark, "draining", "slonkd:pod-terminating pod is terminating")
    assert parse_sinfo("w-1|drained|ops: x|root\nw-2|idle|none|Unknown\n") == {
        "w-1": ("drained", "ops: x", "root"),
        "w-2": ("idle", "", "Unknown"),
    }


def test_a_resource_trend_is_read_past_the_warm_up_over_fifteen_minutes_or_not_at_all() -> None:
    """RSS that grows while a process warms up is no leak; a steady climb after it is.

    The 60-minute soak reported 264 MB/h for the coordinator from leaders it SIGKILLs every
    few minutes (none lived 8 minutes): their warm-up, not a trend. A process seen for less
    than 15 minutes past its first two has no trend (None: not measured).
    """
    minute = 60.0
    warming = [(t * minute, 40.0 + min(t, 3) * 4) for t in range(0, 9)]  # 8 min, +12 MB early
    assert soak_check._trend(warming) is None
    settled = [(t * minute, 40.0 + min(t, 2) * 5) for t in range(0, 40)]  # flat after 2 min
    assert soak_check._trend(settled) == pytest.approx(0.0, abs=0.01)
    leaking = [(t * minute, 50.0 + t * 0.1) for t in range(0, 40)]  # 6 MB/h throughout
    assert soak_check._trend(leaking) == pytest.approx(6.0, rel=0.01)
    assert soak_check._larger(None, 2.0) == 2.0
    assert soak_check._larger(3.0, None) == 3.0
    assert soak_check._larger(None, None) is None


def test_i3_judges_a_write_when_its_lease_was_checked_not_when_it_returned(
    tmp_path: Path,
) -> None:
    """A leader stopped mid-write records it after its successor took over: no violation.

    Seen in a full run: the leader cordoned d-8's K8s node at t=185.2, was SIGSTOPped at
    185.35 for 12 s, and its audit record (token 2) came at 197.36, after the checker had seen
    token 3. The write was allowed before the stop (``lease_checked_at``); one allowed after
    a newer token was seen is still a violation, and a record without the field is judged by
    its ``ts`` as before.
    """
    checker = _checker(tmp_path)
    checker.lease_tokens = [(100.0, 2), (190.0, 3)]
    rec = {"ts": 197.36, "fencing_token": 2, "node": "d-8", "action": "set-condition"}
    checker._check_token({**rec, "lease_checked_at": 185.2})
    assert checker.violations["I3"] == 0
    checker._check_token({**rec, "lease_checked_at": 190.5})
    assert checker.violations["I3"] == 1
    checker._check_token({**rec, "ts": 197.5})
    assert checker.violations["I3"] == 2


def _pool(real: int = 0, declared: int = 0, kube_nodes: tuple[str, ...] = ()) -> SoakFleet:
    """A soak fleet of ``real`` pods of pool w and ``declared`` of pool d, never started.

    The budget check asks only its names (the pools' sizes give the limit), the pool-taint
    check its K8s nodes too.
    """
    root = Path("/nonexistent")
    return SoakFleet(root=root, real=real, declared=declared, kube_nodes=list(kube_nodes))


def test_an_i4_violation_names_why_each_node_counts_and_the_leaders_records(
    tmp_path: Path,
) -> None:
    """A full run's soak found w-2 and w-3 out against a limit of 1 and said nothing more.

    The violation now says what made each node count (a health drain, slonkd's cordon of its
    K8s node) and carries the leaders' last audit records on those nodes and K8s nodes.
    """
    timeline = Timeline(tmp_path / "timeline.jsonl", time.time())
    fleet = _pool(real=4)  # pool w of four: limit 1
    checker = Checker(fleet=fleet, marks=Marks(), timeline=timeline)
    slurm = {n: ("idle", "", "") for n in fleet.names}
    slurm["w-2"] = ("drained", "slonkd:health:mount by slonkd", "slonkd")
    pods = {n: {"spec": {"nodeName": f"k{n[-1]}"}} for n in fleet.names}
    cordoned = {"metadata": {"name": "k3", "annotations": {CORDONED_BY_ANNOTATION: "x"}},
                "spec": {"unschedulable": True}}  # fmt: skip
    knodes: dict[str, dict[str, Any]] = {f"k{i}": {"metadata": {"name": f"k{i}"}, "spec": {}}
                                         for i in range(3)}  # fmt: skip
    knodes["k3"] = cordoned
    checker.audit_recent = [
        {"action": "drain", "node": "w-2", "fencing_token": 2},
        {"action": "cordon", "node": "d-7", "kube_node": "k3", "fencing_token": 2},
        {"action": "drain", "node": "w-0", "fencing_token": 2},
    ]
    snap = soak_check.Snapshot(t=time.time(), slurm=slurm, knodes=knodes, pods=pods, lease=None)
    checker._check_budget(snap)
    assert checker.violations["I4"] == 1
    (violation,) = _events(checker, "violation")
    assert violation["out"] == ["w-2", "w-3"]
    assert violation["why"] == {
        "w-2": ["drained: slonkd:health:mount by slonkd"],
        "w-3": ["K8s node k3 cordoned by slonkd"],
    }
    assert [a["node"] for a in violation["audit"]] == ["w-2", "d-7"]


def _budget_checker(tmp_path: Path) -> Checker:
    timeline = Timeline(tmp_path / "timeline.jsonl", time.time())
    return Checker(fleet=_pool(declared=5), marks=Marks(), timeline=timeline)  # limit 1


def _snap(slurm: SlurmView) -> soak_check.Snapshot:
    return soak_check.Snapshot(t=time.time(), slurm=slurm, knodes={}, pods={}, lease=None)


def test_a_node_the_rollout_holds_counts_toward_the_budget(tmp_path: Path) -> None:
    """Issue 37 item 3: I4 counted slonkd's cordons and health drains, not the rollout's hold.

    Pool d (five nodes, the soak's budget: limit 1): d-0 drained for the rollout and d-1 for a
    health check are two automated outages; so is d-0 once its pod is replaced and the
    reason shows the preStop hook's ``pod-terminating`` while the rollout still holds it.
    Back in service, it no longer counts.
    """
    idle = {f"d-{i}": ("idle", "", "") for i in range(5)}
    rolled = ("drained", "slonkd:rollout replacing pod with revision d-7f", "slonkd")
    health = ("drained", "slonkd:health:mount by slonkd", "slonkd")
    checker = _budget_checker(tmp_path)
    checker._check_budget(_snap({**idle, "d-0": rolled}))
    assert checker.violations["I4"] == 0  # one of one
    checker._check_budget(_snap({**idle, "d-0": rolled, "d-1": health}))
    assert checker.violations["I4"] == 1
    replaced = ("down", "slonkd:pod-terminating pod is terminating", "slonkd")
    assert checker.rollout_holds({**idle, "d-0": replaced}) == {"d-0"}
    checker._check_budget(_snap({**idle, "d-0": replaced, "d-2": health}))
    assert checker.violations["I4"] == 2
    assert checker.rollout_holds(idle) == set()
    checker._check_budget(_snap({**idle, "d-2": health}))
    assert checker.violations["I4"] == 2
    (first, second) = _events(checker, "violation")
    assert first["out"] == ["d-0", "d-1"]
    assert second["out"] == ["d-0", "d-2"]


def test_a_node_terminating_without_the_rollout_is_not_the_rollouts() -> None:
    """A pod deleted by the churn drains its node ``pod-terminating``: not budgeted, not held."""
    checker = Checker(fleet=_pool(declared=5), marks=Marks(), timeline=cast(Any, None))
    terminating = ("draining", "slonkd:pod-terminating pod is terminating", "slonkd")
    assert checker.rollout_holds({"d-3": terminating}) == set()
    operator = ("drained", REASON, "root")
    checker.rollout_held.add("d-4")
    assert checker.rollout_holds({"d-4": operator}) == set()  # someone else holds it now


def test_a_drain_for_the_pools_tolerated_taint_or_its_loss_is_a_violation(tmp_path: Path) -> None:
    """The soak's nodes carry ``nvidia.com/gpu=present:NoSchedule``, tolerated by both pools.

    slonkd draining a node for it (``slonkd:k8s-tainted:gpu``) is the defect of issue 37 item 1;
    the taint disappearing from a node means someone removed what the pool is made of.
    """
    timeline = Timeline(tmp_path / "timeline.jsonl", time.time())
    checker = Checker(
        fleet=_pool(real=2, kube_nodes=("k0", "k1")), marks=Marks(), timeline=timeline
    )
    gpu = dict(soak_fleet.POOL_TAINT)
    knodes = {
        "k0": {"metadata": {"name": "k0"}, "spec": {"taints": [gpu]}},
        "k1": {"metadata": {"name": "k1"}, "spec": {"taints": []}},
    }
    slurm = {"w-0": ("drained", "slonkd:k8s-tainted:gpu", "slonkd"),
             "w-1": ("drained", "slonkd:k8s-tainted:maintenance by slonkd", "slonkd")}  # fmt: skip
    snap = soak_check.Snapshot(t=time.time(), slurm=slurm, knodes=knodes, pods={}, lease=None)
    checker._check_pool_taint(snap)
    checker._check_pool_taint(snap)  # counted once per key
    assert checker.violations["I1"] == 2
    whats = sorted(v["what"] for v in _events(checker, "violation"))
    assert whats == ["drained for the pool's tolerated taint", "the pool's tolerated taint removed"]


def test_the_soaks_pools_tolerate_the_taint_their_nodes_carry() -> None:
    """Both StatefulSets' pod templates carry the toleration the checker relies on."""
    for pool in (soak_fleet.REAL_POOL, soak_fleet.DECLARED_POOL):
        sts = soak_fleet.pool_statefulset(pool, replicas=2, standin=pool == soak_fleet.REAL_POOL)
        tolerations = sts["spec"]["template"]["spec"]["tolerations"]
        assert soak_fleet.POOL_TOLERATION in tolerations, tolerations

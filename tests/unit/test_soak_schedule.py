"""The soak's schedule (bench/soak.py) is a pure function of its seed and sizes: a run replays."""

from __future__ import annotations

import pytest

from bench import soak
from bench.soak import FAULTS, LEADER_FAULTS, ROLLOUT_LAG_S, UNDO, schedule

NAMES = [f"w-{i}" for i in range(4)] + [f"d-{i}" for i in range(16)]
KUBE_NODES = [f"k{i}" for i in range(12)]


def _plan(seed: int, seconds: float = 240) -> list[object]:
    return list(schedule(seed, seconds=seconds, names=NAMES, kube_nodes=KUBE_NODES))


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    """Replaying a seed gives exactly the same steps; a different seed gives different ones."""
    assert _plan(7) == _plan(7)
    assert _plan(7) != _plan(8)


def test_five_minutes_hold_every_fault_kind_in_time_order() -> None:
    """Five minutes with slurmctld outages of 30-45 s inject each fault kind, in time order."""
    for seed in range(50):
        steps = schedule(seed, seconds=300, names=NAMES, kube_nodes=KUBE_NODES, outage_s=(30, 45))
        assert {s.kind for s in steps if s.kind in FAULTS} == set(FAULTS), seed
        assert [s.at for s in steps] == sorted(s.at for s in steps)


def test_every_undo_comes_after_its_step_on_the_same_target() -> None:
    """An operator's drain, cordon, taint, failure, bad verdict or pause is undone later.

    By a step naming it, on the same target.
    """
    steps = {s.id: s for s in schedule(3, seconds=600, names=NAMES, kube_nodes=KUBE_NODES)}
    undos = [s for s in steps.values() if s.undo_of >= 0]
    assert undos
    for undo in undos:
        done = steps[undo.undo_of]
        assert UNDO[done.kind] == undo.kind
        assert done.target == undo.target
        assert done.at < undo.at


def test_an_hour_keeps_its_middle_half_free_of_faults_that_end_the_leader() -> None:
    """A run of 45 minutes or more lets one coordinator lead through its middle half.

    So that coordinator's memory trend is measured over 30 minutes; the other faults go on,
    and the first and last quarters still end leaders of every kind. Shorter runs keep their
    schedule as it was (every fault kind in five minutes, test above).
    """
    for seed in (1, 1802, 2024):
        steps = schedule(seed, seconds=3600, names=NAMES, kube_nodes=KUBE_NODES)
        middle = [s for s in steps if 900 <= s.at < 2700 and s.kind in FAULTS]
        assert middle, seed
        assert not {s.kind for s in middle} & LEADER_FAULTS, seed
        outer = {s.kind for s in steps if (s.at < 900 or s.at >= 2700) and s.kind in FAULTS}
        assert outer >= LEADER_FAULTS, seed
    short = schedule(5, seconds=2000, names=NAMES, kube_nodes=KUBE_NODES)
    assert {s.kind for s in short if 500 <= s.at < 1500} & LEADER_FAULTS


def test_a_share_of_the_failures_is_overlapped_by_a_rollout_of_their_pool() -> None:
    """Issue 37 item 3: rollouts come while failures stand, on the failing node's pool.

    Within ``ROLLOUT_LAG_S`` of the failure, before its undo; every seed's five minutes
    have some. On the workload's weight alone a rollout came about once in five minutes.
    """
    for seed in (1, 7, 1124668437, 2024, 31337):
        steps = schedule(seed, seconds=300, names=NAMES, kube_nodes=KUBE_NODES)
        undone = {s.undo_of: s.at for s in steps if s.undo_of >= 0}
        failures = [s for s in steps if s.kind in {"slurm_fail", "health_fail"}]
        overlapped = [
            f
            for f in failures
            if any(
                r.kind == "rollout"
                and r.target.rsplit("-", 1)[0] == f.target.rsplit("-", 1)[0]
                and f.at <= r.at <= f.at + ROLLOUT_LAG_S[1]
                and r.at < undone.get(f.id, 300.0)
                for r in steps
            )
        ]
        assert len(overlapped) >= 3, (seed, len(failures), len(overlapped))


def test_the_overlapping_rollouts_leave_a_seeds_other_steps_as_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A seed replays: the rollouts are drawn apart and added; the rest keeps ids and times."""
    for seed in (7, 1124668437):
        steps = schedule(seed, seconds=300, names=NAMES, kube_nodes=KUBE_NODES)
        with monkeypatch.context() as patch:
            patch.setattr(soak, "ROLLOUT_OVERLAP", 0.0)
            before = schedule(seed, seconds=300, names=NAMES, kube_nodes=KUBE_NODES)
        assert [s for s in steps if s.id < len(before)] == before
        assert {s.kind for s in steps if s.id >= len(before)} == {"rollout"}

"""The soak's schedule (bench/soak.py) is a pure function of its seed and sizes: a run replays."""

from __future__ import annotations

from bench.soak import FAULTS, LEADER_FAULTS, UNDO, schedule

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

"""Picking nodes to lend to serving: fewest jobs, whole blocks at equal cost, inside the budget."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.core.lend import LendCandidate, pick_nodes_to_lend


def _block(name: str, size: int, jobs: tuple[int, ...] = ()) -> list[LendCandidate]:
    jobs = jobs or (0,) * size
    return [
        LendCandidate(node=f"{name}-{i}", block=name, running_jobs=jobs[i]) for i in range(size)
    ]


def test_whole_idle_blocks_go_before_breaking_others() -> None:
    """Need 8: two idle 4-node blocks whole, not the idle 6-node one plus 2 of another."""
    cands = [*_block("a", 8, (1,) * 8), *_block("b", 4), *_block("c", 4), *_block("d", 6)]
    plan = pick_nodes_to_lend(cands, need=8, budget=10)
    assert plan.whole_blocks == ("b", "c")
    assert len(plan.nodes) == 8
    assert plan.jobs_disrupted == 0
    assert plan.shortfall == 0
    # the busy 8-node block would also be whole, but disrupts 8 jobs: fewest jobs come first
    assert pick_nodes_to_lend(cands, need=6, budget=10).whole_blocks == ("d",)


def test_fewest_jobs_beats_a_whole_block() -> None:
    """A 2-node block with jobs is not taken whole when idle loose nodes exist."""
    cands = [*_block("busy", 2, (3, 2)), *_block("idle", 4)]
    plan = pick_nodes_to_lend(cands, need=2, budget=5)
    assert plan.jobs_disrupted == 0
    assert plan.whole_blocks == ()
    assert plan.nodes == ("idle-0", "idle-1")


def test_loose_nodes_come_from_one_block_with_fewest_jobs() -> None:
    """The remainder breaks the cheapest block only, so the others stay whole."""
    cands = [*_block("x", 4, (0, 0, 0, 1)), *_block("y", 4, (0, 0, 0, 0)), *_block("z", 3)]
    plan = pick_nodes_to_lend(cands, need=2, budget=5)
    assert plan.whole_blocks == ()
    assert plan.nodes == ("y-0", "y-1")  # y: no jobs at all; z: would fit but is size 3 > 2


def test_budget_caps_and_reports_the_shortfall() -> None:
    """Never more than the budget; the rest is a shortfall, not an overrun."""
    cands = _block("a", 4) + _block("b", 4)
    plan = pick_nodes_to_lend(cands, need=6, budget=3)
    assert len(plan.nodes) == 3
    assert plan.shortfall == 3
    assert pick_nodes_to_lend(cands, need=20, budget=20).shortfall == 12
    assert pick_nodes_to_lend(cands, need=0, budget=5).nodes == ()
    assert pick_nodes_to_lend([], need=2, budget=5).shortfall == 2


def test_deterministic_whatever_the_order() -> None:
    """The same candidates in another order give the same plan."""
    cands = [*_block("a", 3, (1, 0, 2)), *_block("b", 2, (0, 0)), *_block("c", 5, (0,) * 5)]
    plans = {pick_nodes_to_lend(list(order), need=4, budget=4) for order in (cands, cands[::-1])}
    assert len(plans) == 1


@pytest.mark.parametrize(
    ("cands", "need", "budget", "why"),
    [
        (_block("a", 2), -1, 3, "negative"),
        (_block("a", 2), 1, -3, "negative"),
        (_block("a", 2) + _block("a", 1), 1, 3, "twice"),
        ([LendCandidate(node="n", block="b", running_jobs=-1)], 1, 1, "running_jobs"),
    ],
)
def test_bad_input_is_refused(cands: list[LendCandidate], need: int, budget: int, why: str) -> None:
    """Negative counts and duplicate nodes are errors, not plans."""
    with pytest.raises(ValueError, match=why):
        pick_nodes_to_lend(cands, need, budget)


@given(
    jobs=st.lists(st.integers(min_value=0, max_value=3), max_size=40),
    block_size=st.integers(min_value=1, max_value=8),
    need=st.integers(min_value=0, max_value=45),
    budget=st.integers(min_value=0, max_value=45),
)
def test_never_over_budget_and_never_more_jobs_than_needed(
    jobs: list[int], block_size: int, need: int, budget: int
) -> None:
    """Exactly min(need, budget, candidates) nodes, disrupting the fewest jobs possible."""
    cands = [
        LendCandidate(node=f"n{i}", block=f"b{i // block_size}", running_jobs=j)
        for i, j in enumerate(jobs)
    ]
    plan = pick_nodes_to_lend(cands, need, budget)
    want = min(need, budget, len(cands))
    assert len(plan.nodes) == len(set(plan.nodes)) == want
    assert plan.shortfall == need - want
    assert plan.jobs_disrupted == sum(sorted(jobs)[:want])
    by_block: dict[str, list[str]] = {c.block: [] for c in cands}
    for c in cands:
        by_block[c.block].append(c.node)
    assert all(set(by_block[b]) <= set(plan.nodes) for b in plan.whole_blocks)

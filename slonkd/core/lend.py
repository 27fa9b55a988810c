"""Which training nodes to lend to serving: whole topology blocks first, fewest jobs first.

When serving needs ``need`` nodes, the coordinator may drain that many SLURM nodes ahead of
the scheduler's preemption, so that jobs are requeued on the coordinator's terms and the
nodes given up keep the rest of the fabric whole. Rules, in order:

1. never more than ``budget`` nodes (what the disruption budget still allows); what cannot be
   lent inside it is reported as ``shortfall``;
2. as few running jobs disrupted as possible;
3. at that cost, as many nodes as possible in whole blocks (leaf switches or blocks of
   :mod:`slonkd.core.topology`), so multi-node jobs keep whole blocks elsewhere: every
   combination of whole blocks that fits is weighed (a small knapsack over block sizes);
4. the rest node by node: fewest running jobs, from the block that has the fewest jobs (so
   the other blocks stay whole), then by name; ties end on names, so the plan is the same
   whatever the order of the candidates.

Candidates are the nodes in service that may be lent; the caller leaves out nodes already
out of service or held by an operator. Pure and deterministic: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class LendCandidate:
    """One SLURM node that could be lent, its block and how many jobs run on it."""

    node: str
    block: str
    running_jobs: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LendPlan:
    """The nodes to drain for serving, which blocks go whole, and what could not be lent."""

    nodes: tuple[str, ...]
    whole_blocks: tuple[str, ...]
    jobs_disrupted: int
    shortfall: int


def pick_nodes_to_lend(candidates: Sequence[LendCandidate], need: int, budget: int) -> LendPlan:
    """Pick ``min(need, budget)`` nodes by the module's rules; ValueError on bad input."""
    if need < 0 or budget < 0:
        raise ValueError("need and budget must not be negative")
    names = [c.node for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError("a node is listed twice")
    if any(c.running_jobs < 0 for c in candidates):
        raise ValueError("running_jobs must not be negative")
    want = min(need, budget, len(candidates))
    blocks: dict[str, list[LendCandidate]] = defaultdict(list)
    for c in candidates:
        blocks[c.block].append(c)
    jobs = {b: sum(c.running_jobs for c in members) for b, members in blocks.items()}
    # whole-block combinations by node count: (jobs, blocks), the cheapest for each count
    combos: dict[int, tuple[int, tuple[str, ...]]] = {0: (0, ())}
    for block in sorted(blocks):
        size = len(blocks[block])
        for count, (cost, names_) in sorted(combos.items(), reverse=True):
            if count + size > want:
                continue
            option = (cost + jobs[block], (*names_, block))
            if count + size not in combos or option < combos[count + size]:
                combos[count + size] = option
    ranked = sorted(candidates, key=lambda c: (c.running_jobs, jobs[c.block], c.block, c.node))
    options = []
    for count, (cost, whole_) in combos.items():
        skip = set(whole_)
        loose = [c for c in ranked if c.block not in skip][: want - count]
        picked = [c for b in whole_ for c in blocks[b]] + loose
        options.append(((cost + sum(c.running_jobs for c in loose), -count, whole_), picked))
    (_, _, whole), chosen = min(options, key=lambda o: o[0])
    return LendPlan(
        nodes=tuple(sorted(c.node for c in chosen)),
        whole_blocks=tuple(sorted(whole)),
        jobs_disrupted=sum(c.running_jobs for c in chosen),
        shortfall=need - len(chosen),
    )

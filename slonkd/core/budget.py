"""The disruption budget: how many nodes automated causes may take out, per pool.

One budget is shared by every automated cause (SLURM failures, health verdicts, K8s node
trouble). It counts the nodes already out of service for any reason (an operator's drain
too), so slonkd never adds to an outage past the limit. Past the limit, or when many nodes of
a pool ask to go out at once (a mass event: a broker outage, a rack losing power, a bad check
rollout), nothing more is taken and the breaker opens; it stays open until a human closes it
(``slonkd budget reset``), and while it is open no automated cause takes a node out.
Bringing nodes back is never budgeted. Nodes out only because their pod is restarting
(a rollout, a preemption) use the budget too, but a request they crowd out is deferred, not
a reason to open the breaker: a rolling update must never open it. Nor does a node's return
from a failure: its proof of health (``revalidating``, :mod:`slonkd.core.revalidation`)
takes it out within the budget, deferred past it, never as a new failure.

Neighbours: :mod:`slonkd.runtime.coordinating.admitting` builds the requests from a pass's
plans (:mod:`slonkd.core.decide`, :mod:`slonkd.core.fleet_decide`) and opens the breaker;
:mod:`slonkd.core.rollout` asks the same room; :mod:`slonkd.core.reservations` holds the nodes
one task was admitted for until the others' reads show them (``out_now`` counts them).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from slonkd.core.kube_objects import Node, TaintEffect
from slonkd.core.slurm_node import NodeFlag, SlurmNode

DEFAULT_POOL = "default"
POOL_LABEL = "slonk.dev/pool"


def budget_group(
    pod_labels: Mapping[str, str] | None,
    node_labels: Mapping[str, str] | None,
    *,
    block_label: str = "",
) -> str:
    """Where a node's budget is counted: its pool, or its pool and topology block."""
    pool = (pod_labels or {}).get(POOL_LABEL) or DEFAULT_POOL
    if not block_label:
        return pool
    block = (node_labels or {}).get(block_label) or "unlabelled"
    return f"{pool}/{block}"


def out_of_service(slurm: SlurmNode | None, kube: Node | None) -> bool:
    """Taken out by someone: drained in SLURM, its K8s node cordoned, or tainted by slonkd.

    The one rule of what uses a pool's room, for the coordinator's pass and the rollout alike.
    slonkd's NoSchedule taints keep the worker pod from coming back, so a node carrying one
    is out even when it is not cordoned. Someone else's taint is not counted here: one the
    pool tolerates (:mod:`slonkd.core.tolerations`) keeps nothing out, and one it does not
    is counted once ``decide`` drained the node for it (``k8s-tainted``).

    A node that SLURM itself marks DOWN or FAIL is not counted until someone takes it out:
    marking it is what the budget must weigh (a slurmctld outage makes every node
    "Not responding" at once, and that must not cordon the fleet).
    """
    slurm_out = slurm is not None and NodeFlag.DRAIN in slurm.state.flags
    kube_out = kube is not None and (
        kube.unschedulable or any(t.effect is TaintEffect.NO_SCHEDULE for t in kube.our_taints)
    )
    return slurm_out or kube_out


def statefulset_of(node: str) -> str:
    """The StatefulSet of the worker whose pod (and SLURM node) is ``node``: ``w-3`` -> ``w``."""
    base, dash, ordinal = node.rpartition("-")
    return base if dash and ordinal.isdigit() else ""


class WorkerGroups:
    """Each worker's budget group, kept while its pod is gone.

    A node whose pod is gone for a while (deleted, evicted, being replaced) is still a
    worker of its pool, and often out: counted in ``default`` it would leave its pool room
    for one more (the soak's I4, two of four out against a limit of 1). It keeps the group of
    the pod it last had (while it stays in the views); one never seen with a pod (a new
    leader's first pass) takes its StatefulSet's: its SLURM node is its pod's name,
    ``<statefulset>-<ordinal>``, and its siblings' pool is its pool.
    """

    def __init__(self, block_label: str = "") -> None:
        self.block_label = block_label
        self._last: dict[str, str] = {}

    def resolve(
        self,
        workers: Iterable[tuple[str, Mapping[str, str] | None, Mapping[str, str] | None]],
    ) -> list[str]:
        """Groups of ``(node, its pod's labels or None without a pod, its K8s node's labels)``."""
        rows = list(workers)
        seen: list[str | None] = [
            None
            if pod_labels is None
            else budget_group(pod_labels, node_labels, block_label=self.block_label)
            for _, pod_labels, node_labels in rows
        ]
        last = self._last
        self._last = {  # these workers only: the rest left the fleet
            node: group if group is not None else last[node]
            for (node, _, _), group in zip(rows, seen, strict=True)
            if group is not None or node in last
        }
        unknown = budget_group(None, None, block_label=self.block_label)
        by_set: dict[str, dict[str, int]] | None = None  # built for the first stranger only
        out: list[str] = []
        for (node, _, _), group in zip(rows, seen, strict=True):
            if group is not None:
                out.append(group)
                continue
            if node in self._last:
                out.append(self._last[node])
                continue
            if by_set is None:
                by_set = _pools_by_statefulset(rows, seen)
            siblings = by_set.get(statefulset_of(node) or "-")  # "-": no StatefulSet
            pool = max(sorted(siblings), key=siblings.__getitem__) if siblings else ""
            fallback = (
                budget_group({POOL_LABEL: pool}, None, block_label=self.block_label)
                if pool
                else unknown
            )
            out.append(fallback)
        return out


def _pools_by_statefulset(
    rows: Sequence[tuple[str, object, object]], seen: Sequence[str | None]
) -> dict[str, dict[str, int]]:
    """Per StatefulSet, how many of its workers with a pod each pool has."""
    by_set: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (node, _, _), group in zip(rows, seen, strict=True):
        if group is not None and (sts := statefulset_of(node)):
            by_set[sts][group.partition("/")[0]] += 1
    return by_set


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetPolicy:
    """Limits per pool; the lower of the count and the percentage wins."""

    max_out: int = 10
    """Most nodes of one pool out of service at once (automated causes stop there)."""
    max_out_percent: float = 10.0
    """... or this percentage of the pool, whichever is lower (at least one node)."""
    mass_percent: float = 20.0
    """More new candidates than this percentage of a pool in one pass is a mass event."""

    def __post_init__(self) -> None:
        if self.max_out < 0:
            raise ValueError("max_out must not be negative")
        for name in ("max_out_percent", "mass_percent"):
            if not 0 <= getattr(self, name) <= 100:
                raise ValueError(f"{name} must be between 0 and 100")

    def limit(self, pool_size: int) -> int:
        """Most nodes of a pool of ``pool_size`` that may be out at once."""
        by_percent = max(1, math.floor(pool_size * self.max_out_percent / 100))
        return min(self.max_out, by_percent)

    def mass(self, pool_size: int) -> int:
        """New candidates in one pass above which a pool is in a mass event."""
        return max(self.limit(pool_size), math.ceil(pool_size * self.mass_percent / 100))


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One node that an automated cause wants out of service."""

    node: str
    pool: str
    unit: str = ""
    """Nodes that go out together (the SLURM nodes of one K8s node: its cordon takes them all
    out); admitted all or none. Empty: the node alone."""
    wants: bool = True
    """The node's own plan wants it out. False: only its unit takes it (a failing sibling's
    cordon of their K8s node): it costs room, but it is no candidate of a mass event."""
    returning: bool = False
    """The node comes back from a failure the budget weighed already: SLURM or an operator
    returned it after the remediation ladder acted, and it is drained ``revalidating`` until
    its new pod proves its health. No new failure: admitted within the budget, the rest
    deferred; never a mass event nor a reason to open the breaker."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolUse:
    """How much of one pool's budget is used."""

    pool: str
    size: int
    out: int
    limit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """Which requests may go ahead, which may not and why, and whether the breaker opens."""

    admitted: frozenset[str] = frozenset()
    refused: Mapping[str, str] = field(default_factory=dict)
    """Node -> why it stays in."""
    open_breaker: str = ""
    """Non-empty: the reason the breaker opens now."""
    pools: tuple[PoolUse, ...] = ()


def admit(
    requests: Iterable[Request],
    *,
    out_now: Mapping[str, frozenset[str]],
    pool_sizes: Mapping[str, int],
    restarting: Mapping[str, frozenset[str]] | None = None,
    policy: BudgetPolicy,
    breaker_open: bool,
    standing: frozenset[str] = frozenset(),
) -> Admission:
    """Decide which of ``requests`` fit the budget; deterministic (by node name).

    ``out_now``: nodes already out of service per pool, for any reason; ``restarting``: those
    of them that are out only while their pod restarts. ``standing``: candidates that were
    already held back when a human reset the breaker: they are admitted first, within the
    budget, the rest deferred; they never make a mass event nor open the breaker again
    (the reset was the human's answer to them). Units whose nodes all return from a failure
    (:attr:`Request.returning`) are taken the same way. Candidates new since the reset follow
    the mass and exhaustion rules as usual; only nodes that want out themselves
    (:attr:`Request.wants`) count toward a mass event. A request's ``unit`` groups nodes that
    go out together (the pods of one K8s node): a unit costs each of its nodes not out yet,
    and is admitted whole or not at all, so a cordon never takes more out than the budget
    allows.
    """
    by_pool: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    candidates: set[str] = set()  # nodes that want out themselves, not returning
    returning: set[str] = set()
    for r in requests:
        by_pool[r.pool][r.unit or r.node].add(r.node)
        if r.returning:
            returning.add(r.node)
        elif r.wants:
            candidates.add(r.node)
    admitted: set[str] = set()
    refused: dict[str, str] = {}
    reasons: list[str] = []
    pools = []
    for pool in sorted(set(pool_sizes) | set(by_pool)):
        size = pool_sizes.get(pool, 0)
        out = out_now.get(pool, frozenset())
        limit = policy.limit(size)
        pools.append(PoolUse(pool=pool, size=size, out=len(out), limit=limit))
        units: dict[str, list[str]] = {}  # unit -> its nodes not out yet (what it costs)
        for unit, nodes in sorted(by_pool.get(pool, {}).items()):
            admitted.update(n for n in nodes if n in out)  # already out: costs nothing more
            if fresh := sorted(n for n in nodes if n not in out):
                units[unit] = fresh
        if not units:
            continue
        if breaker_open:
            refused.update(
                (n, "breaker open: a human must reset it") for u in units.values() for n in u
            )
            continue
        room = max(0, limit - len(out))
        held_over = {
            u: ns
            for u, ns in units.items()
            if any(n in standing for n in ns) or all(n in returning for n in ns)
        }
        held_in, held_out = _fit(held_over, room)
        admitted.update(n for u in held_in for n in held_over[u])
        taken = sum(len(held_over[u]) for u in held_in)
        room -= taken
        used = f"pool {pool} has {len(out)} of {size} out, limit {limit}"
        for u in held_out:
            since = "standing since the breaker reset"
            if not any(n in standing for n in held_over[u]):
                since = "returning from a failure, revalidated once there is room"
            refused.update((n, f"deferred: {since}; {used}") for n in held_over[u])
        new = {u: ns for u, ns in units.items() if u not in held_over}
        wanted = sum(len(ns) for ns in new.values())
        if not new:
            continue
        asking = sum(1 for ns in new.values() for n in ns if n in candidates)
        if asking > policy.mass(size):
            why = f"mass event in pool {pool}: {asking} of {size} nodes at once"
            refused.update((n, why) for ns in new.values() for n in ns)
            reasons.append(why)
            continue
        fits, left = _fit(new, room)
        admitted.update(n for u in fits for n in new[u])
        if not left:
            continue
        passing = out & (restarting or {}).get(pool, frozenset())
        if wanted <= limit - len(out - passing) - taken:
            why = f"deferred: {len(passing)} nodes of pool {pool} are restarting"
        else:
            why = (
                f"budget of pool {pool} exhausted: {len(out)} of {size} out, "
                f"limit {limit}, {wanted} more wanted"
            )
            reasons.append(why)
        refused.update((n, why) for u in left for n in new[u])
    _refuse_split_units(_nodes_by_unit(by_pool), admitted, refused)
    return Admission(
        admitted=frozenset(admitted),
        refused=refused,
        open_breaker="; ".join(reasons),
        pools=tuple(pools),
    )


def _nodes_by_unit(by_pool: Mapping[str, Mapping[str, set[str]]]) -> dict[str, set[str]]:
    """Every node of each named unit, whatever its pool (a K8s node's pods may be of many)."""
    units: dict[str, set[str]] = defaultdict(set)
    for pool_units in by_pool.values():
        for unit, nodes in pool_units.items():
            units[unit] |= nodes
    return units


def _refuse_split_units(
    units: Mapping[str, set[str]], admitted: set[str], refused: dict[str, str]
) -> None:
    """A unit refused in one pool is refused in every pool: its cordon takes all its nodes.

    The room its other nodes took in their pools this pass stays taken (the safe side).
    """
    for _, nodes in sorted(units.items()):
        no = sorted(n for n in nodes if n in refused)
        if not no or len(nodes) < 2:
            continue
        why = refused[no[0]]
        for node in nodes:
            admitted.discard(node)
            refused.setdefault(node, why)


def _fit(units: Mapping[str, list[str]], room: int) -> tuple[list[str], list[str]]:
    """Units that fit ``room`` taken in name order (first fit), and those that do not."""
    fits, left = [], []
    for unit in sorted(units):
        if len(units[unit]) <= room:
            fits.append(unit)
            room -= len(units[unit])
        else:
            left.append(unit)
    return fits, left

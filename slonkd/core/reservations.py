"""The reservation ledger: nodes a task was admitted to take out, held until the reads show it.

Three tasks of a leader take nodes out of service within one disruption budget: the pass,
the fast path and the rollout. Each weighs the budget on a read of its own (a SLURM table,
and the K8s node cache at that moment), and each read may predate another task's write: a
pass that read SLURM before the rollout's drain, the fast path on the last pass's table, a
cache the cordon's watch event has not reached yet. Weighed on such reads alone, a pool with
room for one node lost two (issue 37 item 3). So a node a task is admitted for is reserved
here before its write, and every admission counts the reservations its read may not show as
out of service, in the reservation's pool:

- while the write is in flight, the reservation counts for every read;
- once written, it counts for a read that began before the write returned (it cannot show
  it);
- for a read that began after, it counts until some such read has shown what the task did
  (:func:`shows`: the node out, or the pod it reserved replaced since; visible from then on:
  the SLURM table at once, the K8s caches once the watch event arrived, and a cache only
  moves forward), or for ``settle_s`` after the write, whichever comes first: a node no read
  shows out that long was put back, or never went;
- a task that wrote nothing (refused, paused, a dry run) releases its reservation at once.

A written reservation is forgotten ``keep_s`` after its write (no admission weighs a read
that old). Pure logic: the caller passes the clock (monotonic seconds).

Neighbours: :mod:`slonkd.core.budget` weighs requests against the nodes out (these counted);
:mod:`slonkd.runtime.coordinating.admitting` keeps the leader's one ledger for the pass and
the fast path, and :mod:`slonkd.runtime.coordinating.rolling` admits through it too
(:func:`slonkd.core.rollout.plan_rollout`'s ``reserved``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

SETTLE_S = 30.0
"""How long a written reservation counts for reads that do not show it (a late watch event)."""
KEEP_S = 600.0
"""How long a written reservation is kept for reads that began before the write."""


@dataclass(slots=True, kw_only=True)
class Reservation:
    """One node a task was admitted to take out."""

    node: str
    pool: str
    """Where the budget counts it (:func:`slonkd.core.budget.budget_group`)."""
    task: str
    """Who holds it: ``pass``, ``fast-path`` or ``rollout`` (for the log and status)."""
    ticket: int
    pod: str = ""
    """The uid of the node's pod when it was reserved ("" when it had none)."""
    written_at: float | None = None
    """When the task's write returned (None: in flight)."""
    shown: bool = False
    """A read that began after the write showed the node out."""


class Ledger:
    """The reservations of one leader's term."""

    def __init__(self, *, settle_s: float = SETTLE_S, keep_s: float = KEEP_S) -> None:
        if not 0 <= settle_s <= keep_s:
            raise ValueError("settle_s must be between 0 and keep_s")
        self.settle_s = settle_s
        self.keep_s = keep_s
        self._by_node: dict[str, Reservation] = {}
        self._tickets = 0

    def __len__(self) -> int:
        return len(self._by_node)

    def reservations(self) -> list[Reservation]:
        """Every reservation held now, by node name."""
        return [self._by_node[n] for n in sorted(self._by_node)]

    def held(
        self, *, read_at: float, now: float, shown: Callable[[Reservation], bool]
    ) -> dict[str, frozenset[str]]:
        """Per pool, the reserved nodes to count as out for a read that began at ``read_at``.

        ``shown(reservation)``: whether that read shows what the reserving task did
        (:func:`shows`); a written reservation that a read begun after the write shows is
        held no longer for such reads.
        """
        held: dict[str, set[str]] = defaultdict(set)
        for node, r in list(self._by_node.items()):
            if r.written_at is not None:
                if now - r.written_at > self.keep_s:
                    del self._by_node[node]
                    continue
                if read_at >= r.written_at:
                    r.shown = r.shown or shown(r)
                    if r.shown or now - r.written_at > self.settle_s:
                        continue
            held[r.pool].add(node)
        return {pool: frozenset(nodes) for pool, nodes in held.items()}

    def reserve(
        self, task: str, nodes: Mapping[str, str], *, pods: Mapping[str, str] | None = None
    ) -> int:
        """Reserve ``nodes`` (node -> pool) for ``task`` before its write; its ticket.

        ``pods``: node -> the uid of its pod now (see :func:`shows`).

        A node reserved already keeps its reservation (a task counts it as out, so it never
        asks for it as new room), unless that one was written and has settled: then the new
        write is what is in flight.
        """
        self._tickets += 1
        for node, pool in nodes.items():
            old = self._by_node.get(node)
            if old is None or old.written_at is not None:
                self._by_node[node] = Reservation(
                    node=node,
                    pool=pool,
                    task=task,
                    ticket=self._tickets,
                    pod=(pods or {}).get(node, ""),
                )
        return self._tickets

    def written(self, ticket: int, *, now: float, nodes: Collection[str] | None = None) -> None:
        """The task's write returned: ``nodes`` (None: all of the ticket's) were written.

        Its other nodes were not (refused, or not the task's to take after all): released.
        """
        for node, r in list(self._by_node.items()):
            if r.ticket != ticket or r.written_at is not None:
                continue
            if nodes is None or node in nodes:
                r.written_at = now
            else:
                del self._by_node[node]

    def release(self, ticket: int) -> None:
        """The task wrote nothing: its reservations in flight end."""
        self.written(ticket, now=0.0, nodes=())


def shows(reservation: Reservation, *, out: bool, pod: str | None) -> bool:
    """Whether a read shows what the reserving task did to the node.

    ``out``: the read shows the node out of service (:func:`slonkd.core.budget.out_of_service`);
    ``pod``: the uid of its pod in that read (None: no pod). A pod other than the one reserved
    shows it too: the task's cordon or eviction took that pod out, and the new one runs
    elsewhere (a cordoned K8s node keeps only the old pod out).
    """
    return out or bool(reservation.pod and pod and pod != reservation.pod)


__all__ = ["KEEP_S", "SETTLE_S", "Ledger", "Reservation", "shows"]

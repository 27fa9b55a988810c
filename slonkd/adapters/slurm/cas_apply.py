"""How a compare-and-set's plans become node updates: chunks, rechecks, refusals; any transport.

A backend (:class:`~slonkd.adapters.slurm.scontrol.ScontrolBackend` today) reads the nodes a
write touches and plans each one (:mod:`slonkd.core.slurm_plan`); :class:`CasApply` then
sends identical updates together as compressed hostlists (``hostlists.py``) chunked to
``max_hostlist_chars``, the first on the compare-and-set read just made, reads each later
chunk again right before writing it, and judges a chunk that slurmctld refused node by node
on a fresh read. Results (``results.py``) say which nodes changed and which were skipped,
and why.

It knows no transport: the backend gives it its node read (:data:`ReadNodes`) and its update
(:data:`SendUpdate`), and, when the first chunk goes another way, that chunk's update (the
scontrol backend: through the primed ``scontrol``, ``primed.py``; later chunks by argv). The
backend counts its own calls.

No update is sent twice on the same read. One that never reached slurmctld
(:class:`~slonkd.adapters.slurm.runner.NotReachedError`) is judged again on a new read of its
chunk and sent again, within the settings' attempts; one whose outcome is unknown (no answer
after the request left: :class:`~slonkd.core.errors.OutcomeUnknownError`) is raised, never
sent again: slurmctld may apply it late, and an operator may act after that (issue 37).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import hostlist

from slonkd.adapters.slurm.hostlists import chunk_hostlists, compress
from slonkd.adapters.slurm.results import UpdateResult
from slonkd.adapters.slurm.runner import NotReachedError, SlurmSettings, retrying
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd.core.slurm_plan import Planner, Skip, SkipReason, Update, plan_or_missing, shows

ReadNodes = Callable[[Sequence[str]], Awaitable[list[SlurmNode]]]
"""A backend's read of the named nodes (scontrol: ``scontrol -o show node LIST``)."""
SendUpdate = Callable[[str, str | None, str | None, str | None], Awaitable[bool]]
"""One update of the nodes of hostlist ``expr``: (expr, state, reason, extra), None leaving a
field as it is; sent once. True: slurmctld took it; False: it refused some of the nodes (one
vanished, a state changed under us). Raises :class:`NotReachedError` when it never reached
slurmctld (:meth:`CasApply.send` may send it again after a read) and
:class:`~slonkd.core.errors.OutcomeUnknownError` when it may have been applied (never sent
again)."""


@dataclass(slots=True)
class CasApply:
    """Sends a compare-and-set's planned updates (made per write, on the backend's callables)."""

    settings: SlurmSettings
    """``max_hostlist_chars`` (the chunks) and the attempts of a sending that never arrived."""
    read_nodes: ReadNodes
    """The backend's node read: each later chunk's recheck, a refused chunk's judgement."""
    update: SendUpdate
    """The backend's update (every chunk but the first, and the first if no other is given)."""
    first_update: SendUpdate | None = None
    """The first chunk's update, each sending of it, when it goes another way (scontrol: the
    primed process, which sends only what it can and hands the rest to argv)."""

    async def recheck(
        self, names: list[NodeName], key: tuple[str | None, str | None, str | None], plan: Planner
    ) -> tuple[list[NodeName], list[Skip]]:
        """Read a chunk again right before writing it; keep the nodes whose plan still holds.

        The compare-and-set read of a bulk update serves every chunk; without this, an operator's
        drain landing before a later chunk's write is resumed. What remains: one round trip.
        """
        fresh: dict[str, SlurmNode] = {n.name: n for n in await self.read_nodes(names)}
        keep: list[NodeName] = []
        skipped: list[Skip] = []
        for name in names:
            again = plan_or_missing(fresh, name, plan)
            if isinstance(again, Update) and again.group_key == key:
                keep.append(name)
            elif isinstance(again, Skip):
                skipped.append(again)
            else:
                skipped.append(Skip(node=name, why=SkipReason.CHANGED, detail=str(again.state)))
        return keep, skipped

    async def apply(
        self, plans: list[Update | Skip], replan: Planner | None = None
    ) -> UpdateResult:
        """Write ``plans`` (grouped by what they set); the caller counts the calls.

        The first chunk rides on the compare-and-set read just made; each later one is read
        again (``replan``) so that an operator's change in between is kept.
        """
        skipped = [p for p in plans if isinstance(p, Skip)]
        groups: dict[tuple[str | None, str | None, str | None], list[Update]] = {}
        for plan in plans:
            if isinstance(plan, Update):
                groups.setdefault(plan.group_key, []).append(plan)
        changed: list[NodeName] = []
        unsure: list[Update] = []
        first = True  # the first chunk's read is the compare-and-set read just made
        for key, updates in groups.items():
            by_name = {u.node: u for u in updates}
            for expr in chunk_hostlists(list(by_name), self.settings.max_hostlist_chars):
                names, moved, wrote = await self.send(expr, key, replan, first=first)
                first = False
                skipped.extend(moved)
                if wrote:
                    changed.extend(names)
                else:
                    unsure.extend(by_name[n] for n in names)
        if unsure:
            # slurmctld refused part of a chunk, yet applies a bulk update to the nodes it
            # can (and 22.05 even says "Invalid node state" for a resume it carried out on
            # a node without slurmd): read once more and judge each node by what it shows.
            after = {n.name: n for n in await self.read_nodes([u.node for u in unsure])}
            for update in unsure:
                node = after.get(update.node)
                if node is None:
                    skipped.append(Skip(node=update.node, why=SkipReason.NOT_FOUND))
                elif shows(node, update):
                    changed.append(update.node)
                else:
                    skipped.append(
                        Skip(node=update.node, why=SkipReason.REFUSED, detail=str(node.state))
                    )
        still = [u for g in groups.values() for u in g if u.still_held_by and u.node in changed]
        skipped.extend(
            Skip(node=u.node, why=SkipReason.OTHER_CAUSES, detail=u.still_held_by) for u in still
        )
        held = {u.node for u in still}
        return UpdateResult(
            changed=tuple(n for n in changed if n not in held),
            skipped=tuple(skipped),
        )

    async def send(
        self,
        expr: str,
        key: tuple[str | None, str | None, str | None],
        replan: Planner | None,
        *,
        first: bool,
    ) -> tuple[list[NodeName], list[Skip], bool]:
        """One chunk's update: (the nodes it went to, those skipped on a new read, written).

        ``first``: the compare-and-set read was just made for it (and it goes by
        ``first_update`` if there is one); otherwise (a later chunk, or a second sending after
        :class:`NotReachedError`) the chunk is read again first (``replan``) and only the
        nodes whose plan still holds go. An unknown outcome is raised as it is: the caller's
        next read judges it.
        """
        update = self.first_update if first and self.first_update is not None else self.update
        fresh = first
        names = [NodeName(n) for n in hostlist.expand_hostlist(expr)]
        skipped: list[Skip] = []
        async for attempt in retrying(self.settings, NotReachedError):
            with attempt:
                if not fresh and replan is not None:
                    names, moved = await self.recheck(names, key, replan)
                    skipped.extend(moved)
                    if not names:
                        return names, skipped, True
                    expr = compress(names)
                fresh = False  # a second sending is judged on a new read
                return names, skipped, await update(expr, *key)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

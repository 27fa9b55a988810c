"""The holds, releases and reboot requests every SLURM backend writes: one plan each.

:class:`CasWrites` is the half of :class:`~slonkd.adapters.slurm.backend.SlurmWrites` that is
the same on every transport: drain, down and fail plan a hold (:func:`~slonkd.core.
slurm_plan.plan_hold`), resume and undrain a release (:func:`~slonkd.core.slurm_plan.
plan_release`), under slonkd's ownership rules, and hand the planner to the backend's own
compare-and-set (its read, then :class:`~slonkd.adapters.slurm.cas_apply.CasApply` on its
update): :class:`~slonkd.adapters.slurm.scontrol.ScontrolBackend` and
:class:`~slonkd.adapters.slurm.pyslurm_writes.PyslurmBackend`.
"""

from __future__ import annotations

from collections.abc import Sequence

import hostlist

from slonkd.adapters.slurm.hostlists import chunk_hostlists
from slonkd.adapters.slurm.results import UpdateResult
from slonkd.adapters.slurm.runner import CommandRunner, SlurmSettings, counting
from slonkd.core.reasons import Cause, format_reason
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd.core.slurm_plan import (
    HoldState,
    Planner,
    ReleaseState,
    Skip,
    SkipReason,
    Update,
    plan_hold,
    plan_or_missing,
    plan_reboot,
    plan_release,
)


class CasWrites:
    """Holds, releases and reboot requests as plans; the backend reads and applies them.

    A backend gives :meth:`read_then_apply` and :meth:`read_for_update`, and a ``runner`` for
    ``scontrol reboot`` (the one request libslurm has no call for, so every backend sends it
    with SLURM's client).
    """

    __slots__ = ()
    settings: SlurmSettings
    runner: CommandRunner

    async def read_for_update(
        self, names: Sequence[str], *, hold: bool = False
    ) -> dict[str, SlurmNode]:
        """The fresh read of ``names`` a compare-and-set decides on (the backend's)."""
        raise NotImplementedError

    async def read_then_apply(
        self, names: Sequence[str], planner: Planner, *, hold: bool = False
    ) -> UpdateResult:
        """Read ``names`` fresh, plan each with ``planner``, write the plans (the backend's).

        ``hold``: the plans hold nodes (the scontrol backend reads a node's ``extra`` exactly
        before one).
        """
        raise NotImplementedError

    async def drain(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Drain ``names`` for ``cause``; foreign, SLURM-held and unknown nodes are skipped."""
        return await self._hold(names, HoldState.DRAIN, cause, text)

    async def down(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Mark ``names`` DOWN (running jobs are requeued by SLURM) under slonkd's reason."""
        return await self._hold(names, HoldState.DOWN, cause, text)

    async def fail(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Mark ``names`` FAIL under slonkd's reason."""
        return await self._hold(names, HoldState.FAIL, cause, text)

    async def resume(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """Release ``cause``; resume nodes slonkd holds for no other cause."""
        return await self._release(names, ReleaseState.RESUME, cause)

    async def undrain(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """Like :meth:`resume` but only removes DRAIN (a DOWN node stays DOWN)."""
        return await self._release(names, ReleaseState.UNDRAIN, cause)

    async def request_reboot(
        self, names: Sequence[str], cause: Cause, text: str = ""
    ) -> UpdateResult:
        """``scontrol reboot ASAP`` of the nodes slonkd may hold, once per request.

        First a compare-and-set drain for ``cause`` (next to any other cause slonkd holds the
        node for), then, on a fresh read, the reboot of every node slonkd's reason holds now,
        that reason unchanged (:func:`plan_reboot`). A node whose reboot is pending already is
        skipped (``reboot-pending``); ``changed`` names the nodes a reboot was sent for.
        """
        with counting() as calls:
            wanted = list(dict.fromkeys(names))
            drained = await self._hold(wanted, HoldState.DRAIN, cause, text)
            refused = {s.node for s in drained.skipped if s.why is not SkipReason.ALREADY_HELD}
            skipped = [s for s in drained.skipped if s.node in refused]
            rest = [n for n in wanted if n not in refused]
            nodes = await self.read_for_update(rest, hold=True) if rest else {}
            plans = [plan_or_missing(nodes, n, plan_reboot) for n in rest]
            skipped += [p for p in plans if isinstance(p, Skip)]
            by_reason: dict[str, list[NodeName]] = {}
            for plan in plans:
                if isinstance(plan, Update):
                    reason = plan.reason or format_reason(cause, text)
                    by_reason.setdefault(reason, []).append(plan.node)
            changed: list[NodeName] = []
            for reason, todo in by_reason.items():
                for expr in chunk_hostlists(todo, self.settings.max_hostlist_chars):
                    await self.runner.write("scontrol", "reboot", "ASAP", f"reason={reason}", expr)
                    changed += [NodeName(n) for n in hostlist.expand_hostlist(expr)]
            return UpdateResult(changed=tuple(changed), skipped=tuple(skipped), calls=calls())

    async def _hold(
        self, names: Sequence[str], how: HoldState, cause: Cause, text: str
    ) -> UpdateResult:
        def planner(node: SlurmNode) -> Update | Skip:
            return plan_hold(node, how, cause, text)

        return await self.read_then_apply(names, planner, hold=True)

    async def _release(self, names: Sequence[str], how: ReleaseState, cause: Cause) -> UpdateResult:
        def planner(node: SlurmNode) -> Update | Skip:
            return plan_release(node, how, cause)

        return await self.read_then_apply(names, planner)

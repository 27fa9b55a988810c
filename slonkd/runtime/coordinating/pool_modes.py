"""Each pool's mode in the coordinator's passes: what is taken, and what is only reported.

The rules are :mod:`slonkd.core.modes`' (observe, quarantine, full; lifecycle drains in every
mode). A pool's mode is the operator's (``slonkd mode POOL MODE``, kept in the state
ConfigMap, :mod:`.remembering`), else the chart's (the ``pool_modes`` setting,
:mod:`.settings`), else ``full``; the dry run is ``observe`` for every pool. The pass
(:mod:`.reconciling`) and the fast path (:mod:`.fast_path`) act on the kept plans only; the
pass reports each action a mode holds back: logged (``coordinator.would_act``), audited with
outcome ``observed``, counted (``slonkd_would_act{mode,action,cause}``) and, outside a dry
run, a Normal Event on the K8s node; each once per node, action and cause while it stays held
back, not every pass.

A pool whose mode lets more through than at the last pass (observe to quarantine or full,
quarantine to full) hands the nodes it held back to the budget gate (:mod:`.admitting`) as
standing: admitted within the budget, never as a mass event.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from prometheus_client import Counter

from slonkd.adapters.kube.ports import EventWrites
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.errors import SlonkdError
from slonkd.core.kube_changes import ObjectRef
from slonkd.core.modes import Mode, Would, held_back, mode_of, pool_of, split
from slonkd.core.plan import NodeView, Plan
from slonkd.runtime.coordinating.auditing import Auditor

log = structlog.get_logger("slonkd.coordinator")

_RANK = {Mode.OBSERVE: 0, Mode.QUARANTINE: 1, Mode.FULL: 2}


class PoolModes:
    """The modes of one leader's term: the split of each pass and its report."""

    def __init__(
        self,
        configured: Mapping[str, Mode],
        *,
        auditor: Auditor,
        events: EventWrites,
        would_act: Counter,
    ) -> None:
        self.configured = dict(configured)
        self.auditor = auditor
        self.events = events
        self.would_act = would_act
        self._said: dict[str, set[tuple[str, str, str, str]]] = {}
        """Per node, the held-back actions reported and still held back at the last pass (one
        that goes away, a failure that ended, is reported again if it comes back)."""
        self._last: dict[str, Mode] = {}
        """Each pool's mode at the last pass."""
        self._held: dict[str, frozenset[str]] = {}
        """Per pool: the nodes whose budgeted actions its mode held back at the last pass."""
        self.would: tuple[Would, ...] = ()
        """The last pass's held-back actions (``slonkd status``)."""

    def modes(self, state: CoordinatorState, pools: Sequence[str]) -> dict[str, Mode]:
        """The mode of each of ``pools`` (and of every pool given a mode)."""
        chosen = {k: Mode(v.mode) for k, v in state.pool_modes.items()}
        every = set(pools) | set(chosen) | set(self.configured)
        return {
            p: mode_of(p, chosen=chosen, configured=self.configured, dry_run=self.auditor.dry_run)
            for p in every
        }

    def filter(
        self, plans: Sequence[Plan], groups: Sequence[str], state: CoordinatorState
    ) -> tuple[list[Plan], list[Would]]:
        """The plans as the modes let them through (the fast path's: nothing remembered)."""
        pools = [pool_of(g) for g in groups]
        return split(plans, pools, self.modes(state, pools))

    def take(
        self, plans: Sequence[Plan], groups: Sequence[str], state: CoordinatorState
    ) -> tuple[list[Plan], list[Would], frozenset[str]]:
        """A pass's split, and the nodes that stand now that their pool's mode lets them go."""
        pools = [pool_of(g) for g in groups]
        modes = self.modes(state, pools)
        kept, would = split(plans, pools, modes)
        standing: set[str] = set()
        for pool, mode in modes.items():
            was = self._last.get(pool)
            if was is not None and mode is not was:
                chosen = state.pool_modes.get(pool)
                self.auditor.log.record(
                    action="mode",
                    node=f"pool/{pool}",
                    cause="operator" if chosen is not None else "settings",
                    fencing_token=state.fencing_token,
                    outcome=f"{was.value} -> {mode.value}",
                    by=chosen.by if chosen is not None else "",
                    dry_run=self.auditor.dry_run,
                )
            if was is not None and _RANK[mode] > _RANK[was] and self._held.get(pool):
                standing |= self._held[pool]
                log.info(
                    "coordinator.mode_switched",
                    pool=pool,
                    was=was.value,
                    mode=mode.value,
                    standing=len(self._held[pool]),
                    detail="held-back actions are admitted within the budget, never a mass event",
                )
        self._last = modes
        self._held = {pool: held_back([w for w in would if w.pool == pool]) for pool in modes}
        self.would = tuple(would)
        return kept, would, frozenset(standing)

    async def report(self, views: Sequence[NodeView], would: Sequence[Would], token: int) -> None:
        """Log, audit, count and record an Event for each would-be action new for its node."""
        by_node = {v.node: v for v in views}
        said, self._said = self._said, {}
        for w in would:
            a = w.action
            key = (a.kind.value, str(a.cause), a.key, w.mode.value)
            self._said.setdefault(str(w.node), set()).add(key)
            if key in said.get(str(w.node), ()):
                continue
            view = by_node.get(w.node)
            kube = view.kube_node if view is not None else None
            log.info(
                "coordinator.would_act",
                node=w.node,
                pool=w.pool,
                mode=w.mode.value,
                action=a.kind.value,
                cause=str(a.cause),
                kube_node=kube.name if kube is not None else "",
            )
            self.auditor.log.record(
                action=a.kind.value,
                node=str(w.node),
                cause=str(a.cause),
                fencing_token=token,
                outcome="observed",
                before=None,
                after=None,
                dry_run=self.auditor.dry_run,
                mode=w.mode.value,
                pool=w.pool,
            )
            self.would_act.labels(mode=w.mode.value, action=a.kind.value, cause=a.cause.name).inc()
            if kube is None or self.auditor.dry_run:
                continue  # a dry run writes nothing, Events neither
            with contextlib.suppress(SlonkdError):
                await self.events.record(
                    ObjectRef(kind="Node", name=kube.name, uid=kube.uid),
                    type_="Normal",
                    reason="SlonkdWouldAct",
                    message=f"slonkd ({w.mode.value} mode, pool {w.pool}): would {a.kind.value}"
                    f" for {a.cause} on {w.node}; nothing changed",
                )

    def pools(self) -> list[str]:
        """The pools of the last pass (``slonkd status`` without grouping every node again)."""
        return list(self._last)

    def acting(self) -> bool:
        """Whether a pool of the last pass takes more than it observes.

        A suspected check opens the breaker only then: an observe-only fleet (a dry run among
        them) changes nothing, its state neither.
        """
        return any(mode is not Mode.OBSERVE for mode in self._last.values())

    def status(self, state: CoordinatorState, pools: Sequence[str]) -> dict[str, Any]:
        """Each pool's mode, where it comes from, and how many actions it holds back."""
        modes = self.modes(state, pools)
        out: dict[str, Any] = {}
        for pool, mode in sorted(modes.items()):
            chosen = state.pool_modes.get(pool)
            source = (
                "dry run"
                if self.auditor.dry_run
                else f"slonkd mode, by {chosen.by}"
                if chosen is not None
                else "chart"
                if pool in self.configured
                else "default"
            )
            out[pool] = {
                "mode": mode.value,
                "source": source,
                "would": sum(1 for w in self.would if w.pool == pool),
            }
        return out

"""The coordinator: one leader that reconciles every worker node in bulk, a pass at a time.

While it holds the Lease it watches every K8s node and the worker pods, reads all SLURM
nodes in one call per pass (on events, debounced, and on a resync period), builds a
:class:`~slonkd.core.plan.NodeView` per worker pod (:mod:`.observing`), calls ``decide``
and executes the coordinator's actions (:mod:`.executing`): SLURM drains, downs and releases
grouped by cause into hostlist calls; cordons, taints, the ``SlurmHealthy`` condition, Events
and evictions per K8s node, and the remediation ladder (:mod:`.remediating`). It acts only
after its caches synced and a SLURM read succeeded, checks its lease right before each write
(a paused old leader writes nothing), and keeps a disruption budget per pool
(:mod:`.admitting`): automated actions past it are refused, the breaker opens and stays open
until ``slonkd budget reset``. Breaker, pause and remediation history live in the state
ConfigMap (:mod:`.remembering`), so a failover neither resets nor repeats them. Every action
goes to the audit log (:mod:`.auditing`); each pool's mode (:mod:`.pool_modes`: observe,
quarantine, full) keeps back what it does not take and reports it; ``dry_run`` is observe for
every pool, and writes nothing. The
last pass is kept as a :class:`Snapshot` for ``slonkd status`` and ``slonkd explain``. Before
each pass, on the wake, the fast path (:mod:`.fast_path`) marks the K8s nodes of SLURM failures
a poll saw, with the same planner and gate.

:class:`Coordinator` runs the passes on a :class:`~.composing.Composition`, the composition
root of one leader's term (:mod:`.composing`): its collaborators are typed against protocols
(:class:`~.composing.Parts`), so a unit test runs a pass with fakes. The term's tasks and
loop are :mod:`.term`'s, the process around it :mod:`.leading`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import structlog

from slonkd.core.budget import Admission
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.plan import Action, Kind, NodeView, Plan, Writer
from slonkd.core.reasons import Cause
from slonkd.runtime.coordinating import returning
from slonkd.runtime.coordinating.composing import Composition
from slonkd.runtime.coordinating.executing import SLURM_KINDS
from slonkd.runtime.coordinating.values import slurm_text

log = structlog.get_logger("slonkd.coordinator")


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """The views, plans and budget of the last pass (for status and explain)."""

    at: float
    views: tuple[NodeView, ...]
    plans: tuple[Plan, ...]
    admission: Admission
    state: CoordinatorState
    fencing_token: int
    duration_ms: float = 0.0
    phases_ms: dict[str, float] = field(default_factory=dict)


class Coordinator(Composition):
    """The leader's reconcile passes over all worker nodes."""

    # The pass's own state (the rest is the Composition's); immutable defaults, set per instance.
    snapshot: Snapshot | None = None
    passes = 0
    suspected: frozenset[Cause] = frozenset()

    def status_sections(self) -> dict[str, Any]:
        """Extra sections of ``slonkd status`` (topology, rollout, quarantined machines)."""
        sections: dict[str, Any] = {
            "passes": {
                "count": self.passes,
                "last_ms": self.snapshot.duration_ms if self.snapshot else None,
                "last_phases_ms": self.snapshot.phases_ms if self.snapshot else {},
                "slurm_reads": self.reads.reads,
                "slurm_reads_reused": self.pass_read.reused,
                "slurm_polls": self.watch.polls if self.watch else 0,
                "first_ms": self.first_pass_ms,
                "slurm_change_polls": self.watch.probes if self.watch else 0,
                "slurm_poll_backend": self.watch.backend if self.watch else "off",
                "slurm_poll_why": self.watch.why if self.watch else "poll_s is 0",
                "slurm_backend": self.slurm_choice.name,
                "slurm_backend_why": self.slurm_choice.why,
            }
        }
        if self.topology is not None:
            sections["topology"] = self.topology.status()
        if self.rollout is not None:
            sections["rollout"] = self.rollout.status()
        if self.job_outcomes is not None:
            sections["job_blame"] = self.job_outcomes.status()
        sections["quarantined"] = returning.section(self, time.time())
        sections["modes"] = self.modes.status(self.state, self.modes.pools())
        return sections

    # -- one pass ----------------------------------------------------------------------------

    def read_slurm_ahead(self) -> None:
        """Start the first pass's SLURM read now, beside the lists (see :mod:`.pass_read`)."""
        self.pass_read.start_ahead()

    def cancel_read_ahead(self) -> None:
        """Stop a read started ahead that no pass took (the term ends)."""
        self.pass_read.cancel_ahead()

    async def reconcile_all(self) -> list[Plan]:
        """Read SLURM and the state once, decide for every worker, apply in bulk."""
        first = self.passes == 0
        slurm_nodes, read_began, began, reused = await self.pass_read.table()
        read_at = time.monotonic()
        was_open, rollout_was = self.state.breaker_open, self._rollout_verdict()
        await self.memory.load()
        if was_open and not self.state.breaker_open:
            self.gate.reset_seen()
        if self.rollout is not None and self._rollout_verdict() != rollout_was:
            self.rollout.poke()  # paused, unpaused or reset: the rollout looks again now
        state_at = time.monotonic()
        views = self.observer.views(slurm_nodes, time.time(), self.state)
        if self.job_outcomes is not None:
            views = self.job_outcomes.annotate(views)
        plans, suspected = self.planner(views)
        groups = self.gate.groups(views)  # once a pass: the modes', the budget's, the ledger's
        plans, would, standing = self.modes.take(plans, groups, self.state)
        self.gate.add_standing(standing)  # a pool's mode let them go: within the budget
        newly = sorted(str(c) for c in suspected - self.suspected)
        for suspect in newly:
            log.warning(
                "health.cause_suspected",
                cause=suspect,
                owner="coordinator",
                detail="many nodes fail the same check at once: suspecting the check",
            )
        self.suspected = suspected
        admission, ticket = self.gate.take(
            views, plans, task="pass", read_at=read_began, groups=groups
        )
        try:
            self.gate.keep_standing(admission)  # still wanted
            token = self.elector.check_valid()  # a paused old leader stops here
            why = admission.open_breaker or (
                f"suspected check(s) {', '.join(newly)}: the same failure on many nodes at once"
                if newly and self.modes.acting()
                else ""
            )
            if why and not self.state.breaker_open and not self.memory.error:
                await self.gate.open_breaker(why, token)
            self.gate.log_refusals(admission)
            await self.modes.report(views, would, token)  # what each pool's mode held back
            slurm_groups: dict[tuple[Kind, Cause], list[str]] = defaultdict(list)
            kube_actions: dict[str, tuple[NodeView, list[Action]]] = {}  # per node, in plan order
            for view, plan in zip(views, plans, strict=True):
                for action in plan.for_writer(Writer.COORDINATOR):
                    if action.budgeted and view.node in admission.refused:
                        continue
                    if action.kind in SLURM_KINDS:
                        slurm_groups[(action.kind, action.cause)].append(view.node)
                    else:
                        kube_actions.setdefault(view.node, (view, []))[1].append(action)
            acted = {name for names in slurm_groups.values() for name in names}
            before = {str(v.node): slurm_text(v.slurm) for v in views if v.node in acted}
            decided_at = time.monotonic()
            failed = 0
            for (kind, cause), names in sorted(
                slurm_groups.items(), key=lambda kv: (kv[0][0] != Kind.REQUEUE, str(kv[0]))
            ):
                self.elector.check_valid()
                failed += await self.executor.isolated(
                    self.executor.apply_slurm(kind, cause, names, token, before),
                    action=kind, cause=cause, nodes=names, token=token,
                )  # fmt: skip
            for view, actions in kube_actions.values():
                _, failures = await self.executor.apply_kube_all(
                    view, actions, token, self.elector.check_valid
                )
                failed += failures
        finally:  # held until the reads show what the pass took out (a dry run: nothing)
            (self.gate.release if self.s.dry_run else self.gate.written)(ticket)
        await self.revalidator.after_pass(views, plans)
        returning.observe(self, time.time())
        self.metrics.reconciled("ok", time.monotonic() - began)
        self.metrics.breaker_open.set(1 if self.state.breaker_open else 0)
        self.metrics.paused.set(1 if self.state.paused else 0)
        self.metrics.budget_refused.set(len(admission.refused))
        self.metrics.suspected.set(len(suspected))
        if self.fleet is not None:
            self.fleet.observe_pass(slurm_nodes, views, plans, admission)
        self.snapshot = Snapshot(
            at=time.time(),
            views=tuple(views),
            plans=tuple(plans),
            admission=admission,
            state=self.state,
            fencing_token=token,
            duration_ms=round((time.monotonic() - began) * 1000, 1),
            phases_ms={
                "slurm_read": round((read_at - began) * 1000, 1),
                "state_read": round((state_at - read_at) * 1000, 1),
                "decide": round((decided_at - state_at) * 1000, 1),
                "apply": round((time.monotonic() - decided_at) * 1000, 1),
            },
        )
        if first:
            self.first_pass_ms = {
                "term_to_pass_ms": round((began - self.began) * 1000, 1),
                **self.first_pass_ms,  # the lists (.leading)
                **self.snapshot.phases_ms,
                "pass_ms": self.snapshot.duration_ms,
            }
        self.passes += 1
        (log.info if slurm_groups or kube_actions or would else log.debug)(
            "coordinator.pass",
            nodes=len(views),
            slurm_calls=len(slurm_groups),
            kube_actions=len(kube_actions),
            held_back=len(would),  # by the pools' modes (.pool_modes)
            failed_actions=failed,
            slurm_read="poll's" if reused else "own",
            duration_ms=round((time.monotonic() - began) * 1000, 1),
        )
        return plans

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
goes to the audit log (:mod:`.auditing`); ``dry_run`` logs the plans and writes nothing. The
last pass is kept as a :class:`Snapshot` for ``slonkd status`` and ``slonkd explain``. Between
passes, the fast path (:mod:`.fast_path`) marks the K8s nodes of SLURM failures a poll saw.

:class:`Coordinator` is also the composition root of one leader's term: it is built from
collaborators typed against protocols (:class:`Parts`), so a unit test runs a pass with
fakes. The term's loop and the process around it are :mod:`.leading`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from slonkd.adapters.kube.events import EventRecorder
from slonkd.adapters.kube.lease import LeaderElector
from slonkd.adapters.kube.nodes import NodeWriter
from slonkd.adapters.kube.pods import PodWriter
from slonkd.adapters.kube.ports import EventWrites, NodeWrites, PodWrites, StateStorage
from slonkd.adapters.kube.sources import coordinator_informers
from slonkd.adapters.kube.state import StateStore
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.adapters.slurm.runner import CommandRunner
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.adapters.slurm.triggers import Triggers
from slonkd.core.budget import Admission, BudgetPolicy
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.decide import decide
from slonkd.core.fleet_decide import merge_shared_nodes, suspect_common_causes
from slonkd.core.plan import Action, Kind, NodeView, Plan, Writer
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import SlurmNode
from slonkd.runtime.audit import AuditLog
from slonkd.runtime.commands import CommandSender
from slonkd.runtime.coordinating.admitting import Gate
from slonkd.runtime.coordinating.auditing import Auditor
from slonkd.runtime.coordinating.executing import SLURM_KINDS, Executor
from slonkd.runtime.coordinating.fast_path import FastPath
from slonkd.runtime.coordinating.job_outcomes import JobOutcomes
from slonkd.runtime.coordinating.observing import Observer, coordinator_bus
from slonkd.runtime.coordinating.pass_read import PassRead
from slonkd.runtime.coordinating.remediating import Remediator
from slonkd.runtime.coordinating.remembering import Memory
from slonkd.runtime.coordinating.revalidating import Revalidator
from slonkd.runtime.coordinating.rolling import RolloutController
from slonkd.runtime.coordinating.settings import CoordinatorSettings
from slonkd.runtime.coordinating.triggering import TriggerKeeper, nudge_client_provisioner
from slonkd.runtime.coordinating.values import slurm_text
from slonkd.runtime.credentials import credential_reaper
from slonkd.runtime.fleet_metrics import FleetExporter
from slonkd.runtime.metrics import Metrics
from slonkd.runtime.slurm_watch import ReadLimiter, SlurmWatch, change_probe
from slonkd.runtime.topology_sync import TopologySync

log = structlog.get_logger("slonkd.coordinator")


@dataclass(frozen=True, slots=True, kw_only=True)
class Parts:
    """The writers a pass uses: SLURM, K8s nodes, pods, Events and the state ConfigMap."""

    slurm: SlurmBackend
    nodes: NodeWrites
    pods: PodWrites
    events: EventWrites
    store: StateStorage


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


class Coordinator:
    """The leader's reconcile passes over all worker nodes."""

    def __init__(
        self,
        s: CoordinatorSettings,
        transport: KubeTransport,
        elector: LeaderElector,
        *,
        metrics: Metrics | None = None,
        parts: Parts | None = None,
    ) -> None:
        self.s = s
        self.elector = elector
        self.metrics = metrics or Metrics(role="coordinator")
        scontrol = ScontrolBackend(s.slurm)
        parts = parts or Parts(
            slurm=scontrol,
            nodes=NodeWriter(transport),
            pods=PodWriter(transport),
            events=EventRecorder(transport),
            store=StateStore(transport, s.namespace, s.state_name),
        )
        self.slurm = parts.slurm
        nodes, pods = coordinator_informers(transport, s.namespace, pod_selector=s.pod_selector)
        self.observer = Observer(nodes, pods)
        self.nodes, self.pods = nodes, pods
        self.health = self.observer.health
        """Latest verdicts per SLURM node from its agent's retained status (absent: unknown)."""
        self.memory = Memory(
            store=parts.store, events=parts.events, namespace=s.namespace, name=s.state_name
        )
        self.budget = BudgetPolicy(
            max_out=s.max_out, max_out_percent=s.max_out_percent, mass_percent=s.mass_percent
        )
        self.audit = AuditLog(
            Path(s.audit_path) if s.audit_path else None,
            identity=s.identity,
            max_bytes=s.audit_max_bytes,
            keep=s.audit_keep,
        )
        self.auditor = Auditor(self.audit, dry_run=s.dry_run)
        self.gate = Gate(
            self.budget, block_label=s.budget_block_label, memory=self.memory, auditor=self.auditor
        )
        remediator = Remediator(
            slurm=parts.slurm, nodes=parts.nodes, pods=parts.pods, events=parts.events,
            memory=self.memory, auditor=self.auditor, check_valid=elector.check_valid,
            revalidates=lambda: self.policy.revalidation.enabled,
        )  # fmt: skip
        self.executor = Executor(
            slurm=parts.slurm, nodes=parts.nodes, events=parts.events, remediator=remediator,
            auditor=self.auditor, metrics=self.metrics, is_valid=elector.is_valid,
        )  # fmt: skip
        self.fast_path = FastPath(  # marks between passes, see .fast_path
            observer=self.observer, memory=self.memory, gate=self.gate, executor=self.executor,
            plans=self._plans, check_valid=elector.check_valid,
        )  # fmt: skip
        self.snapshot: Snapshot | None = None
        self.reads = ReadLimiter(s.max_reads_per_s, on_read=self.metrics.slurm_reads.inc)
        self.watch = (
            SlurmWatch(
                self.slurm,
                self.reads,
                self.observer.on_slurm_change,
                poll_s=s.poll_s,
                probe_loader=change_probe(s),
                change_poll_s=s.change_poll_s,
            )
            if s.poll_s > 0
            else None
        )
        self._last_slurm: list[SlurmNode] | None = None
        self._last_slurm_at = 0.0
        """When the read behind ``_last_slurm`` began (monotonic): the fast path's read."""
        self.pass_read = PassRead(self.slurm, self.reads, max_age_s=s.poll_s)
        self.began = time.monotonic()
        self.first_pass_ms: dict[str, float] = {}
        """The term's way to its first pass: lists, waits and the pass's phases (status)."""
        self.fleet = FleetExporter() if s.fleet_metrics else None
        """The fleet's families; registered on /metrics by the term (:mod:`.leading`)."""
        self.sdiag = scontrol.diag
        self._scontrol = scontrol
        self.job_outcomes = (  # nodes blamed for failed jobs, see .job_outcomes
            JobOutcomes(s.job_blame, self._read_finished, self.observer.dirty.set)
            if s.job_blame is not None
            else None
        )
        if self.job_outcomes is not None:  # where each node name ran when: its pods
            self.pods.add_handler(self.job_outcomes.on_pod_event)
        self.passes = 0
        self.suspected: frozenset[Cause] = frozenset()
        self.bus = coordinator_bus(s)
        self.commands = (  # fenced commands to agents (recheck); see slonkd.runtime.commands
            CommandSender(
                self.bus, cluster=s.cluster, identity=s.identity, check_valid=elector.check_valid
            )
            if self.bus is not None
            else None
        )
        self.reaper = (  # revokes gone pods' MQTT clients; see slonkd.runtime.credential_reaper
            credential_reaper(s.credentials, transport, s.namespace, s.pod_selector, self.pods,
                              s.identity)
            if s.credentials is not None
            else None
        )  # fmt: skip
        if self.reaper is not None:
            self.pods.add_handler(self.reaper.on_pod_event)
        # proof of health before return needs the agents' answers: without a bus it is off
        self.policy = (
            s.policy
            if self.commands is not None
            else replace(s.policy, revalidation=replace(s.policy.revalidation, enabled=False))
        )
        self.revalidator = Revalidator(
            memory=self.memory, commands=self.commands, metrics=self.metrics,
            required=s.policy.revalidation.required, dry_run=s.dry_run,
            check_valid=elector.check_valid,
        )  # fmt: skip
        self.triggers = TriggerKeeper(  # slurmctld's PERM triggers, see .triggering
            triggers=Triggers(CommandRunner(s.slurm)),
            program=s.trigger_program,
            check_valid=elector.check_valid,
            provision=(
                nudge_client_provisioner(s.credentials, s.cluster, s.nudge_client)
                if s.credentials is not None and s.nudge_client is not None
                else None
            ),
        )
        self.topology: TopologySync | None = None
        if s.topology is not None:
            self.topology = TopologySync(
                s.topology, transport=transport, namespace=s.namespace, nodes=self.nodes,
                pods=self.pods, slurm=scontrol, check_valid=elector.check_valid,
            )  # fmt: skip
        self.rollout: RolloutController | None = None
        if s.rollout is not None:
            self.rollout = RolloutController(
                s.rollout, namespace=s.namespace, transport=transport, pods=self.pods,
                slurm=self.slurm, elector=elector, gate=self.gate, reads=self.reads,
                hold=self._rollout_hold, paused=self._rollout_paused, kube_nodes=self.nodes,
                auditor=self.auditor,
                metrics=self.metrics, table_age_s=s.poll_s,
            )  # fmt: skip

    @property
    def state(self) -> CoordinatorState:
        """Breaker, pause, remediation history and handled failures, as last read/written."""
        return self.memory.state

    def status_sections(self) -> dict[str, Any]:
        """Extra sections of ``slonkd status`` (topology, rollout) from the leader's tasks."""
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
            }
        }
        if self.topology is not None:
            sections["topology"] = self.topology.status()
        if self.rollout is not None:
            sections["rollout"] = self.rollout.status()
        if self.job_outcomes is not None:
            sections["job_blame"] = self.job_outcomes.status()
        return sections

    async def _read_finished(self) -> list[FinishedJob]:
        """The finished jobs slurmctld remembers, one read within the coordinator's limit."""
        await self.reads.acquire()
        return await self._scontrol.finished_jobs()

    def _rollout_paused(self) -> str:
        """Why the rollout may write nothing now, in any phase ("" when it may).

        Paused by an operator, or by a corrupt state (:mod:`.remembering` reads it as
        paused), or the term has not read its state yet: until then the state is the
        default, unpaused, whatever the ConfigMap says.
        """
        if not self.memory.known:
            return "the state ConfigMap has not been read in this term yet"
        if self.state.paused:
            return f"slonkd is paused: {self.state.paused_reason}"
        return ""

    def _rollout_hold(self) -> str:
        """Why rollouts may not take another node now ("" when they may)."""
        if self.state.breaker_open:
            return f"breaker open: {self.state.breaker_reason}"
        return ""

    def _rollout_verdict(self) -> tuple[str, str]:
        return self._rollout_paused(), self._rollout_hold()

    def _plans(self, views: list[NodeView]) -> tuple[list[Plan], frozenset[Cause]]:
        plans = merge_shared_nodes(views, [decide(v, self.policy) for v in views])
        return suspect_common_causes(
            views, plans, min_nodes=self.s.suspect_min_nodes, fraction=self.s.suspect_fraction
        )

    # -- the fast path -----------------------------------------------------------------------

    async def fast_marks(self) -> None:
        """Mark K8s nodes for SLURM failures the poll just saw, before the next full read.

        Only marking actions, inside the budget (:mod:`.fast_path`); the full pass that
        follows does everything else.
        """
        await self.fast_path.mark(self._last_slurm, self._last_slurm_at)

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
        self._last_slurm, self._last_slurm_at = slurm_nodes, read_began
        self.observer.read_since(read_began)  # what the poll handed over before, this read has
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
        plans, suspected = self._plans(views)
        newly = sorted(str(c) for c in suspected - self.suspected)
        for suspect in newly:
            log.warning(
                "health.cause_suspected",
                cause=suspect,
                owner="coordinator",
                detail="many nodes fail the same check at once: suspecting the check",
            )
        self.suspected = suspected
        admission, ticket = self.gate.take(views, plans, task="pass", read_at=read_began)
        try:
            self.gate.keep_standing(admission)  # still wanted
            token = self.elector.check_valid()  # a paused old leader stops here
            why = admission.open_breaker or (
                f"suspected check(s) {', '.join(newly)}: the same failure on many nodes at once"
                if newly
                else ""
            )
            if why and not self.state.breaker_open and not self.memory.error:
                await self.gate.open_breaker(why, token)
            self.gate.log_refusals(admission)
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
        (log.info if slurm_groups or kube_actions else log.debug)(
            "coordinator.pass",
            nodes=len(views),
            slurm_calls=len(slurm_groups),
            kube_actions=len(kube_actions),
            failed_actions=failed,
            slurm_read="poll's" if reused else "own",
            duration_ms=round((time.monotonic() - began) * 1000, 1),
        )
        return plans

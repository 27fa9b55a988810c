"""The coordinator's composition root: one leader's term, built from its settings.

:class:`Composition` builds every collaborator of a term from :class:`Parts`, the writers
typed against the ``SlurmBackend`` protocol and the kube ports
(:mod:`slonkd.adapters.kube.ports`): the adapters by default, fakes in a unit test. It builds
the caches and views (:mod:`.observing`), the state ConfigMap (:mod:`.remembering`), the
budget's gate (:mod:`.admitting`), the SLURM node table the term keeps (:mod:`.node_table`,
fed by every whole read through the port it wraps, dropped by every write), the audit
(:mod:`.auditing`), the one planner of the passes and the fast path
(:class:`~slonkd.core.fleet_decide.FleetPlanner`), the executors (:mod:`.executing`, with
:mod:`.remediating`'s steps), the changes the poll hands over (:mod:`.slurm_changes`), the
fast path (:mod:`.fast_path`), the table a pass takes (:mod:`.pass_read`) and the
revalidation (:mod:`.revalidating`), and
the term's other tasks: slurmctld's triggers (:mod:`.triggering`) and, as the settings turn
them on, the SLURM poll, fenced commands to agents, the credential reaper, topology, rollouts
(:mod:`.rolling`, paused and held by the state as read here) and job blame
(:mod:`.job_outcomes`). The passes are :mod:`.reconciling`'s
:class:`~.reconciling.Coordinator`, a Composition; the term's tasks and loop are
:mod:`.term`'s, the process around it :mod:`.leading`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from pathlib import Path

from slonkd.adapters.kube.events import EventRecorder
from slonkd.adapters.kube.lease import LeaderElector
from slonkd.adapters.kube.nodes import NodeWriter
from slonkd.adapters.kube.pods import PodWriter
from slonkd.adapters.kube.ports import EventWrites, NodeWrites, PodWrites, StateStorage
from slonkd.adapters.kube.sources import coordinator_informers
from slonkd.adapters.kube.state import StateStore
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.choice import BackendChoice
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.adapters.slurm.runner import CommandRunner
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.adapters.slurm.triggers import Triggers
from slonkd.core.budget import BudgetPolicy
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.fleet_decide import FleetPlanner
from slonkd.core.plan import Policy
from slonkd.runtime.coordinating.admitting import Gate
from slonkd.runtime.coordinating.audit_log import AuditLog
from slonkd.runtime.coordinating.auditing import Auditor
from slonkd.runtime.coordinating.commands import CommandSender
from slonkd.runtime.coordinating.credentials import credential_reaper
from slonkd.runtime.coordinating.executing import Executor
from slonkd.runtime.coordinating.fast_path import FastPath
from slonkd.runtime.coordinating.fleet_metrics import FleetExporter
from slonkd.runtime.coordinating.job_outcomes import JobOutcomes
from slonkd.runtime.coordinating.node_table import KeptSlurm, NodeTable
from slonkd.runtime.coordinating.observing import Observer, coordinator_bus
from slonkd.runtime.coordinating.pass_read import PassRead
from slonkd.runtime.coordinating.pool_modes import PoolModes
from slonkd.runtime.coordinating.remediating import Remediator
from slonkd.runtime.coordinating.remembering import Memory
from slonkd.runtime.coordinating.revalidating import Revalidator
from slonkd.runtime.coordinating.rolling import RolloutController
from slonkd.runtime.coordinating.settings import CoordinatorSettings
from slonkd.runtime.coordinating.slurm_watch import (
    ReadLimiter,
    SlurmChange,
    SlurmWatch,
    change_probe,
)
from slonkd.runtime.coordinating.topology_sync import TopologySync
from slonkd.runtime.coordinating.triggering import TriggerKeeper, nudge_client_provisioner
from slonkd.runtime.kit.metrics import Metrics


@dataclass(frozen=True, slots=True, kw_only=True)
class Parts:
    """The writers a pass uses: SLURM, K8s nodes, pods, Events and the state ConfigMap."""

    slurm: SlurmBackend
    nodes: NodeWrites
    pods: PodWrites
    events: EventWrites
    store: StateStorage


class Composition:
    """Every collaborator of one leader's term, built from its settings and :class:`Parts`."""

    def __init__(
        self,
        s: CoordinatorSettings,
        transport: KubeTransport,
        elector: LeaderElector,
        *,
        metrics: Metrics | None = None,
        parts: Parts | None = None,
        slurm: BackendChoice | None = None,
    ) -> None:
        self.s = s
        self.elector = elector
        self.metrics = metrics or Metrics(role="coordinator")
        self.slurm_choice = slurm or BackendChoice(
            backend=ScontrolBackend(s.slurm), name="scontrol", slurm_version="", why="default"
        )
        """The SLURM backend chosen at the process's start (``slonkd status`` shows it)."""
        parts = parts or Parts(
            slurm=self.slurm_choice.backend,
            nodes=NodeWriter(transport),
            pods=PodWriter(transport),
            events=EventRecorder(transport),
            store=StateStore(transport, s.namespace, s.state_name),
        )
        self.table = NodeTable()
        """SLURM's node table as this term last read it whole (:mod:`.node_table`)."""
        self.slurm = KeptSlurm(parts.slurm, self.table)
        """The SLURM port every part uses: its whole reads feed the table, its writes drop it."""
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
        self.bus = coordinator_bus(s)
        # proof of health before return needs the agents' answers: without a bus it is off
        self.planner = FleetPlanner(
            policy=(
                s.policy
                if self.bus is not None
                else replace(s.policy, revalidation=replace(s.policy.revalidation, enabled=False))
            ),
            suspect_min_nodes=s.suspect_min_nodes,
            suspect_fraction=s.suspect_fraction,
        )
        """How the passes and the fast path plan (one planner: they plan alike)."""
        self.gate = Gate(
            self.budget, block_label=s.budget_block_label, memory=self.memory, auditor=self.auditor
        )
        self.modes = PoolModes(  # each pool's mode, see .pool_modes
            s.pool_modes, auditor=self.auditor, events=parts.events,
            would_act=self.metrics.would_act,
        )  # fmt: skip
        remediator = Remediator(
            slurm=self.slurm, nodes=parts.nodes, pods=parts.pods, events=parts.events,
            memory=self.memory, auditor=self.auditor, check_valid=elector.check_valid,
            revalidates=lambda: self.policy.revalidation.enabled,
        )  # fmt: skip
        self.executor = Executor(
            slurm=self.slurm, nodes=parts.nodes, events=parts.events, remediator=remediator,
            auditor=self.auditor, metrics=self.metrics, is_valid=elector.is_valid,
        )  # fmt: skip
        self.reads = ReadLimiter(s.max_reads_per_s, on_read=self.metrics.slurm_reads.inc)
        self.pass_read = PassRead(self.slurm, self.reads, self.table, max_age_s=s.poll_s)
        self.changes: asyncio.Queue[SlurmChange] = asyncio.Queue()
        """What the poll saw change, until the fast path takes it (:mod:`.fast_path`)."""
        self.fast_path = FastPath(  # a marks-only pass on every wake, see .fast_path
            changes=self.changes, read=self.pass_read, observer=self.observer,
            memory=self.memory, planner=self.planner, gate=self.gate, executor=self.executor,
            check_valid=elector.check_valid, modes=self.modes,
        )  # fmt: skip
        self.watch = (
            SlurmWatch(
                self.slurm,
                self.reads,
                self.changes,
                wake=self.observer.dirty,
                poll_s=s.poll_s,
                probe_loader=change_probe(s),
                change_poll_s=s.change_poll_s,
                table=self.table,
            )
            if s.poll_s > 0
            else None
        )
        if self.watch is not None:  # a table aged past poll_s: one "changed?" before a read
            self.pass_read.confirm = self.watch.confirm_now
        self.began = time.monotonic()
        self.first_pass_ms: dict[str, float] = {}
        """The term's way to its first pass: lists, waits and the pass's phases (status)."""
        self.fleet = FleetExporter() if s.fleet_metrics else None
        """The fleet's families; registered on /metrics by the term (:mod:`.leading`)."""
        self.job_outcomes = (  # nodes blamed for failed jobs, see .job_outcomes
            JobOutcomes(s.job_blame, self._read_finished, self.observer.dirty.set)
            if s.job_blame is not None
            else None
        )
        if self.job_outcomes is not None:  # where each node name ran when: its pods
            self.pods.add_handler(self.job_outcomes.on_pod_event)
        self.commands = (  # fenced commands to agents (recheck); see .commands
            CommandSender(
                self.bus, cluster=s.cluster, identity=s.identity, check_valid=elector.check_valid
            )
            if self.bus is not None
            else None
        )
        self.reaper = (  # revokes gone pods' MQTT clients; see .credential_reaper
            credential_reaper(s.credentials, transport, s.namespace, s.pod_selector, self.pods,
                              s.identity)
            if s.credentials is not None
            else None
        )  # fmt: skip
        if self.reaper is not None:
            self.pods.add_handler(self.reaper.on_pod_event)
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
                pods=self.pods, slurm=self.slurm, check_valid=elector.check_valid,
            )  # fmt: skip
        self.rollout: RolloutController | None = None
        if s.rollout is not None:
            self.rollout = RolloutController(
                s.rollout, namespace=s.namespace, transport=transport, pods=self.pods,
                slurm=self.slurm, elector=elector, gate=self.gate, reads=self.reads,
                hold=self._rollout_hold, paused=self._rollout_paused, kube_nodes=self.nodes,
                auditor=self.auditor,
                metrics=self.metrics, table=self.table, table_age_s=s.poll_s,
            )  # fmt: skip

    @property
    def policy(self) -> Policy:
        """The term's decision policy (the planner's)."""
        return self.planner.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.planner.policy = policy

    @property
    def state(self) -> CoordinatorState:
        """Breaker, pause, remediation history and handled failures, as last read/written."""
        return self.memory.state

    async def _read_finished(self) -> list[FinishedJob]:
        """The finished jobs slurmctld remembers, one read within the coordinator's limit."""
        await self.reads.acquire()
        return await self.slurm.finished_jobs()

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

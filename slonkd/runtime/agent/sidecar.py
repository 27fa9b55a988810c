"""The sidecar agent: mirrors its own pod's lifecycle into its own SLURM node.

It watches exactly its pod and its Kubernetes node (field selectors, first list from the
watch cache), and on every change of either, and on a resync period, reconciles its SLURM
node: read it fresh, build a :class:`~slonkd.core.plan.NodeView`, call ``decide`` and
execute only the agent's actions (drain for ``pod-terminating``, release of that cause once
the node's next pod is Ready). Everything else (cordons, health drains, evictions) is the
coordinator's. The SLURM adapter re-checks ownership right before each write, so a restart
or a stale event converges without a duplicate action, and a drain someone else made is
never touched. One root TaskGroup owns every task; SIGTERM/SIGINT stop it with a deadline.

It serves /healthz, /readyz and /metrics (:mod:`slonkd.runtime.kit.http_server`) on
``metrics_address:metrics_port``; ready means both informers synced, neither refused by the
apiserver now (a revoked RoleBinding, a rejected token), and the reconcile loop runs, never
anything about slurmctld or MQTT (one outage must not unready every pod).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import structlog

from slonkd.adapters.bus.client import Bus
from slonkd.adapters.health.checks import build_checks
from slonkd.adapters.health.probes import ProbeGuard
from slonkd.adapters.kube.informer import CacheEvent, Informer
from slonkd.adapters.kube.kubeconfig import KubeConfigError
from slonkd.adapters.kube.sources import agent_informers
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.choice import close_backend, open_backend
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.checkpoint import requeue_cause
from slonkd.core.decide import decide
from slonkd.core.errors import TerminalError, TransientError
from slonkd.core.health import CheckResult, encode_verdict
from slonkd.core.kube_objects import Node, Pod
from slonkd.core.log_events import AGENT_POD_REPLACED, AGENT_SYNCED
from slonkd.core.messages import (
    AgentStatus,
    Channel,
    Command,
    node_topic,
)
from slonkd.core.plan import NodeView, Writer
from slonkd.core.pod_ready import ReadyTracker
from slonkd.core.slurm_node import NodeName
from slonkd.runtime.agent.apply import apply_action
from slonkd.runtime.agent.commands import (
    CommandListener,
    agent_bus,
    publishable_status,
    republish_on_reconnect,
    run_checks_now,
)
from slonkd.runtime.agent.health_loop import HealthLoop
from slonkd.runtime.agent.requeue_report import PATH as REQUEUE_REPORT_PATH
from slonkd.runtime.agent.requeue_report import RequeueReports
from slonkd.runtime.agent.settings import AgentSettings
from slonkd.runtime.kit.http_server import HttpServer, ServeError
from slonkd.runtime.kit.metrics import Metrics
from slonkd.runtime.kit.process import stop_on_signals
from slonkd.runtime.kit.reconcile import run_worker
from slonkd.runtime.kit.tls_files import warn_plain_text
from slonkd.runtime.kit.workqueue import WorkQueue

log = structlog.get_logger("slonkd.agent")

EXIT_BAD_KUBECONFIG = 2
EXIT_CANNOT_SERVE = 1


def informers_ready(*informers: tuple[str, Informer[Any]]) -> tuple[bool, str]:
    """Readiness of named informers: all synced and none refused by the apiserver now."""
    waiting = [what for what, informer in informers if not informer.synced.is_set()]
    if waiting:
        return False, f"not synced yet: {' and '.join(waiting)} informer"
    refused = [f"{what} informer refused: {i.refused}" for what, i in informers if i.refused]
    if refused:
        return False, "; ".join(refused)[:500]
    return True, "ready"


class Agent:
    """One agent: informers, a work queue with one key (its SLURM node), a reconciler."""

    def __init__(
        self,
        settings: AgentSettings,
        transport: KubeTransport,
        backend: SlurmBackend | None = None,
    ) -> None:
        self.s = settings
        self.backend: SlurmBackend = backend or ScontrolBackend(settings.slurm)
        """The SLURM port (chosen at start: :func:`~slonkd.adapters.slurm.choice.open_backend`)."""
        self.nodes, self.pods = agent_informers(
            transport, settings.namespace, pod_name=settings.pod_name, node_name=settings.kube_node
        )
        self.queue = WorkQueue()
        self.ready = ReadyTracker()
        self.verdicts: dict[str, CheckResult] = {}
        self.status_topic = node_topic(settings.cluster, settings.slurm_node, Channel.STATUS)
        self.bus: Bus | None = None
        self.commands: CommandListener | None = None
        if settings.bus is not None:
            offline = AgentStatus(node=settings.slurm_node, online=False, pod=settings.pod_name)
            self.bus = agent_bus(
                settings.bus, cluster=settings.cluster, node=settings.slurm_node,
                will=(self.status_topic, offline), bootstrap=settings.bootstrap,
            )  # fmt: skip
            self.commands = CommandListener(
                self.bus, node=settings.slurm_node, recheck=self._recheck
            )
        self.health: HealthLoop | None = None
        if settings.health is not None:
            checks = build_checks(settings.health, ProbeGuard())
            self.health = HealthLoop(
                checks=checks, policy=settings.hysteresis, on_change=self._on_verdict
            )
        self.actions = 0
        self._last_notes: tuple[str, ...] = ()
        self._replaced = False
        self.nodes.add_handler(self._on_event)
        self.pods.add_handler(self._on_event)
        self._worker: asyncio.Task[None] | None = None
        self.metrics = Metrics(role="agent")
        self.metrics.watch_informer("nodes", self.nodes.stats)
        self.metrics.watch_informer("pods", self.pods.stats)
        self.metrics.watch_queue(lambda: len(self.queue))
        self.metrics.watch_ready(lambda: self.readiness()[0])
        self.metrics.watch_health(self.verdicts)
        if self.bus is not None:
            self.metrics.watch_bus(self.bus)
        self.http: HttpServer | None = None
        self.requeues: RequeueReports | None = None
        if settings.metrics_port:
            self.http = HttpServer(
                host=settings.metrics_address,
                port=settings.metrics_port,
                registry=self.metrics.registry,
                ready=self.readiness,
            )
            http = self.http
            self.requeues = RequeueReports(
                registry=self.metrics.registry,
                cause_of=self._requeue_cause,
                scrapes=lambda: http.scrapes,
            )
            self.http.add_route("POST", REQUEUE_REPORT_PATH, self.requeues.handle)

    def readiness(self) -> tuple[bool, str]:
        """Ready: both informers synced, none refused (401/403), the reconcile loop runs.

        No remote call.
        """
        if self._worker is None or self._worker.done():
            return False, "reconcile loop not running"
        return informers_ready(("node", self.nodes), ("pod", self.pods))

    def _requeue_cause(self, held_for: str) -> str:
        """The cause label of the preStop's requeue: its SLURM cause, else the pod's disruption."""
        pod = self._pod()
        return requeue_cause(held_for=held_for, disruption=pod.disruption if pod else None)

    async def _recheck(self, command: Command) -> None:
        await run_checks_now(self.health, lambda: self.publish_status(answers=command.id))

    async def _on_verdict(self, result: CheckResult) -> None:
        self.verdicts[result.check] = result
        await self.publish_status()

    async def publish_status(self, answers: str = "") -> None:
        """Publish this node's retained status (online, pod, health verdicts).

        ``answers``: the recheck command whose checks all ran before this status.
        """
        if self.bus is None:
            return
        status = AgentStatus(
            node=self.s.slurm_node,
            online=True,
            pod=self.s.pod_name,
            kube_node=self.s.kube_node,
            health={name: encode_verdict(r) for name, r in sorted(self.verdicts.items())},
            at=time.time(),
            answers=answers,
        )
        status, refused = publishable_status(self.status_topic, status)
        if refused:
            self.metrics.error("status-refused")
            log.error("agent.status_refused", node=self.s.slurm_node, error=refused[:200])
        try:
            await self.bus.publish(self.status_topic, status, retain=True)
            log.info(
                "agent.status_published",
                node=self.s.slurm_node,
                health=status.health,
                **({"answers": answers} if answers else {}),
            )
        except TransientError as exc:
            self.metrics.error("bus-publish")
            log.warning("agent.status_not_published", node=self.s.slurm_node, error=str(exc)[:200])

    def _on_event(self, _event: CacheEvent[Node] | CacheEvent[Pod]) -> None:
        self.queue.add(self.s.slurm_node)

    def _pod(self) -> Pod | None:
        """The agent's own pod; None once it is gone or replaced by its successor."""
        pod = self.pods.get(f"{self.s.namespace}/{self.s.pod_name}")
        if pod is None or not self.s.pod_uid or pod.uid == self.s.pod_uid:
            return pod
        if not self._replaced:
            self._replaced = True
            log.info(
                AGENT_POD_REPLACED,
                node=self.s.slurm_node,
                pod=self.s.pod_name,
                uid=self.s.pod_uid,
                successor_uid=pod.uid,
                note="the successor's own agent acts for it; this one leaves the node as it is",
            )
        return None

    async def reconcile(self, key: str, rid: str) -> float | None:
        """Read a fresh view of ``key``, decide, execute the agent's actions."""
        await self.nodes.synced.wait()
        await self.pods.synced.wait()
        pod = self._pod()
        now = time.time()
        self.ready.observe(pod, now)
        slurm = await self.backend.read_node(key)
        view = NodeView(
            node=NodeName(key),
            now=now,
            slurm=slurm,
            pod=pod,
            kube_node=self.nodes.get(self.s.kube_node),
            pod_ready_since=self.ready.ready_since,
            pod_unready_since=self.ready.unready_since,
            health=dict(self.verdicts),
        )
        plan = decide(view, self.s.policy)
        with structlog.contextvars.bound_contextvars(
            node=key, pod=self.s.pod_name, reconcile_id=rid, owner="agent"
        ):  # every line of this reconcile, the write's included, carries them
            if plan.notes != self._last_notes:
                for note in plan.notes:
                    log.info(
                        "agent.left_alone" if "left alone" in note else "agent.note", note=note
                    )
                self._last_notes = plan.notes
            for action in plan.for_writer(Writer.AGENT):
                if await apply_action(self.backend, self.metrics, key, action, slurm):
                    self.actions += 1
        return self.s.resync_s

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then cancel everything (one root TaskGroup)."""

        async def stopper() -> None:
            await stop.wait()
            raise _Stop

        async def mark_ready() -> None:
            await self.nodes.synced.wait()
            await self.pods.synced.wait()
            if self.s.ready_file:
                await asyncio.to_thread(Path(self.s.ready_file).write_text, "ready\n")
            log.info(AGENT_SYNCED, node=self.s.slurm_node, pod=self.s.pod_name)

        log.info(
            "agent.started",
            node=self.s.slurm_node,
            pod=self.s.pod_name,
            namespace=self.s.namespace,
            kube_node=self.s.kube_node,
        )
        say_plain_text(self.s)
        self.queue.add(self.s.slurm_node)
        if self.http is not None:
            await self.http.start()  # before anything else: a port taken fails at once
        try:
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self.nodes.run(), name="informer:node")
                    group.create_task(self.pods.run(), name="informer:pod")
                    self._worker = group.create_task(
                        run_worker(self.queue, self.reconcile, name="agent", metrics=self.metrics),
                        name="worker",
                    )
                    group.create_task(mark_ready(), name="ready")
                    if self.bus is not None:
                        group.create_task(self.bus.run(), name="bus")
                        group.create_task(
                            republish_on_reconnect(self.bus, self.publish_status),
                            name="status-on-connect",
                        )
                    if self.commands is not None:
                        group.create_task(self.commands.run(), name="commands")
                    if self.health is not None:
                        group.create_task(self.health.run(), name="health")
                    group.create_task(stopper(), name="stopper")
            except* _Stop:
                # The requested stop. Nothing may be raised here: Debian's Python 3.11.2 (the
                # images') wraps it in an ExceptionGroup that no suppress catches, and the
                # agent sidecar died with a traceback on every SIGTERM.
                pass
        finally:
            if self.requeues is not None:  # a measurement not scraped yet dies with us
                await self.requeues.linger(self.s.report_linger_s)
            if self.http is not None:
                await self.http.stop()
        log.info("agent.stopped", node=self.s.slurm_node, actions=self.actions)


def say_plain_text(s: AgentSettings) -> None:
    """Warn once, at start, of a bus or a credentials request without TLS (tls.enabled false)."""
    mqtt = http = None
    if s.bus is not None and s.bus.ca_file is None:
        mqtt = (
            f"plain MQTT to {s.bus.host}:{s.bus.port} was chosen: no CA file "
            "(SLONKD_MQTT_TLS_CA_FILE unset, the chart's tls.enabled false)"
        )
    if s.bus is not None and s.bootstrap is not None and s.bootstrap.url.startswith("http://"):
        http = f"the credentials are requested over plain HTTP: {s.bootstrap.url}"
    warn_plain_text("agent", mqtt=mqtt, http=http)


class _Stop(Exception):
    """Raised inside the TaskGroup to cancel its tasks on shutdown."""


async def run_agent(settings: AgentSettings) -> int:
    """Connect, run until SIGTERM/SIGINT, close within the shutdown deadline."""
    stop = stop_on_signals()
    try:
        if settings.kubeconfig:
            transport = await KubeTransport.from_kubeconfig(settings.kubeconfig)
        else:
            transport = KubeTransport.in_cluster()
    except KubeConfigError as exc:
        log.error("agent.bad_kube_config", error=str(exc))
        return EXIT_BAD_KUBECONFIG
    backend: SlurmBackend | None = None
    try:
        choice = await open_backend(
            settings.slurm, settings.slurm_backend, pyslurm_path=settings.pyslurm_path
        )
        backend = choice.backend
        await Agent(settings, transport, backend).run(stop)
    except (ServeError, TerminalError) as exc:  # TerminalError: slurm_backend pyslurm cannot serve
        log.error("agent.cannot_serve", error=str(exc))
        return EXIT_CANNOT_SERVE
    finally:
        if backend is not None:
            await close_backend(backend)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(settings.shutdown_deadline_s):
                await transport.close()
    return 0

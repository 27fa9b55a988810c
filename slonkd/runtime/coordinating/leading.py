"""The leader's term and the coordinator process: campaign, lead, stop within a deadline.

``slonkd coordinator`` (:func:`run_coordinator`) serves the API on every replica (and
``/metrics`` on a port of its own, :func:`metrics_server`, with
:mod:`slonkd.runtime.kit.http_server`), campaigns for the Lease and, while it holds it,
runs one term (:func:`lead`) over a
:class:`~.reconciling.Coordinator`'s parts: the tasks its :class:`~.term.Term` lists, in
their waves (reads beside the claim of the term's token, writers once it is on record, the
rest once the lists are in), then the term's passes.
The term ends when the lease is lost; SIGTERM ends the process (:mod:`slonkd.runtime.kit.process`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from slonkd.adapters.kube.lease import LeaderElector
from slonkd.adapters.kube.state import StateStore
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.choice import close_backend, open_backend
from slonkd.core.errors import SlonkdError, TerminalError
from slonkd.core.fencing import guard_writes
from slonkd.core.log_events import COORDINATOR_API_LISTENING, COORDINATOR_LEADING
from slonkd.runtime.coordinating.api import CoordinatorAPI
from slonkd.runtime.coordinating.credentials import credential_issuer
from slonkd.runtime.coordinating.reconciling import Coordinator
from slonkd.runtime.coordinating.settings import CoordinatorSettings
from slonkd.runtime.coordinating.term import NotLeading, Term
from slonkd.runtime.kit.http_server import HttpServer
from slonkd.runtime.kit.metrics import Metrics
from slonkd.runtime.kit.process import cancel_within, exit_now, stop_on_signals
from slonkd.runtime.kit.tls_files import warn_plain_text

EXIT_CANNOT_SERVE = 1
"""``slurm_backend: pyslurm`` named and pyslurm cannot serve (the log's one line says why)."""

log = structlog.get_logger("slonkd.coordinator")

SHUTDOWN_DEADLINE_S = 8.0
"""After SIGTERM the campaign has this long to stop before the process exits anyway."""


async def lead(c: Coordinator, token: int) -> None:
    """The leader's work: start the term's tasks (:class:`~.term.Term`), then its passes.

    The term's fencing token is bound in structlog's context for the whole term: every line
    its tasks log carries ``fencing_token`` (the tasks start inside and copy the context).
    Writes still take the token explicitly (:meth:`LeaderElector.check_valid`): fencing is
    the writes' business, a log field only shows it.
    """
    term = Term(c, token)
    with structlog.contextvars.bound_contextvars(fencing_token=token):
        log.info(COORDINATOR_LEADING, identity=c.s.identity)
        try:
            await _lead(term)
        except* NotLeading:
            log.warning("coordinator.not_leading", identity=c.s.identity)
        finally:
            term.end()


async def _lead(term: Term) -> None:
    """The term's waves in one task group: reads beside the claim, writers, the rest."""
    async with asyncio.TaskGroup() as group:
        with term.loading():  # the lists: kept all term, scanned by no collection
            claim = group.create_task(term.claim())
            for job in term.reads():  # only reads run beside the claim
                group.create_task(job)
            term.read_ahead()  # side by side with the lists: the first pass waits for both
            await claim
            for job in term.writers():  # fenced: they start once the term is on record
                group.create_task(job)
            await term.synced()
        for job in term.after_sync():
            group.create_task(job)
        await term.passes()


def say_plain_text(s: CoordinatorSettings) -> None:
    """Warn once, at start, of the bus (or the dynsec admin) or the API without TLS."""
    mqtt = http = None
    admin = s.credentials
    if (s.bus is not None and s.bus.ca_file is None) or (admin and admin.admin_ca_file is None):
        mqtt = (
            "plain MQTT for the bus and the dynsec admin was chosen: no CA file "
            "(SLONKD_MQTT_TLS_CA_FILE unset, the chart's tls.enabled false)"
        )
    if s.api_tls is None:
        http = (
            f"the API serves plain HTTP on port {s.api_port}: no certificate "
            "(SLONKD_API_TLS_CERT_FILE unset, the chart's tls.enabled false)"
        )
    warn_plain_text("coordinator", mqtt=mqtt, http=http)


def api_readiness(silent_s: float | None, limit_s: float) -> tuple[bool, str]:
    """Ready while the apiserver answered a Lease call within ``limit_s`` (one lease duration).

    A standby asks every retry period and a leader renews as often, so a silence past a whole
    lease duration means this replica cannot reach the API (a wrong address, a network
    policy, the apiserver down): it would never act, whatever its process looks like.
    """
    if silent_s is None:
        return False, "the Kubernetes API has not answered yet"
    if silent_s > limit_s:
        return False, f"the Kubernetes API has not answered for {silent_s:.0f} s"
    return True, "ready"


def metrics_server(
    s: CoordinatorSettings, metrics: Metrics, *, ready: Callable[[], tuple[bool, str]]
) -> HttpServer | None:
    """``/metrics`` on ``metrics_port`` of the API's address (plain HTTP); None when 0."""
    if not s.metrics_port:
        return None
    return HttpServer(host=s.api_host, port=s.metrics_port, registry=metrics.registry, ready=ready)


async def run_coordinator(s: CoordinatorSettings) -> int:
    """Campaign for the Lease and lead while holding it, until SIGTERM/SIGINT."""
    try:  # before anything starts: slurm_backend pyslurm that cannot serve ends the start
        choice = await open_backend(s.slurm, s.slurm_backend, pyslurm_path=s.pyslurm_path)
    except TerminalError as exc:
        log.error("coordinator.cannot_serve", error=str(exc))
        return EXIT_CANNOT_SERVE
    if s.kubeconfig:
        transport = await KubeTransport.from_kubeconfig(s.kubeconfig)
    else:
        transport = KubeTransport.in_cluster()
    lease = s.lease_settings()
    # a new term's token is above the state's last writer's, even if the Lease was recreated
    elector = LeaderElector(
        transport, lease, floor=StateStore(transport, s.namespace, s.state_name).last_token
    )
    api = CoordinatorAPI(
        identity=s.identity,
        holder=lambda: elector.holder,
        ready=lambda: api_readiness(elector.api_silent_s(), lease.lease_duration_s),
    )
    metrics = Metrics(role="coordinator")
    api.metrics = metrics
    if s.credentials is not None:
        api.credentials = credential_issuer(
            s.credentials, transport, s.namespace, s.cluster, s.pod_selector
        )
    await api.start(s.api_host, s.api_port, tls=s.api_tls)
    log.info(COORDINATOR_API_LISTENING, host=s.api_host, port=api.port, tls=bool(s.api_tls))
    say_plain_text(s)
    scrape = metrics_server(s, metrics, ready=api.ready)
    if scrape is not None:
        await scrape.start()  # plain HTTP, Prometheus's own port (the NetworkPolicy's rule)
    stop = stop_on_signals()

    async def term(token: int) -> None:
        guard_writes(elector.check_valid)  # every write of the term, right before it is sent
        coordinator = Coordinator(s, transport, elector, metrics=metrics, slurm=choice)
        api.leader = coordinator
        if coordinator.fleet is not None:
            coordinator.fleet.register(metrics.registry)  # a standby exports no fleet
        try:
            await lead(coordinator, token)
        finally:
            if coordinator.fleet is not None:
                coordinator.fleet.unregister()
            api.leader = None
            await coordinator.audit.aclose()  # every record of the term written, off the loop

    async def campaign() -> None:
        await elector.run(term)

    task = asyncio.create_task(campaign(), name="campaign")
    stopping = asyncio.create_task(stop.wait(), name="stop")
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # the campaign ended by itself: a bug, raised
        # something that swallows its cancellation must not hang the pod's termination
        await cancel_within(task, SHUTDOWN_DEADLINE_S, event="coordinator.shutdown_deadline")
    finally:
        stopping.cancel()
        with contextlib.suppress(SlonkdError, TimeoutError):
            async with asyncio.timeout(3):
                await elector.release()
        await api.stop()
        if scrape is not None:
            await scrape.stop()
        await transport.close()
        await close_backend(choice.backend)
    log.info("coordinator.stopped", identity=s.identity)
    if not task.done():
        exit_now()  # the stuck task would also hang asyncio.run's final cancellation
    return 0

"""The leader's term and the coordinator process: campaign, lead, stop within a deadline.

``slonkd coordinator`` (:func:`run_coordinator`) serves the API on every replica, campaigns
for the Lease and, while it holds it, runs one :class:`~.reconciling.Coordinator` term
(:func:`lead`): the informers, the bus (:mod:`.observing`), topology, rollouts and the
credential reaper as tasks, and a pass on every change (debounced), poll change and resync.
The term writes its token into the state first (:meth:`.remembering.Memory.claim`); only
reads run beside that claim, every task that writes starts once it has completed.
The term ends when the lease is lost; SIGTERM ends the process (:mod:`slonkd.runtime.kit.process`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from slonkd.adapters.kube.lease import LeaderElector
from slonkd.adapters.kube.state import FencedError, StateStore
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import SlonkdError, TransientError
from slonkd.core.fencing import guard_writes
from slonkd.core.log_events import (
    COORDINATOR_API_LISTENING,
    COORDINATOR_LEADING,
    COORDINATOR_SYNCED,
)
from slonkd.runtime.coordinating.api import CoordinatorAPI
from slonkd.runtime.coordinating.credentials import credential_issuer
from slonkd.runtime.coordinating.reconciling import Coordinator
from slonkd.runtime.coordinating.settings import CoordinatorSettings
from slonkd.runtime.kit.level_loop import Debounce, run_level_triggered
from slonkd.runtime.kit.metrics import Metrics
from slonkd.runtime.kit.process import cancel_within, exit_now, stop_on_signals

log = structlog.get_logger("slonkd.coordinator")

SHUTDOWN_DEADLINE_S = 8.0
"""After SIGTERM the campaign has this long to stop before the process exits anyway."""


class _NotLeading(Exception):
    """The lease ran out under this term's work."""


async def lead(c: Coordinator, token: int) -> None:
    """The leader's work: run the informers, then reconcile on events and on resync.

    The term's fencing token is bound in structlog's context for the whole term: every line
    its tasks log carries ``fencing_token`` (the tasks start inside and copy the context).
    Writes still take the token explicitly (:meth:`LeaderElector.check_valid`): fencing is
    the writes' business, a log field only shows it.
    """
    with structlog.contextvars.bound_contextvars(fencing_token=token):
        log.info(COORDINATOR_LEADING, identity=c.s.identity)
        try:
            await _lead(c, token)
        except* _NotLeading:
            log.warning("coordinator.not_leading", identity=c.s.identity)
        finally:
            c.cancel_read_ahead()


async def _lead(c: Coordinator, token: int) -> None:
    s, dirty = c.s, c.observer.dirty
    async with asyncio.TaskGroup() as group:
        # the term's token in the state before anything writes (a dry run writes nothing);
        # only reads run beside it: the informers' lists, the bus's statuses, the SLURM read
        claim = None if c.auditor.dry_run else group.create_task(c.memory.claim(token))
        group.create_task(c.nodes.run())
        group.create_task(c.pods.run())
        if c.bus is not None:
            group.create_task(c.bus.run())
            group.create_task(c.observer.read_statuses(c.bus))
        c.read_slurm_ahead()  # side by side with the lists: the first pass waits for both
        if claim is not None:
            await claim
            c.first_pass_ms["claim_ms"] = round((time.monotonic() - c.began) * 1000, 1)
        # what writes is fenced like a pass's writes: it starts once the term is on record
        if c.commands is not None:
            group.create_task(c.commands.announce_when_connected())
        group.create_task(c.triggers.run())
        if c.topology is not None:
            group.create_task(c.topology.run())
        if c.rollout is not None:
            group.create_task(c.rollout.run())
        await c.nodes.synced.wait()
        await c.pods.synced.wait()
        c.first_pass_ms["lists_ms"] = round((time.monotonic() - c.began) * 1000, 1)
        log.info(COORDINATOR_SYNCED, nodes=len(c.nodes), pods=len(c.pods))
        if c.reaper is not None:
            group.create_task(c.reaper.run())  # sweeps first: the leader-start sweep
        if c.watch is not None:
            group.create_task(c.watch.run())
        group.create_task(c.memory.watch(dirty, s.state_poll_s))
        if c.job_outcomes is not None:
            group.create_task(c.job_outcomes.run())
        if c.fleet is not None and s.sdiag_s > 0:
            group.create_task(
                c.fleet.poll_sdiag(c.slurm.diag, interval_s=s.sdiag_s, timeout_s=s.sdiag_timeout_s)
            )
        await run_level_triggered(
            dirty,
            lambda _cause: _pass(c),
            debounce=Debounce(quiet_s=s.debounce_s, max_wait_s=s.max_batch_delay_s),
            on_wake=c.fast_marks,  # before the debounce: a failure is marked at once
        )


async def _pass(c: Coordinator) -> float:
    """Fast marks, then a whole pass; a failed pass is counted and retried at the next wake."""
    await c.fast_marks()
    try:
        with structlog.contextvars.bound_contextvars(pass_id=c.passes + 1):
            await c.reconcile_all()  # every line of the pass carries its number
    except FencedError:
        raise  # a newer token in the state: the elector ends this term
    except SlonkdError as exc:
        c.metrics.reconciled("retry" if isinstance(exc, TransientError) else "terminal", 0.0)
        log.warning("coordinator.pass_failed", error=str(exc)[:300])
    if not c.elector.is_valid():
        raise _NotLeading  # stop every task of this term, whatever the elector does
    return c.s.resync_s


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


async def run_coordinator(s: CoordinatorSettings) -> int:
    """Campaign for the Lease and lead while holding it, until SIGTERM/SIGINT."""
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
    stop = stop_on_signals()

    async def term(token: int) -> None:
        guard_writes(elector.check_valid)  # every write of the term, right before it is sent
        coordinator = Coordinator(s, transport, elector, metrics=metrics)
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
        await transport.close()
    log.info("coordinator.stopped", identity=s.identity)
    if not task.done():
        exit_now()  # the stuck task would also hang asyncio.run's final cancellation
    return 0

"""Prometheus metrics of one slonkd process, in a registry of its own (never the global one).

:class:`Metrics` holds what every long-running role records: the SLURM transitions slonkd
applied (by action and cause), the actions it left alone (by why), the reconcile latency
histogram (by outcome) and errors by kind, plus the process's own RSS, CPU and live asyncio
tasks. Counters that other objects already keep (informer lists and reconnects, bus drops,
queue depth, health verdicts) are read at scrape time by a collector, so nothing is counted
twice and the hot path pays nothing for them. Label values come from bounded sets (actions,
cause names without their detail, skip reasons, outcomes): never a node name, a reason text
or an error message.

Tests create as many :class:`Metrics` as they like; each renders with :meth:`Metrics.render`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

import slonkd

if TYPE_CHECKING:
    from slonkd.adapters.bus.client import Bus
    from slonkd.adapters.kube.informer import InformerStats
    from slonkd.core.health import CheckResult

RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds: a reconcile is one or two scontrol calls (tens of ms), a slow slurmctld seconds."""

OUTCOMES = ("ok", "retry", "terminal", "crashed")
"""Outcomes of one reconcile, as :func:`slonkd.runtime.kit.reconcile.run_worker` logs them."""
ERROR_KINDS = {"retry": "transient", "terminal": "terminal", "crashed": "crash"}
"""Error kind counted for each failed outcome."""


class Metrics:
    """The metrics of one process (role ``agent`` or ``coordinator``)."""

    def __init__(self, role: str) -> None:
        self.registry = CollectorRegistry()
        self._collector = _ScrapeTimeCollector()
        self.registry.register(self._collector)
        ProcessCollector(registry=self.registry)
        info = Gauge(
            "slonkd_info", "slonkd's version and role", ["role", "version"], registry=self.registry
        )
        info.labels(role=role, version=slonkd.__version__).set(1)
        self.transitions = Counter(
            "slonkd_transitions",
            "SLURM node state changes slonkd applied, by action and cause",
            ["action", "cause"],
            registry=self.registry,
        )
        self.skipped = Counter(
            "slonkd_actions_skipped",
            "Actions decided but left undone at write time (e.g. someone else holds the node)",
            ["action", "why"],
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "slonkd_reconcile_duration_seconds",
            "Time of one reconcile (read the view, decide, act), by outcome",
            ["outcome"],
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "slonkd_errors",
            "Errors by kind: transient (retried), terminal (not retried), crash (a bug), "
            "bus-publish (a status not published)",
            ["kind"],
            registry=self.registry,
        )
        self.last_success = Gauge(
            "slonkd_last_reconcile_success_timestamp_seconds",
            "Unix time the last reconcile succeeded",
            registry=self.registry,
        )
        self.breaker_open = Gauge(
            "slonkd_breaker_open",
            "1 while the disruption budget's breaker is open (coordinator; a human resets it)",
            registry=self.registry,
        )
        self.paused = Gauge(
            "slonkd_paused", "1 while slonkd is paused (coordinator)", registry=self.registry
        )
        self.budget_refused = Gauge(
            "slonkd_budget_refused_nodes",
            "Nodes an automated cause wants out that the budget keeps in, at the last pass",
            registry=self.registry,
        )
        self.suspected = Gauge(
            "slonkd_suspected_causes",
            "Causes suspected because many nodes fail them at once, at the last pass",
            registry=self.registry,
        )
        self.revalidating = Gauge(
            "slonkd_revalidating_nodes",
            "Nodes held slonkd:revalidating (waiting for a recheck that passes), at the last pass",
            registry=self.registry,
        )
        self.revalidation_oldest = Gauge(
            "slonkd_revalidation_oldest_seconds",
            "Age of the oldest revalidation in progress (0: none), at the last pass",
            registry=self.registry,
        )
        self.quarantined = Gauge(
            "slonkd_quarantined_nodes",
            "K8s nodes with slonkd's marks and no worker pod (for a person), at the last pass",
            registry=self.registry,
        )
        self.quarantined_longest = Gauge(
            "slonkd_quarantined_longest_seconds",
            "How long the longest-quarantined machine has waited (0: none), at the last pass",
            registry=self.registry,
        )
        self.quarantine_limit = Gauge(
            "slonkd_quarantine_limit_seconds",
            "How long quarantined hardware may wait for a person before the alert (leader only)",
            registry=self.registry,
        )
        self.would_act = Counter(
            "slonkd_would_act",
            "Actions a pool's mode held back (observe, quarantine): reported once per node, "
            "action and cause (coordinator)",
            ["mode", "action", "cause"],
            registry=self.registry,
        )
        self.slurm_reads = Counter(
            "slonkd_slurmctld_reads",
            "Reads slonkd sent to slurmctld (polls and full reads)",
            registry=self.registry,
        )
        for outcome in OUTCOMES:  # every series exists from the start: rate() needs a zero
            self.reconcile_seconds.labels(outcome=outcome)
        for kind in (*ERROR_KINDS.values(), "bus-publish"):
            self.errors.labels(kind=kind)

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)

    # -- what the runtime records ----------------------------------------------------------

    def reconciled(self, outcome: str, duration_s: float) -> None:
        """One reconcile finished with ``outcome`` (see :data:`OUTCOMES`)."""
        self.reconcile_seconds.labels(outcome=outcome).observe(duration_s)
        if outcome == "ok":
            self.last_success.set(time.time())
        elif outcome in ERROR_KINDS:
            self.errors.labels(kind=ERROR_KINDS[outcome]).inc()

    def applied(
        self, action: str, cause: str, *, changed: bool, skipped: Iterable[str] = ()
    ) -> None:
        """An action was executed: counted as a transition if it changed the node."""
        if changed:
            self.transitions.labels(action=action, cause=cause).inc()
        for why in skipped:
            self.skipped.labels(action=action, why=why).inc()

    def error(self, kind: str) -> None:
        """An error outside a reconcile (e.g. ``bus-publish``)."""
        self.errors.labels(kind=kind).inc()

    # -- what is read at scrape time -------------------------------------------------------

    def watch_informer(self, resource: str, stats: InformerStats) -> None:
        """Expose an informer's counters, labelled by ``resource``."""
        self._collector.informers[resource] = stats

    def watch_bus(self, bus: Bus) -> None:
        """Expose the MQTT client's connection state and dropped messages."""
        self._collector.bus = bus

    def watch_queue(self, depth: Callable[[], int]) -> None:
        """Expose the work queue's depth."""
        self._collector.queue_depth = depth

    def watch_ready(self, ready: Callable[[], bool]) -> None:
        """Expose readiness (1 or 0) as ``slonkd_ready``."""
        self._collector.ready = ready

    def watch_health(self, verdicts: Mapping[str, CheckResult]) -> None:
        """Expose the current verdict of each health check (one series per check)."""
        self._collector.verdicts = verdicts


class _ScrapeTimeCollector(Collector):
    """Reads counters other objects keep, once per scrape."""

    def __init__(self) -> None:
        self.informers: dict[str, InformerStats] = {}
        self.bus: Bus | None = None
        self.queue_depth: Callable[[], int] | None = None
        self.ready: Callable[[], bool] | None = None
        self.verdicts: Mapping[str, CheckResult] | None = None

    def describe(self) -> Iterable[Metric]:
        return ()  # names depend on what is watched; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        try:  # scraped by the process's own aiohttp server, so inside its loop
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # no running loop: rendered by a tool or a test
            tasks = None
        if tasks is not None:
            yield GaugeMetricFamily(
                "slonkd_asyncio_tasks", "asyncio tasks alive in the process", value=tasks
            )
        if self.ready is not None:
            yield GaugeMetricFamily(
                "slonkd_ready", "1 when the process is ready", value=int(self.ready())
            )
        if self.queue_depth is not None:
            yield GaugeMetricFamily(
                "slonkd_workqueue_depth", "Keys waiting in the work queue", value=self.queue_depth()
            )
        if self.informers:
            yield from self._informers()
        if self.bus is not None:
            connected = GaugeMetricFamily(
                "slonkd_bus_connected", "1 while connected to the MQTT broker"
            )
            connected.add_metric([], int(self.bus.connected))
            yield connected
            yield CounterMetricFamily(
                "slonkd_bus_connects", "Connections made to the broker", value=self.bus.connects
            )
            dropped = CounterMetricFamily(
                "slonkd_bus_messages_dropped",
                "Received MQTT messages dropped, by reason",
                labels=["reason"],
            )
            for reason, count in sorted(self.bus.dropped.items()):
                dropped.add_metric([reason], count)
            yield dropped
        if self.verdicts is not None:
            verdict = GaugeMetricFamily(
                "slonkd_health_check_verdict",
                "1 for the current verdict of each health check",
                labels=["check", "verdict"],
            )
            for check, result in sorted(self.verdicts.items()):
                verdict.add_metric([check, result.verdict.value], 1)
            yield verdict

    def _informers(self) -> Iterator[Metric]:
        families = {
            field: CounterMetricFamily(
                f"slonkd_informer_{field}", f"Informer {what}, by resource", labels=["resource"]
            )
            for field, what in (
                ("lists", "lists (the first, and relists after 410 Gone)"),
                ("watches", "watches started"),
                ("gone", "410 Gone answers"),
                ("reconnects", "reconnects after a broken watch"),
                ("events", "watch events applied to the cache"),
            )
        }
        for resource, stats in sorted(self.informers.items()):
            for field, family in families.items():
                family.add_metric([resource], getattr(stats, field))
        yield from families.values()

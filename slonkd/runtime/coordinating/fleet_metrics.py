"""The fleet's metrics on the coordinator's /metrics: the SLURM side, at no extra read.

Every pass hands :meth:`FleetExporter.observe_pass` what it already read and decided (the
SLURM node read, the views, the plans, the budget's answer); the counting is
:mod:`slonkd.core.fleet`'s. slurmctld's own health comes from ``sdiag``, the one RPC this
adds, at a low rate (:meth:`FleetExporter.poll_sdiag`, every ``sdiag_s`` with a timeout),
read through the SLURM port's ``diag`` as typed statistics
(:class:`~slonkd.adapters.slurm.parsing_sdiag.SlurmctldStats`, whichever backend): a failure
is counted and logged, never fatal, and the last good answer is kept.

Only the leader exports these: the exporter lives for one leader's term, registered on the
process's registry while it leads (:meth:`register`, :meth:`unregister`). Ages (seconds out,
seconds disagreeing) are computed at scrape time from the start times the last pass saw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

import structlog
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slonkd.adapters.slurm.parsing_sdiag import SlurmctldStats
from slonkd.core.budget import Admission
from slonkd.core.errors import SlonkdError
from slonkd.core.fleet import (
    FleetCounts,
    Outage,
    count_fleet,
    oldest_outages,
    track_disagreement,
    track_outages,
)
from slonkd.core.plan import NodeView, Plan
from slonkd.core.slurm_node import SlurmNode

log = structlog.get_logger("slonkd.coordinator")

OUT_BUCKETS = (10.0, 60.0, 300.0, 900.0, 3600.0, 3 * 3600.0, 12 * 3600.0, 86400.0, 3 * 86400.0,
               7 * 86400.0)  # fmt: skip
"""Seconds: a reboot is minutes, a repair hours to days."""


class FleetExporter(Collector):
    """The fleet families of one leader's term (see the module's docstring)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._counts: FleetCounts | None = None
        self._outages: dict[str, Outage] = {}
        self._disagreeing: dict[str, float] = {}
        self._out = Histogram(
            "slonkd_fleet_out_duration_seconds",
            "How long SLURM nodes were out of service (drained, down, failed), observed when "
            "the outage ends, by the reason's owner and slonkd's cause name",
            ["owner", "cause"],
            buckets=OUT_BUCKETS,
            registry=None,
        )
        self._stats: SlurmctldStats | None = None
        self._stats_at = 0.0
        self._sdiag_failures = 0
        self._registry: CollectorRegistry | None = None

    # -- what a pass and the poll record ------------------------------------------------------

    def observe_pass(
        self,
        slurm_nodes: Sequence[SlurmNode],
        views: Sequence[NodeView],
        plans: Sequence[Plan],
        admission: Admission,
    ) -> None:
        """Count one pass, end the outages that ended and follow the disagreements."""
        now = self._clock()
        self._counts = count_fleet(slurm_nodes, views, plans, admission)
        self._outages, ended = track_outages(self._outages, slurm_nodes, now)
        for holder, seconds in ended:
            self._out.labels(owner=holder.owner, cause=holder.cause).observe(seconds)
        self._disagreeing = track_disagreement(self._disagreeing, plans, now)

    async def poll_sdiag(
        self, read: Callable[[], Awaitable[SlurmctldStats]], *, interval_s: float, timeout_s: float
    ) -> None:
        """Read slurmctld's statistics every ``interval_s``, until cancelled; never raises."""
        while True:
            await self.read_sdiag(read, timeout_s=timeout_s)
            await asyncio.sleep(interval_s)

    async def read_sdiag(
        self, read: Callable[[], Awaitable[SlurmctldStats]], *, timeout_s: float
    ) -> None:
        """One read of the port's ``diag``: kept when it answers, counted as a failure when not.

        The port types the statistics (the scontrol backend parses ``sdiag``): an output that
        is not sdiag's comes here as its ParseError, a failure like any other.
        """
        try:
            async with asyncio.timeout(timeout_s):
                stats = await read()
            self._stats = stats
            self._stats_at = self._clock()
        except (SlonkdError, TimeoutError, OSError) as exc:
            self._sdiag_failures += 1
            log.warning("coordinator.sdiag_failed", error=str(exc)[:300] or type(exc).__name__)

    # -- the process's registry ---------------------------------------------------------------

    def register(self, registry: CollectorRegistry) -> None:
        """Export on ``registry`` (the leader's term begins)."""
        registry.register(self)
        self._registry = registry

    def unregister(self) -> None:
        """Stop exporting (the term ends: a standby exports no fleet)."""
        if self._registry is not None:
            self._registry.unregister(self)
            self._registry = None

    # -- scrape ---------------------------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        """Nothing: the families depend on what was observed."""
        return ()  # the families depend on what was observed; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        """The families, with ages as of now."""
        now = self._clock()
        if self._counts is not None:
            yield from _pass_families(self._counts)
            yield from self._ages(now)
            yield from self._out.collect()
        yield CounterMetricFamily(
            "slonkd_slurmctld_sdiag_failures",
            "sdiag reads that failed (timeout, error, unreadable output)",
            value=self._sdiag_failures,
        )
        if self._stats is not None:
            yield GaugeMetricFamily(
                "slonkd_slurmctld_sdiag_timestamp_seconds",
                "Unix time of the last sdiag read that succeeded",
                value=self._stats_at,
            )
            yield from _sdiag_families(self._stats)

    def _ages(self, now: float) -> Iterator[Metric]:
        oldest = GaugeMetricFamily(
            "slonkd_fleet_out_oldest_seconds",
            "Age of the longest outage standing, by the reason's owner and slonkd's cause name",
            labels=["owner", "cause"],
        )
        for holder, since in sorted(oldest_outages(self._outages).items()):
            oldest.add_metric([holder.owner, holder.cause], max(0.0, now - since))
        yield oldest
        first = min(self._disagreeing.values(), default=None)
        yield GaugeMetricFamily(
            "slonkd_fleet_disagreement_oldest_seconds",
            "How long the oldest disagreement between SLURM and Kubernetes has stood (0: none)",
            value=0.0 if first is None else max(0.0, now - first),
        )


_Family = TypeVar("_Family", GaugeMetricFamily, CounterMetricFamily)


def _per_label(family: _Family, values: Mapping[str, float]) -> _Family:
    """``family`` (of one label) with one sample per key of ``values``."""
    for key, value in values.items():
        family.add_metric([key], value)
    return family


def _pass_families(counts: FleetCounts) -> Iterator[Metric]:
    families: list[tuple[str, str, str, dict[str, int]]] = [
        ("slonkd_fleet_nodes", "SLURM nodes by base state", "state", dict(counts.states)),
        (
            "slonkd_fleet_nodes_drain",
            "SLURM nodes by drain status (draining: DRAIN with work left)",
            "status",
            dict(counts.drain),
        ),
        (
            "slonkd_fleet_nodes_flagged",
            "SLURM nodes carrying each flag",
            "flag",
            dict(counts.flags),
        ),
    ]
    for name, text, label, values in families:
        yield _per_label(GaugeMetricFamily(name, text, labels=[label]), values)
    owners = GaugeMetricFamily(
        "slonkd_fleet_nodes_by_owner",
        "SLURM nodes by who owns their reason (slonkd, operator, slurm, none) and slonkd's cause",
        labels=["owner", "cause"],
    )
    for holder, count in sorted(counts.holders.items()):
        owners.add_metric([holder.owner, holder.cause], count)
    yield owners
    pending = GaugeMetricFamily(
        "slonkd_fleet_pending_actions",
        "Actions the last pass still wanted done, by writer and kind",
        labels=["writer", "kind"],
    )
    for (writer, kind), count in counts.pending.items():
        pending.add_metric([writer, kind], count)
    yield pending
    yield GaugeMetricFamily(
        "slonkd_fleet_disagreeing_nodes",
        "Worker nodes where SLURM and Kubernetes disagree (a pending action), last pass",
        value=counts.disagreeing,
    )
    budget = {
        "nodes": GaugeMetricFamily(
            "slonkd_budget_group_nodes", "Worker nodes in each budget group", labels=["group"]
        ),
        "out": GaugeMetricFamily(
            "slonkd_budget_out_nodes",
            "Nodes out of service in each budget group (by anyone), last pass",
            labels=["group"],
        ),
        "limit": GaugeMetricFamily(
            "slonkd_budget_limit_nodes",
            "Most nodes of each budget group out before automated causes stop",
            labels=["group"],
        ),
    }
    for group, use in sorted(counts.groups.items()):
        budget["nodes"].add_metric([group], use.nodes)
        budget["out"].add_metric([group], use.out)
        budget["limit"].add_metric([group], use.limit)
    yield from budget.values()


def _sdiag_counter(name: str, what: str, label: str) -> CounterMetricFamily:
    """``slonkd_slurmctld_<name>``: one of sdiag's counters, per ``label``."""
    return CounterMetricFamily(
        f"slonkd_slurmctld_{name}",
        f"{what} (sdiag's counters; they restart when slurmctld resets its statistics)",
        labels=[label],
    )


def _sdiag_families(stats: SlurmctldStats) -> Iterator[Metric]:
    for name, text, value in (
        ("server_threads", "slurmctld's server thread count", stats.server_threads),
        ("agent_queue_size", "slurmctld's agent queue size (RPCs to slurmd waiting)",
         stats.agent_queue),
        ("agent_count", "slurmctld's agents", stats.agent_count),
        ("dbd_agent_queue_size", "Messages to slurmdbd waiting", stats.dbd_agent_queue),
        ("main_schedule_last_cycle_seconds", "Duration of the main scheduler's last cycle",
         stats.main_cycle_last_us / 1e6),
    ):  # fmt: skip
        yield GaugeMetricFamily(f"slonkd_slurmctld_{name}", text, value=value)
    jobs = GaugeMetricFamily(
        "slonkd_slurmctld_jobs", "Jobs by state at slurmctld's last snapshot", labels=["state"]
    )
    yield _per_label(jobs, stats.jobs_now)
    events = _sdiag_counter(
        "job_events", "Jobs submitted, started, completed, canceled, failed", "event"
    )
    yield _per_label(events, stats.jobs)
    rpcs = _sdiag_counter("rpcs", "RPCs slurmctld served, by message type", "rpc")
    seconds = CounterMetricFamily(
        "slonkd_slurmctld_rpc_duration_seconds",
        "Time slurmctld spent serving RPCs, by message type (rate over rpcs: mean latency)",
        labels=["rpc"],
    )
    for rpc, stat in sorted(stats.rpcs.items()):
        rpcs.add_metric([rpc], stat.count)
        seconds.add_metric([rpc], stat.total_us / 1e6)
    yield rpcs
    yield seconds

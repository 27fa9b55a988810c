"""What the runtime records in Prometheus metrics, read back through the text format."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

import slonkd
from slonkd.adapters.bus.client import Bus, BusSettings
from slonkd.adapters.kube.informer import InformerStats
from slonkd.core.errors import TerminalError, TransientError
from slonkd.core.health import Remediation, fail, ok
from slonkd.runtime.kit.metrics import Metrics
from slonkd.runtime.kit.reconcile import run_worker
from slonkd.runtime.kit.workqueue import Backoff, WorkQueue


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the rendered registry, keyed by name and sorted labels."""
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    """One sample's value, None when the series does not exist."""
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


def test_transitions_count_only_changes_by_action_and_cause() -> None:
    """A drain that changed the node is a transition; one skipped at write time is not."""
    m = Metrics(role="agent")
    m.applied("drain", "pod-terminating", changed=True)
    m.applied("drain", "pod-terminating", changed=False, skipped=["foreign-reason"])
    m.applied("release", "pod-terminating", changed=True)
    assert value(m, "slonkd_transitions_total", action="drain", cause="pod-terminating") == 1
    assert value(m, "slonkd_transitions_total", action="release", cause="pod-terminating") == 1
    assert value(m, "slonkd_actions_skipped_total", action="drain", why="foreign-reason") == 1


def test_reconcile_outcomes_fill_the_histogram_and_count_errors_by_kind() -> None:
    """Each outcome is observed with its duration; failures count as transient/terminal/crash."""
    m = Metrics(role="agent")
    assert value(m, "slonkd_errors_total", kind="transient") == 0  # present before any error
    m.reconciled("ok", 0.02)
    m.reconciled("ok", 0.3)
    m.reconciled("retry", 5.0)
    m.reconciled("terminal", 0.01)
    m.reconciled("crashed", 0.01)
    assert value(m, "slonkd_reconcile_duration_seconds_count", outcome="ok") == 2
    assert value(m, "slonkd_reconcile_duration_seconds_bucket", outcome="ok", le="0.025") == 1
    assert value(m, "slonkd_reconcile_duration_seconds_sum", outcome="retry") == 5.0
    assert value(m, "slonkd_errors_total", kind="transient") == 1
    assert value(m, "slonkd_errors_total", kind="terminal") == 1
    assert value(m, "slonkd_errors_total", kind="crash") == 1
    assert (value(m, "slonkd_last_reconcile_success_timestamp_seconds") or 0) > 0


def test_registries_are_per_instance() -> None:
    """Two Metrics never share a series (tests and processes create their own)."""
    a, b = Metrics(role="agent"), Metrics(role="coordinator")
    a.applied("drain", "pod-terminating", changed=True)
    assert value(b, "slonkd_transitions_total", action="drain", cause="pod-terminating") is None
    assert value(b, "slonkd_info", role="coordinator", version=slonkd.__version__) == 1


def test_scrape_time_values_come_from_their_owners() -> None:
    """Informer counters, queue depth, readiness and verdicts are read when scraped."""
    m = Metrics(role="agent")
    stats = InformerStats(lists=1, watches=2, reconnects=3, events=7)
    depth = [0]
    ready = [False]
    verdicts = {"gpu": fail("gpu", "gpu-xid-79", Remediation.REBOOT)}
    m.watch_informer("pods", stats)
    m.watch_queue(lambda: depth[0])
    m.watch_ready(lambda: ready[0])
    m.watch_health(verdicts)
    assert value(m, "slonkd_informer_events_total", resource="pods") == 7
    assert value(m, "slonkd_ready") == 0
    stats.events += 1
    depth[0] = 4
    ready[0] = True
    verdicts["gpu"] = ok("gpu")
    assert value(m, "slonkd_informer_events_total", resource="pods") == 8
    assert value(m, "slonkd_informer_reconnects_total", resource="pods") == 3
    assert value(m, "slonkd_workqueue_depth") == 4
    assert value(m, "slonkd_ready") == 1
    assert value(m, "slonkd_health_check_verdict", check="gpu", verdict="ok") == 1
    assert value(m, "slonkd_health_check_verdict", check="gpu", verdict="fail") is None


async def test_bus_drops_and_connection_state_are_exposed() -> None:
    """The MQTT client's dropped messages (by reason) and connection state are metrics."""
    m = Metrics(role="agent")
    bus = Bus(BusSettings(host="127.0.0.1", port=1, username="u", password="p", client_id="c"))
    m.watch_bus(bus)
    bus.dropped["invalid"] += 2
    assert value(m, "slonkd_bus_connected") == 0
    assert value(m, "slonkd_bus_messages_dropped_total", reason="invalid") == 2


async def test_run_worker_records_each_outcome() -> None:
    """The reconcile loop observes one latency per run and counts its errors by kind."""
    terminal_recorded = asyncio.Event()

    class Watched(Metrics):
        def reconciled(self, outcome: str, duration_s: float) -> None:
            super().reconciled(outcome, duration_s)
            if outcome == "terminal":
                terminal_recorded.set()

    m = Watched(role="agent")
    queue = WorkQueue(backoff=Backoff(base_s=0.001, max_s=0.001, jitter=0))
    # a transient error (retried), a success that asks to look again, a terminal error
    script: list[Exception | None] = [TransientError("slurmctld busy"), None, TerminalError("no")]

    async def reconcile(_key: str, _rid: str) -> float | None:
        outcome = script.pop(0)
        if outcome is not None:
            raise outcome
        return 0.001

    queue.add("n1")
    worker = asyncio.create_task(run_worker(queue, reconcile, metrics=m))
    try:
        await asyncio.wait_for(terminal_recorded.wait(), 5)
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
    assert script == []
    assert value(m, "slonkd_errors_total", kind="transient") == 1
    assert value(m, "slonkd_errors_total", kind="terminal") == 1
    assert value(m, "slonkd_errors_total", kind="crash") == 0
    assert value(m, "slonkd_reconcile_duration_seconds_count", outcome="ok") == 1
    assert value(m, "slonkd_reconcile_duration_seconds_count", outcome="retry") == 1
    assert value(m, "slonkd_reconcile_duration_seconds_count", outcome="terminal") == 1


async def test_the_asyncio_tasks_alive_are_a_gauge_read_in_the_loop() -> None:
    """slonkd_asyncio_tasks counts the loop's live tasks at scrape time (a leak: a slope)."""
    m = Metrics(role="agent")
    base = value(m, "slonkd_asyncio_tasks")
    assert base is not None
    assert base >= 1  # this test's own task
    gate = asyncio.Event()
    sleepers = [asyncio.create_task(gate.wait()) for _ in range(5)]
    await asyncio.sleep(0)
    assert value(m, "slonkd_asyncio_tasks") == base + 5
    gate.set()
    await asyncio.gather(*sleepers)
    assert value(m, "slonkd_asyncio_tasks") == base


def test_outside_a_loop_there_is_no_task_gauge() -> None:
    """Rendered with no running loop (a tool, a test): the family is absent, not a false 0."""
    assert value(Metrics(role="agent"), "slonkd_asyncio_tasks") is None

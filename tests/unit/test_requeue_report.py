"""Signal-to-requeue per cause: the hook's report, the agent's histogram, the cause label."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slonkd.adapters.kube.parsing import pod_from_json
from slonkd.core.checkpoint import REQUEUE_CAUSES, requeue_cause
from slonkd.core.errors import ParseError
from slonkd.runtime.agent.requeue_report import (
    PATH,
    RequeueReports,
    _loopback,
    parse_report,
    report_requeue,
    report_url,
)
from slonkd.runtime.kit.http_server import HttpServer


@pytest.mark.parametrize(
    ("held_for", "disruption", "cause"),
    [
        ("rollout", "EvictionByEvictionAPI", "rollout"),  # the coordinator drained, then evicted
        ("", "PreemptionByScheduler", "preemption"),
        ("", "EvictionByEvictionAPI", "eviction"),  # kubectl drain, a PDB-aware eviction
        ("", "DeletionByTaintManager", "taint"),
        ("", None, "deletion"),  # a plain DELETE sets no DisruptionTarget
        ("", "TerminationByKubelet", "other"),
        ("", "SomethingNewInKubernetes", "other"),
        ("health", "PreemptionByScheduler", "preemption"),  # only a rollout outranks the pod
    ],
)
def test_the_cause_label_comes_from_the_rollout_drain_else_the_pods_disruption(
    held_for: str, disruption: str | None, cause: str
) -> None:
    """A rollout's eviction is counted as the rollout; otherwise the pod says why; bounded."""
    got = requeue_cause(held_for=held_for, disruption=disruption)
    assert got == cause
    assert got in REQUEUE_CAUSES


def test_the_pods_disruption_target_condition_is_parsed() -> None:
    """``DisruptionTarget`` True gives its reason; False or absent gives None."""

    def pod(conditions: list[dict[str, str]]) -> dict[str, Any]:
        return {
            "metadata": {"name": "w-0", "namespace": "n", "uid": "u"},
            "status": {"phase": "Running", "conditions": conditions},
        }

    target = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    assert pod_from_json(pod([target])).disruption == "PreemptionByScheduler"
    assert pod_from_json(pod([{**target, "status": "False"}])).disruption is None
    assert pod_from_json(pod([])).disruption is None


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"signal_to_requeue_s": "4", "window_s": 4},
        {"signal_to_requeue_s": True, "window_s": 4},
        {"signal_to_requeue_s": -1, "window_s": 4},
        {"signal_to_requeue_s": 4, "window_s": 1e9},
        {"signal_to_requeue_s": 4, "window_s": 4, "held_for": "not a cause!"},
        {"signal_to_requeue_s": 4, "window_s": 4, "held_for": 7},
    ],
)
def test_a_malformed_report_is_refused(body: Any) -> None:
    """Numbers in range and a slonkd cause name, or ParseError: nothing else reaches a metric."""
    with pytest.raises(ParseError):
        parse_report(body)


def test_only_loopback_peers_may_report() -> None:
    """The pod's own containers share its loopback; anything reaching the pod IP does not."""
    assert _loopback("127.0.0.1")
    assert _loopback("::1")
    assert not _loopback("10.1.2.3")
    assert not _loopback(None)
    assert not _loopback("not-an-address")


def _histogram(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name.startswith("slonkd_checkpoint_signal_to_requeue_seconds"):
                out[(s.name, s.labels.get("cause", ""), s.labels.get("le", ""))] = s.value
    return out


@pytest.mark.alone  # a bound in seconds, kept beside parallel workers
async def test_a_report_over_loopback_lands_in_the_histogram_by_cause() -> None:
    """The hook's POST is observed under the cause the agent derives; a scrape ends the linger."""
    registry = CollectorRegistry()
    server = HttpServer(host="127.0.0.1", port=0, registry=registry, ready=lambda: (True, "ok"))
    reports = RequeueReports(
        registry=registry,
        cause_of=lambda held_for: requeue_cause(
            held_for=held_for, disruption="PreemptionByScheduler"
        ),
        scrapes=lambda: server.scrapes,
    )
    server.add_route("POST", PATH, reports.handle)
    await server.start()
    try:
        assert not reports.unscraped()
        status = await report_requeue(
            report_url(server.port),
            signal_to_requeue_s=4.02,
            window_s=4.0,
            held_for="",
            timeout_s=2.0,
        )
        assert status == 200
        h = _histogram(registry)
        assert h[("slonkd_checkpoint_signal_to_requeue_seconds_count", "preemption", "")] == 1
        assert h[("slonkd_checkpoint_signal_to_requeue_seconds_sum", "preemption", "")] == 4.02
        assert h[("slonkd_checkpoint_signal_to_requeue_seconds_bucket", "preemption", "5.0")] == 1
        assert h[("slonkd_checkpoint_signal_to_requeue_seconds_bucket", "preemption", "2.0")] == 0
        for cause in REQUEUE_CAUSES:  # every series from the start: rate() needs its zero
            assert ("slonkd_checkpoint_signal_to_requeue_seconds_count", cause, "") in h
        assert registry.get_sample_value("slonkd_checkpoint_window_seconds") == 4.0

        # not scraped yet: the agent would linger, but only as long as it is allowed to
        assert reports.unscraped()
        began = time.monotonic()
        await reports.linger(0.5)
        assert 0.4 <= time.monotonic() - began < 2.0
        await _get(f"{server.url}/metrics")
        assert not reports.unscraped()
        began = time.monotonic()
        await reports.linger(5.0)
        assert time.monotonic() - began < 0.5
    finally:
        await server.stop()


async def test_a_bad_report_is_400_and_counts_nothing() -> None:
    """A body that is not a measurement is refused with 400 and leaves the histogram as it was."""
    registry = CollectorRegistry()
    server = HttpServer(host="127.0.0.1", port=0, registry=registry, ready=lambda: (True, "ok"))
    reports = RequeueReports(
        registry=registry, cause_of=lambda _h: "deletion", scrapes=lambda: server.scrapes
    )
    server.add_route("POST", PATH, reports.handle)
    await server.start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                report_url(server.port), data=json.dumps({"signal_to_requeue_s": "x"})
            ) as answer,
        ):
            assert answer.status == 400
        assert (
            _histogram(registry)[
                ("slonkd_checkpoint_signal_to_requeue_seconds_count", "deletion", "")
            ]
            == 0
        )
        assert not reports.unscraped()
    finally:
        await server.stop()


async def _get(url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(url) as answer:
        assert answer.status == 200
        await answer.read()

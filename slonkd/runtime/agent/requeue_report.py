"""Time from checkpoint signal to requeue, per cause: the preStop reports it, the agent exports it.

The figure is measured where it happens: ``slonkd prestop`` sends the checkpoint signal and
does the requeue, so only it knows both instants (SLURM records neither the signal nor when
``scontrol requeue`` ran relative to it). But the hook is a short-lived process run by the
kubelet in the slurmd container, with nothing to serve ``/metrics`` from. The agent sidecar of
the same pod is long-lived, serves ``/metrics`` already, and shares the pod's network
namespace, so the hook reports each measurement to it over loopback
(:func:`report_requeue`, ``POST /v1/prestop/requeued`` on the agent's port) and the agent
observes it into ``slonkd_checkpoint_signal_to_requeue_seconds{cause}``
(:class:`RequeueReports`). The agent also supplies the *cause* from its own view: the hook
tells which slonkd cause held the SLURM node when it began (``rollout``: the coordinator
drained it before evicting), the agent's pod informer the pod's ``DisruptionTarget``
condition (preemption, eviction, taint); :func:`slonkd.core.checkpoint.requeue_cause` maps
both to a bounded label. Why not the coordinator: it sees neither instant, and a report over
MQTT would add the hook a broker connection and credentials it does not have.

Only loopback peers may report: inside a pod that is the pod's own containers; the route
answers 403 to anyone reaching the agent by its pod IP. The hook's report is bounded (one
second at most, within its deadline) and never fatal to it: the requeue and the DOWN do not
depend on the agent, and the hook's ``slurm.jobs_requeued`` log line carries the figure
whatever happens to the report.

The agent of a terminating pod is a native sidecar: it outlives slurmd (and so the hook),
then gets SIGTERM. A measurement not scraped yet would die with it, so on shutdown the agent
lingers until one scrape has read it, at most ``linger_s`` and never past the pod's grace
(the kubelet's SIGKILL ends it). A Prometheus that scrapes less often than that window loses
the sample; the log line stays.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, Histogram

from slonkd.core.checkpoint import REQUEUE_CAUSES
from slonkd.core.errors import ParseError
from slonkd.core.reasons import Cause

log = structlog.get_logger("slonkd.requeue_report")

PATH = "/v1/prestop/requeued"
"""The agent's route for the hook's report."""
BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Seconds: a checkpoint window is seconds to minutes, inside the pod's grace."""
MAX_SECONDS = 86_400.0
"""A report beyond a day is not a measurement of this handshake."""
MAX_BODY = 1024


def report_url(port: int) -> str:
    """The agent's report URL on loopback for its HTTP port."""
    return f"http://127.0.0.1:{port}{PATH}"


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""No proxy: an operator's HTTP_PROXY must not carry a loopback report off the pod."""


def _post(url: str, body: bytes, timeout_s: float) -> int:
    request = urllib.request.Request(  # noqa: S310 - a loopback URL from our own settings
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with _OPENER.open(request, timeout=timeout_s) as answer:
        return int(answer.status)


async def report_requeue(
    url: str, *, signal_to_requeue_s: float, window_s: float, held_for: str, timeout_s: float
) -> int:
    """Tell the agent one measurement; the HTTP status, or OSError/TimeoutError on failure."""
    body = json.dumps(
        {
            "signal_to_requeue_s": round(signal_to_requeue_s, 3),
            "window_s": round(window_s, 3),
            "held_for": held_for,
        }
    ).encode()
    async with asyncio.timeout(timeout_s):
        return await asyncio.to_thread(_post, url, body, timeout_s)


def parse_report(raw: Any) -> tuple[float, float, str]:
    """``(signal_to_requeue_s, window_s, held_for)`` from the decoded body, or ParseError."""
    if not isinstance(raw, dict):
        raise ParseError("report: not a JSON object")
    values = []
    for key in ("signal_to_requeue_s", "window_s"):
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ParseError(f"report: {key} is not a number")
        if not 0.0 <= float(value) <= MAX_SECONDS:
            raise ParseError(f"report: {key} out of range")
        values.append(float(value))
    held_for = raw.get("held_for", "")
    if not isinstance(held_for, str) or len(held_for) > 64:
        raise ParseError("report: held_for is not a short string")
    if held_for:
        held_for = Cause.parse(held_for).name  # slonkd's grammar, or ParseError
    return values[0], values[1], held_for


def _loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


class RequeueReports:
    """The agent's side: the histogram, the route, and the linger before exit."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        cause_of: Callable[[str], str],
        scrapes: Callable[[], int],
    ) -> None:
        self._cause_of = cause_of
        self._scrapes = scrapes
        self._unscraped_at: int | None = None
        """The scrape count when the last measurement came, until a later scrape read it."""
        self.seconds = Histogram(
            "slonkd_checkpoint_signal_to_requeue_seconds",
            "Time from the checkpoint signal to the requeue of the jobs, as the preStop hook "
            "measured it, by why the pod went (rollout, preemption, eviction, taint, deletion)",
            ["cause"],
            buckets=BUCKETS,
            registry=registry,
        )
        self.window = Gauge(
            "slonkd_checkpoint_window_seconds",
            "The checkpoint window the last preStop hook granted (signal to requeue, planned)",
            registry=registry,
        )
        for cause in REQUEUE_CAUSES:
            self.seconds.labels(cause=cause)

    def observe(self, *, seconds: float, window_s: float, held_for: str) -> str:
        """Record one measurement; returns its cause label."""
        cause = self._cause_of(held_for)
        self.seconds.labels(cause=cause).observe(seconds)
        self.window.set(window_s)
        self._unscraped_at = self._scrapes()
        log.info(
            "agent.signal_to_requeue",
            cause=cause,
            signal_to_requeue_s=round(seconds, 3),
            window_s=round(window_s, 3),
        )
        return cause

    def unscraped(self) -> bool:
        """Whether a measurement came after the last scrape."""
        return self._unscraped_at is not None and self._scrapes() <= self._unscraped_at

    async def linger(self, limit_s: float) -> None:
        """Wait (at most ``limit_s``) until a scrape has read the last measurement."""
        if not self.unscraped():
            return
        until = time.monotonic() + limit_s
        log.info("agent.lingering", reason="a signal-to-requeue measurement is not scraped yet")
        while self.unscraped() and time.monotonic() < until:  # noqa: ASYNC110 - the count is the server's
            await asyncio.sleep(0.2)

    async def handle(self, request: web.Request) -> web.Response:
        """``POST /v1/prestop/requeued`` from the pod's own hook (loopback only)."""
        if not _loopback(request.remote):
            return web.Response(status=403, text="loopback only\n")
        if request.content_length is None or request.content_length > MAX_BODY:
            return web.Response(status=413, text=f"a body of at most {MAX_BODY} bytes\n")
        try:
            seconds, window_s, held_for = parse_report(json.loads(await request.read()))
        except (ValueError, ParseError) as exc:
            return web.Response(status=400, text=f"{str(exc)[:200]}\n")
        cause = self.observe(seconds=seconds, window_s=window_s, held_for=held_for)
        return web.json_response({"cause": cause})

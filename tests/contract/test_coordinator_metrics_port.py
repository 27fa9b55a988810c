"""The coordinator's ``/metrics`` on a port of its own (``metrics_port``), on real sockets.

:func:`slonkd.runtime.coordinating.leading.metrics_server` serves the process's registry
(the one the API's ``/metrics`` serves too) in plain HTTP even while the API serves HTTPS
only (:mod:`tests.contract.test_api_tls` for the API): a NetworkPolicy can then admit
Prometheus to this port and not to the API (the chart's rule; tests/unit/test_chart_metrics.py).
The port answers nothing of the API (no ``/v1/*``). ``metrics_port: 0`` starts no server.
Debian's Prometheus (:mod:`slonkd_sandbox.prometheus`, as the sandbox's dashboard test) scrapes
it on loopback, with the fleet's families of a leader registered: what it negotiates
(OpenMetrics) parses. The chart's pods and policy on a real node are not scraped here.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import NamedTuple

import aiohttp
import pytest

from slonkd.core.budget import Admission, PoolUse
from slonkd.core.plan import NodeView, Plan
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.runtime.coordinating.api import ApiTls, CoordinatorAPI
from slonkd.runtime.coordinating.fleet_metrics import FleetExporter
from slonkd.runtime.coordinating.leading import metrics_server
from slonkd.runtime.coordinating.settings import CoordinatorSettings
from slonkd.runtime.kit.metrics import Metrics
from slonkd_sandbox.prometheus import Prometheus
from slonkd_sandbox.tls import make_ca, make_server_cert


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _settings(metrics_port: int) -> CoordinatorSettings:
    return CoordinatorSettings(
        namespace="slonk", identity="c-0", api_host="127.0.0.1", metrics_port=metrics_port
    )


Served = NamedTuple("Served", [("api_port", int), ("metrics_port", int)])  # noqa: UP014
"""The HTTPS API's port (no leader) and the plain metrics port beside it."""


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    """An HTTPS API and the metrics server on the same registry, as ``run_coordinator`` does."""
    ca = make_ca(tmp_path, "slonk-ca")
    server = make_server_cert(ca, tmp_path, "coordinator", sans=("DNS:coordinator",))
    api = CoordinatorAPI(identity="c-0", holder=lambda: "c-1", ready=lambda: (False, "not yet"))
    api.metrics = Metrics(role="coordinator")
    await api.start(
        "127.0.0.1", 0, tls=ApiTls(cert_file=str(server.cert), key_file=str(server.key))
    )
    scrape = metrics_server(_settings(_free_port()), api.metrics, ready=api.ready)
    assert scrape is not None
    await scrape.start()
    try:
        yield Served(api_port=api.port, metrics_port=scrape.port)
    finally:
        await scrape.stop()
        await api.stop()


async def test_metrics_answer_in_plain_http_on_their_own_port(served: Served) -> None:
    """``/metrics`` there: the coordinator's families; ``/readyz`` the API's readiness."""
    base = f"http://127.0.0.1:{served.metrics_port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/metrics") as resp:
            assert resp.status == 200
            body = await resp.text()
        assert 'slonkd_info{role="coordinator"' in body
        async with session.get(f"{base}/readyz") as resp:
            assert (resp.status, await resp.text()) == (503, "not yet\n")
        async with session.get(f"{base}/v1/status") as resp:
            assert resp.status == 404  # the API is not on this port


async def test_the_api_port_stays_https_only(served: Served) -> None:
    """The API's port answers no plain HTTP: only the metrics port does."""
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"http://127.0.0.1:{served.api_port}/metrics") as resp:
                await resp.read()


def test_port_zero_starts_no_server_and_the_api_port_is_refused() -> None:
    """``metrics_port: 0`` (the settings' default): no server; the API's own port: refused."""
    assert (
        metrics_server(_settings(0), Metrics(role="coordinator"), ready=lambda: (True, "")) is None
    )
    with pytest.raises(ValueError, match="metrics_port must differ from api_port"):
        CoordinatorSettings(namespace="slonk", identity="c-0", api_port=9400, metrics_port=9400)
    with pytest.raises(ValueError, match="metrics_port must be between"):
        _settings(70000)


async def test_a_real_prometheus_scrapes_the_port_with_the_fleets_families(
    tmp_path: Path,
) -> None:
    """Prometheus's own scrape (its Accept header) of the leader's families: values it reads."""
    metrics = Metrics(role="coordinator")
    fleet = FleetExporter()
    fleet.register(metrics.registry)
    nodes = [
        SlurmNode(name=NodeName(n), state=NodeState.from_tokens("IDLE", []), reason="")
        for n in ("a", "b")
    ]
    views = [NodeView(node=n.name, now=0, slurm=n, pod=None, kube_node=None) for n in nodes]
    plans = [Plan(node=n.name, actions=()) for n in nodes]
    fleet.observe_pass(
        nodes, views, plans, Admission(pools=(PoolUse(pool="w", size=2, out=0, limit=1),))
    )
    scrape = metrics_server(_settings(_free_port()), metrics, ready=lambda: (True, "ready"))
    assert scrape is not None
    await scrape.start()
    prom = Prometheus(tmp_path / "prometheus", {"coordinator": [f"127.0.0.1:{scrape.port}"]})
    try:
        await asyncio.to_thread(prom.start)
        await asyncio.to_thread(prom.wait_scraped)
        got = await asyncio.to_thread(prom.query, 'slonkd_fleet_nodes{state="idle"}')
        assert [float(r["value"][1]) for r in got] == [2.0]
        info = await asyncio.to_thread(prom.query, 'slonkd_info{role="coordinator"}')
        assert len(info) == 1
        assert scrape.scrapes >= 1
    finally:
        await asyncio.to_thread(prom.stop)
        await scrape.stop()

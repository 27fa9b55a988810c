"""``sdiag`` through the scontrol backend against the real slurmctld (22.05 and 24.11).

The fleet exporter's one RPC: the port's ``diag`` answers it typed (the backend parses
sdiag's output) and counts the reads slonkd makes; with
slurmctld stopped a read is given up at the exporter's timeout and counted, never raised.
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.runtime.coordinating.fleet_metrics import FleetExporter
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.contract.conftest import settings_for

pytestmark = pytest.mark.slurm


@pytest.fixture
def backend(any_backend: SlurmBackend) -> SlurmBackend:
    """Each backend of the port in turn (tests/contract/conftest.py)."""
    return any_backend


async def test_sdiag_counts_the_node_reads_slonkd_makes(
    cluster: SlurmCluster, backend: SlurmBackend
) -> None:
    """Three node reads later, sdiag's REQUEST_NODE_INFO count is at least three higher."""
    before = (await backend.diag()).rpcs
    for _ in range(3):
        await backend.read_nodes()
    stats = await backend.diag()
    assert stats.server_threads >= 1
    was = before["REQUEST_NODE_INFO"].count if "REQUEST_NODE_INFO" in before else 0
    assert stats.rpcs["REQUEST_NODE_INFO"].count >= was + 3
    assert stats.rpcs["REQUEST_STATS_INFO"].count >= 1  # the first sdiag


@pytest.mark.alone  # a bound in seconds, kept beside parallel workers
async def test_a_stopped_slurmctld_is_a_counted_failure_within_the_timeout(
    cluster: SlurmCluster,
) -> None:
    """slurmctld down: the read ends at the exporter's timeout, is counted and never raises.

    The last good statistics stay exported.
    """
    backend = ScontrolBackend(settings_for(cluster, attempts=1))
    fleet = FleetExporter()
    registry = CollectorRegistry()
    fleet.register(registry)
    await fleet.read_sdiag(backend.diag, timeout_s=10)
    cluster.stop_slurmctld()
    began = time.monotonic()
    await fleet.read_sdiag(backend.diag, timeout_s=2)
    assert time.monotonic() - began < 5
    text = generate_latest(registry).decode()
    assert "slonkd_slurmctld_sdiag_failures_total 1.0" in text
    assert "slonkd_slurmctld_server_threads" in text

"""Running-job counts of the node read against real SLURM 22.05 and 24.11."""

from __future__ import annotations

import asyncio
import time

import pytest

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.contract.conftest import kind_of

pytestmark = pytest.mark.slurm


@pytest.fixture
def backend(any_backend: SlurmBackend) -> SlurmBackend:
    """Each backend of the port in turn (tests/contract/conftest.py)."""
    return any_backend


async def _counts(backend: SlurmBackend) -> dict[str, int | None]:
    return {n.name: n.running_jobs for n in await backend.read_nodes(with_jobs=True)}


async def _wait_counts(
    backend: SlurmBackend, want: dict[str, int], timeout_s: float = 60.0
) -> dict[str, int | None]:
    deadline = time.monotonic() + timeout_s
    while (got := await _counts(backend)) != want:
        assert time.monotonic() < deadline, f"running jobs {got}, not {want} after {timeout_s} s"
        await asyncio.sleep(0.2)
    return got


async def test_running_jobs_counted_per_node(backend: SlurmBackend, cluster: SlurmCluster) -> None:
    """One job on n2, two on n1, one across n3+n4; counts drop to zero when they end.

    The jobs run 20 s: long enough to be seen together on a loaded machine.
    """
    idle = {"n1": 0, "n2": 0, "n3": 0, "n4": 0}
    assert await _counts(backend) == idle
    assert all(n.running_jobs is None for n in await backend.read_nodes())
    before = backend.calls
    await backend.read_nodes(with_jobs=True)
    # the node read and one squeue; pyslurm: the nodes, their partitions and the jobs
    assert backend.calls - before == {"scontrol": 2, "pyslurm": 3}[kind_of(backend)]

    for argv in (["-w", "n2", "-n1"], ["-w", "n1", "-n1"], ["-w", "n1", "-n1"]):
        cluster.run("sbatch", "-o", "/dev/null", *argv, "--wrap", "sleep 20")
    cluster.run("sbatch", "-o", "/dev/null", "-w", "n3,n4", "-N2", "--wrap", "sleep 20")
    cluster.run("sbatch", "-o", "/dev/null", "-w", "n2", "--begin=now+3600", "--wrap", "sleep 9")
    await _wait_counts(backend, {"n1": 2, "n2": 1, "n3": 1, "n4": 1})
    pending = cluster.run("squeue", "-h", "-t", "PD", "-o", "%i").stdout.split()
    assert len(pending) == 1  # the pending job is on no node yet and counted nowhere

    named = await backend.read_nodes(["n2"], with_jobs=True)
    assert [(n.name, n.running_jobs) for n in named] == [("n2", 1)]

    cluster.run("scancel", *pending)
    # Jobs end on their own (24.11 in its root keeps cancelled jobs COMPLETING for minutes).
    await _wait_counts(backend, idle, timeout_s=120)

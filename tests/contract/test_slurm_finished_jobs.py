"""The finished-jobs read (the job-failure blame's job-outcome source) on SLURM 22.05 and 24.11.

slurmctld keeps an ended job for MinJobAge (300 s by default): ``squeue`` lists it with its
state, exit code and the nodes it ran on, with neither slurmdbd nor a job completion plugin.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.core.job_blame import is_infrastructure_failure
from slonkd.core.slurm_job import JobState
from slonkd_sandbox.slurm.cluster import SlurmCluster

pytestmark = pytest.mark.slurm


@pytest.fixture
def backend(any_backend: SlurmBackend) -> SlurmBackend:
    """Each backend of the port in turn (tests/contract/conftest.py)."""
    return any_backend


def _submit(cluster: SlurmCluster, nodes: str, script: str) -> int:
    count = str(len(nodes.split(",")))
    out = cluster.run(
        "sbatch", "--parsable", "--no-requeue", "-o", "/dev/null", "-w", nodes, "-N", count,
        "--wrap", script,
    ).stdout  # fmt: skip
    return int(out.strip().split(";")[0])


async def _wait_finished(
    cluster: SlurmCluster, backend: SlurmBackend, ids: set[int], timeout_s: float = 90.0
) -> dict[int, FinishedJob]:
    """The finished jobs once all of ``ids`` are among them.

    On a timeout it says SLURM's view of the missing jobs and of the nodes (a full run once
    saw job 1 not end in 90 s in phase 1, on a loaded machine).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        got = {int(j.job_id): j for j in await backend.finished_jobs()}
        if ids <= set(got):
            return got
        if time.monotonic() >= deadline:
            jobs = [
                cluster.run("scontrol", "-o", "show", "job", str(i), check=False).stdout.strip()
                for i in sorted(ids - set(got))
            ]
            nodes = cluster.run("sinfo", "-N", "-o", "%N %T %E", check=False).stdout
            raise AssertionError(
                f"finished {sorted(got)}, not all of {sorted(ids)}:\n"
                + "\n".join(jobs)
                + f"\n{nodes}"
            )
        await asyncio.sleep(0.5)


async def test_failed_and_node_failed_multi_node_jobs_are_read_with_their_nodes(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """A 2-node job exiting 42, a 2-node job whose node went DOWN, a 1-node success.

    Each is listed once it ended, with the state SLURM gave it (FAILED, NODE_FAIL,
    COMPLETED), its exit code, every node it ran on, its start and end, and its uid; FAILED
    42 and NODE_FAIL count as infrastructure failures under a policy naming 42, the success
    does not.
    """
    assert await backend.finished_jobs() == []
    failed = _submit(cluster, "n1,n2", "exit 42")
    ok = _submit(cluster, "n1", "true")
    lost = _submit(cluster, "n3,n4", "sleep 120")

    def running() -> bool:
        out = cluster.run("squeue", "-h", "-j", str(lost), "-o", "%T").stdout.strip()
        return out == "RUNNING"

    deadline = time.monotonic() + 60
    while not running():
        assert time.monotonic() < deadline, "the long job never ran"
        await asyncio.sleep(0.3)
    cluster.run("scontrol", "update", "nodename=n4", "state=down", "reason=broken")
    got = await _wait_finished(cluster, backend, {failed, ok, lost})

    assert got[failed].state is JobState.FAILED
    assert got[failed].exit_code == 42
    assert got[failed].nodes == ("n1", "n2")
    assert got[ok].state is JobState.COMPLETED
    assert got[ok].exit_code == 0
    assert got[ok].nodes == ("n1",)
    assert got[lost].state is JobState.NODE_FAIL
    assert got[lost].nodes == ("n3", "n4")
    # where each ran when (job blame keys jobs by the pod that served a node at the time):
    # SLURM's local time stamps read as this process's local time land near our clock
    for job in (got[failed], got[ok], got[lost]):
        assert job.start is not None
        assert job.end is not None
        assert job.start <= job.end
        assert abs(job.end - time.time()) < 600, (job.end, time.time())
        assert job.user is not None
    codes = {42}
    assert is_infrastructure_failure(got[failed].state, got[failed].exit_code, codes)
    assert is_infrastructure_failure(got[lost].state, got[lost].exit_code, codes)
    assert not is_infrastructure_failure(got[ok].state, got[ok].exit_code, codes)
    cluster.run("scontrol", "update", "nodename=n4", "state=resume")

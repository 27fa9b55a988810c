"""SLURM accounting (slurmdbd with a real MariaDB) against real SLURM 22.05 and 24.11.

The harness's cluster with ``SlurmLayout(accounting=True)``: finished jobs reach ``sacct``
with their state and exit code, and slonkd does not depend on slurmdbd: with it stopped,
slurmctld still schedules, the SLURM adapter still reads and writes and a coordinator pass
still drains, and the job records queued by slurmctld arrive once slurmdbd is back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

import pytest

from slonkd.adapters.kube.kubeconfig import ApiEndpoint
from slonkd.adapters.kube.lease import LeaderElector
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import DrainStatus, NodeName
from slonkd.runtime.coordinating import Coordinator, CoordinatorSettings, Parts
from slonkd_sandbox.accounting import ACCOUNT
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests.contract.conftest import settings_for
from tests.unit.coordinator_fakes import (
    FakeElector,
    FakeEvents,
    FakeNodeWriter,
    FakePodWriter,
    FakeStore,
    kube_node,
    worker_pod,
)

pytestmark = pytest.mark.slurm

LAYOUT = SlurmLayout(nodes=("w-0", "w-1"), accounting=True)
"""Node names as the coordinator's pods (``w-<i>`` on K8s node ``kn-<i>``) are called."""


def _submit(cluster: SlurmCluster, script: str, *extra: str) -> str:
    argv = ["sbatch", "--parsable", "-o", "/dev/null", *extra, "--wrap", script]
    return cluster.run(*argv).stdout.strip().split(";")[0]


def _sacct(cluster: SlurmCluster, *job_ids: str) -> dict[str, tuple[str, str, str]]:
    """``{job id: (state, exit code, account)}`` of the allocations sacct knows."""
    out = cluster.run(
        "sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode,Account", "-j", ",".join(job_ids)
    ).stdout
    rows = (line.split("|") for line in out.splitlines() if line.strip())
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def _wait_sacct(
    cluster: SlurmCluster, want: dict[str, tuple[str, str, str]], timeout_s: float = 90.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while (got := _sacct(cluster, *want)) != want:
        assert time.monotonic() < deadline, f"sacct says {got}, not {want} after {timeout_s} s"
        time.sleep(0.5)


def _job_state(cluster: SlurmCluster, job_id: str) -> str:
    out = cluster.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return fields.get("JobState", "")


def _wait_job(cluster: SlurmCluster, job_id: str, state: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (got := _job_state(cluster, job_id)) != state:
        assert time.monotonic() < deadline, f"job {job_id} is {got!r}, not {state} in {timeout_s} s"
        time.sleep(0.2)


def _coordinator(backend: ScontrolBackend, writer: FakeNodeWriter) -> Coordinator:
    """A coordinator on the real SLURM adapter, K8s as fakes: kn-0 is cordoned."""
    settings = CoordinatorSettings(
        namespace="slonk",
        identity="c-0",
        poll_s=0,
        rollout=None,
        max_out=10,
        max_out_percent=100,
        mass_percent=100,
    )
    transport = KubeTransport(ApiEndpoint(server="http://127.0.0.1:9"))  # never contacted
    parts = Parts(
        slurm=backend, nodes=writer, pods=FakePodWriter(), events=FakeEvents(), store=FakeStore()
    )
    c = Coordinator(settings, transport, cast(LeaderElector, FakeElector()), parts=parts)
    c.pods._cache = {f"slonk/w-{i}": worker_pod(i) for i in range(2)}
    c.nodes._cache = {n.name: n for n in (kube_node(0, cordoned=True), kube_node(1))}
    writer.cache = c.nodes._cache
    return c


@pytest.fixture
def accounted(cluster_factory: Callable[..., SlurmCluster]) -> SlurmCluster:
    """A cluster of the release under test with slurmdbd and MariaDB (w-0, w-1 idle)."""
    return cluster_factory(LAYOUT)


def test_finished_jobs_are_listed_by_sacct(accounted: SlurmCluster) -> None:
    """A job that exits 0 reads COMPLETED 0:0, one that exits 3 FAILED 3:0, both on account lab.

    The cluster's slurm.conf sends records to slurmdbd (accounting_storage/slurmdbd).
    """
    config = accounted.run("scontrol", "show", "config").stdout
    assert "accounting_storage/slurmdbd" in config
    ok = _submit(accounted, "true")
    bad = _submit(accounted, "exit 3")
    _wait_sacct(accounted, {ok: ("COMPLETED", "0:0", ACCOUNT), bad: ("FAILED", "3:0", ACCOUNT)})


async def test_slonkd_keeps_working_while_slurmdbd_is_down(accounted: SlurmCluster) -> None:
    """slurmdbd stopped: jobs still run, the adapter reads and drains, a coordinator pass drains.

    sacct cannot answer meanwhile; once slurmdbd is back the records slurmctld queued (the
    job that ran while it was away) arrive with their final state.
    """
    backend = ScontrolBackend(settings_for(accounted))
    assert accounted.stop_slurmdbd() == "terminated"
    assert accounted.run("sacct", "-X", "-n", check=False).returncode != 0

    job = _submit(accounted, "exit 0", "-w", "w-1")
    _wait_job(accounted, job, "COMPLETED")

    nodes = {n.name: n for n in await backend.read_nodes(with_jobs=True)}
    assert set(nodes) == {"w-0", "w-1"}
    assert nodes[NodeName("w-1")].running_jobs == 0
    result = await backend.drain([NodeName("w-1")], Cause(name="manual"), "while slurmdbd is down")
    assert result.changed == (NodeName("w-1"),)
    await backend.resume([NodeName("w-1")], Cause(name="manual"))

    writer = FakeNodeWriter()
    coordinator = _coordinator(backend, writer)
    await coordinator.reconcile_all()
    assert coordinator.passes == 1
    (w0,) = await backend.read_nodes([NodeName("w-0")])
    assert w0.state.drain in {DrainStatus.DRAINING, DrainStatus.DRAINED}, w0
    assert w0.reason.startswith("slonkd:k8s-cordoned"), w0.reason

    accounted.start_slurmdbd()
    _wait_sacct(accounted, {job: ("COMPLETED", "0:0", ACCOUNT)})

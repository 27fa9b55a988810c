"""The chart's SLURM accounting on a real kubelet node: slurmdbd and MariaDB from the images.

One ``helm install`` with ``accounting.enabled`` on a fresh :class:`RealNode`, set up as in
``test_chart_real`` (:func:`slonkd_sandbox.chart.release.install`: the same values, local
volumes and image cache) plus the two accounting
images (``container/slurmdbd``, ``container/mariadb``) and a ``local`` volume for the
database's claim. ``sacct`` in the login pod lists finished jobs with state and exit code;
with slurmdbd scaled to zero jobs still run, the coordinator keeps its Lease and the agents
stay Ready, and the records arrive once slurmdbd is back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slonkd_sandbox.chart.images import ACCOUNTING_SPECS, SPECS
from slonkd_sandbox.chart.release import RELEASE, Release, install, ready, workers
from slonkd_sandbox.chart.volumes import local_volume
from slonkd_sandbox.procs import HarnessError, wait_for
from slonkd_sandbox.realnode.node import RealNode
from tests.e2e.chart_install import reported

pytestmark = [pytest.mark.kube, pytest.mark.real, pytest.mark.timeout(1500)]

LOGIN = f"{RELEASE}-login-0"
DBD = f"{RELEASE}-slurmdbd"
WORKERS = workers(2)


def _database_volume(node: RealNode, ns: str) -> None:
    """A ``local`` PersistentVolume pre-bound to the MariaDB StatefulSet's claim."""
    claim = f"data-{RELEASE}-mariadb-0"
    local_volume(node, name=f"pv-{ns}-db", ns=ns, claim=claim, modes=["ReadWriteOnce"])


@pytest.fixture(scope="module")
def accounted(session_root: Path) -> Iterator[Release]:
    """The chart with accounting installed on a fresh real node; every pod Ready."""
    installing = install(
        session_root,
        replicas=len(WORKERS),
        specs=(*SPECS, *ACCOUNTING_SPECS),
        volumes=_database_volume,
        extra_pods=2,  # slurmdbd, mariadb
        set_json=(
            "accounting.enabled=true",
            'accounting.database.persistence.size="1Gi"',  # the local volume's size
        ),
    )
    with reported("chart-acct", installing) as release:
        yield release


def _login(deployed: Release, *argv: str) -> str:
    return deployed.exec(LOGIN, "login", *argv)


def _submit(deployed: Release, script: str) -> str:
    out = _login(deployed, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", script)
    return out.strip().split(";")[0]


def _sacct(deployed: Release, *jobs: str) -> dict[str, tuple[str, str]]:
    out = _login(
        deployed, "sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", ",".join(jobs)
    )
    rows = (line.split("|") for line in out.splitlines() if line.strip())
    return {r[0]: (r[1], r[2]) for r in rows}


def _wait_sacct(deployed: Release, want: dict[str, tuple[str, str]], timeout_s: float) -> None:
    last: dict[str, tuple[str, str]] = {}

    def arrived() -> bool:
        nonlocal last
        last = _sacct(deployed, *want)
        return last == want

    try:
        wait_for("sacct lists the jobs", arrived, timeout_s=timeout_s, interval_s=2)
    except HarnessError as exc:
        pytest.fail(f"{exc}: sacct says {last}, want {want}\n{deployed.diagnose()}")


def test_sacct_on_the_login_pod_lists_finished_jobs(accounted: Release) -> None:
    """A job exiting 0 reads COMPLETED 0:0 and one exiting 3 FAILED 3:0, from the login pod.

    The records went slurmctld -> slurmdbd pod -> MariaDB pod, by the names the chart rendered.
    """
    ok = _submit(accounted, "true")
    bad = _submit(accounted, "exit 3")
    _wait_sacct(accounted, {ok: ("COMPLETED", "0:0"), bad: ("FAILED", "3:0")}, timeout_s=120)


def _lease_renewed(deployed: Release) -> str:
    lease = deployed.kube.api.request(
        "GET",
        f"/apis/coordination.k8s.io/v1/namespaces/{deployed.ns}/leases/{RELEASE}-coordinator",
    )
    return str(lease["spec"]["renewTime"])


def test_without_slurmdbd_jobs_run_and_slonkd_keeps_working(accounted: Release) -> None:
    """slurmdbd scaled to zero: jobs run, the coordinator leads on, the agents stay Ready.

    A job still runs to the end, the coordinator renews its Lease, the workers (slurmd +
    agent) stay Ready; scaled back, slurmdbd gets the job's record and sacct lists it.
    """
    kubectl = accounted.kube.kubectl
    kubectl("scale", f"--namespace={accounted.ns}", f"statefulset/{DBD}", "--replicas=0")
    wait_for(
        "slurmdbd pod gone",
        lambda: not accounted.pods(**{"app.kubernetes.io/component": "slurmdbd"}),
        timeout_s=90,
    )
    renewed = _lease_renewed(accounted)
    job = _submit(accounted, "true")

    def done() -> bool:
        out = _login(accounted, "scontrol", "-o", "show", "job", job)
        return "JobState=COMPLETED" in out

    wait_for(f"job {job} completed without slurmdbd", done, timeout_s=120, interval_s=2)
    wait_for("the Lease renewed", lambda: _lease_renewed(accounted) != renewed, timeout_s=60)
    workers = {p["metadata"]["name"]: ready(p) for p in accounted.pods()}
    assert all(workers[w] for w in WORKERS), workers

    kubectl("scale", f"--namespace={accounted.ns}", f"statefulset/{DBD}", "--replicas=1")
    _wait_sacct(accounted, {job: ("COMPLETED", "0:0")}, timeout_s=180)

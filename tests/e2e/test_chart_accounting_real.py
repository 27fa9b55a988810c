"""The chart's SLURM accounting on a real kubelet node: slurmdbd and MariaDB from the images.

One ``helm install`` with ``accounting.enabled`` on a fresh :class:`RealNode`, set up as in
``test_chart_real`` (the same values, local volumes and image cache) plus the two accounting
images (``container/slurmdbd``, ``container/mariadb``) and a ``local`` volume for the
database's claim. ``sacct`` in the login pod lists finished jobs with state and exit code;
with slurmdbd scaled to zero jobs still run, the coordinator keeps its Lease and the agents
stay Ready, and the records arrive once slurmdbd is back.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slonkd.testing.chart_images import (
    ACCOUNTING_SPECS,
    SPECS,
    ensure_chart_images,
    image_values,
    import_images,
)
from slonkd.testing.helm import CHART_DIR, Helm, value_args
from slonkd.testing.kube import KubeCluster
from slonkd.testing.procs import HarnessError, wait_for
from slonkd.testing.realnode import RealNode
from tests.e2e.test_chart_real import (
    LOCAL_IMAGES,
    READY_TIMEOUT_S,
    RELEASE,
    WORKERS,
    Deployed,
    _local_volumes,
    _ready,
    _values,
)

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1500)]

LOGIN = f"{RELEASE}-login-0"
DBD = f"{RELEASE}-slurmdbd"


def _database_volume(node: RealNode, ns: str) -> None:
    """A ``local`` PersistentVolume pre-bound to the MariaDB StatefulSet's claim."""
    path = node.hostpath_dir / f"pv-{ns}-db"
    path.mkdir(parents=True)
    node.cluster.api.request(
        "POST",
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"pv-{ns}-db"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "local": {"path": str(path)},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [node.name],
                                    }
                                ]
                            }
                        ]
                    }
                },
                "claimRef": {"namespace": ns, "name": f"data-{RELEASE}-mariadb-0"},
            },
        },
    )


@pytest.fixture(scope="module")
def accounted(session_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    """The chart with accounting installed on a fresh real node; every pod Ready."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    images = ensure_chart_images((*SPECS, *ACCOUNTING_SPECS))
    timings["images_build_or_cache_s"] = time.monotonic() - t0
    tag = secrets.token_hex(3)
    kube = KubeCluster(session_root / f"cak-{tag}")
    node = RealNode(session_root / f"can-{tag}", cluster=kube)
    try:
        kube.start()
        node.start()
        import_images(node, images)
        ns = f"acct-{tag}"
        kube.create_namespace(ns)
        home = _local_volumes(node, ns)
        _database_volume(node, ns)
        tmp = tmp_path_factory.mktemp("chart-acct")
        assert kube.tools is not None
        helm = Helm(binary=kube.tools.helm, home=tmp / "helm", kubeconfig=kube.kubeconfig)
        values = value_args(
            [LOCAL_IMAGES, _values(tmp)],
            (
                *image_values(images),
                "accounting.enabled=true",
                'accounting.database.persistence.size="1Gi"',  # the local volume's size
            ),
        )
        deployed = Deployed(
            node=node,
            kube=kube,
            ns=ns,
            helm=helm,
            values=values,
            home=home,
            ssh_key=tmp / "id_ed25519",
            timings=timings,
        )
        t0 = time.monotonic()
        helm.run("install", RELEASE, str(CHART_DIR), f"--namespace={ns}", *values)

        def all_ready() -> bool:
            pods = deployed.pods()
            # slurmctld, 2 workers, login, 2 coordinators, mosquitto, slurmdbd, mariadb
            return len(pods) == 9 and all(_ready(p) for p in pods)

        try:
            wait_for("every pod Ready", all_ready, timeout_s=READY_TIMEOUT_S, interval_s=1)
        except HarnessError as exc:
            pytest.fail(f"{exc}\n{deployed.diagnose()}")
        timings["install_to_ready_s"] = time.monotonic() - t0
        print(f"\n[chart-acct] timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
        yield deployed
    finally:
        try:
            node.stop()
        finally:
            kube.stop()


def _login(deployed: Deployed, *argv: str) -> str:
    return deployed.exec(LOGIN, "login", *argv)


def _submit(deployed: Deployed, script: str) -> str:
    out = _login(deployed, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", script)
    return out.strip().split(";")[0]


def _sacct(deployed: Deployed, *jobs: str) -> dict[str, tuple[str, str]]:
    out = _login(
        deployed, "sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", ",".join(jobs)
    )
    rows = (line.split("|") for line in out.splitlines() if line.strip())
    return {r[0]: (r[1], r[2]) for r in rows}


def _wait_sacct(deployed: Deployed, want: dict[str, tuple[str, str]], timeout_s: float) -> None:
    last: dict[str, tuple[str, str]] = {}

    def arrived() -> bool:
        nonlocal last
        last = _sacct(deployed, *want)
        return last == want

    try:
        wait_for("sacct lists the jobs", arrived, timeout_s=timeout_s, interval_s=2)
    except HarnessError as exc:
        pytest.fail(f"{exc}: sacct says {last}, want {want}\n{deployed.diagnose()}")


def test_sacct_on_the_login_pod_lists_finished_jobs(accounted: Deployed) -> None:
    """A job exiting 0 reads COMPLETED 0:0 and one exiting 3 FAILED 3:0, from the login pod.

    The records went slurmctld -> slurmdbd pod -> MariaDB pod, by the names the chart rendered.
    """
    ok = _submit(accounted, "true")
    bad = _submit(accounted, "exit 3")
    _wait_sacct(accounted, {ok: ("COMPLETED", "0:0"), bad: ("FAILED", "3:0")}, timeout_s=120)


def _lease_renewed(deployed: Deployed) -> str:
    lease = deployed.kube.api.request(
        "GET",
        f"/apis/coordination.k8s.io/v1/namespaces/{deployed.ns}/leases/{RELEASE}-coordinator",
    )
    return str(lease["spec"]["renewTime"])


def test_without_slurmdbd_jobs_run_and_slonkd_keeps_working(accounted: Deployed) -> None:
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
    workers = {p["metadata"]["name"]: _ready(p) for p in accounted.pods()}
    assert all(workers[w] for w in WORKERS), workers

    kubectl("scale", f"--namespace={accounted.ns}", f"statefulset/{DBD}", "--replicas=1")
    _wait_sacct(accounted, {job: ("COMPLETED", "0:0")}, timeout_s=180)

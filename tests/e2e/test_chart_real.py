"""The chart as users deploy it, on a real kubelet node: real images, containers and DNS.

One ``helm install`` of ``deploy/helm/slonk`` for the module, on a :class:`RealNode`
(containerd, runc, kubelet, CoreDNS) with a control plane of its own. The images are
``container/build.sh``'s, imported with ``ctr`` (:mod:`slonkd.testing.chart_images`) and
selected by ``ci/local-images-values.yaml`` (``imagePullPolicy: Never``). Nothing is replaced:
slurmctld, slurmd, munged, mosquitto, the coordinators and the agent sidecars are the
images' own processes; names resolve through CoreDNS and headless Services; the two
claims are bound to ``local`` PersistentVolumes on the node, as an administrator without a
provisioner would make them. Only the node's size is told to the chart (no GPUs, the
machine's CPUs, 1 GiB per SLURM node) and where pods reach the API by name
(``kubernetesService``: no kube-proxy runs here, so no request ever goes to a ClusterIP).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd.testing.chart_images import ensure_chart_images, image_values, import_images
from slonkd.testing.helm import CHART_DIR, Helm, value_args
from slonkd.testing.kube import KubeCluster
from slonkd.testing.procs import HarnessError, wait_for
from slonkd.testing.realnode import API_HOST, API_PORT, RealNode

# The first test's setup builds the images when this tree changed them (scripts/bootstrap
# builds them ahead; cold about 6 minutes on 2 cores) and starts the node: more than the
# default 300 s per test.
pytestmark = [pytest.mark.kube, pytest.mark.timeout(1200)]

RELEASE = "rel"
POOL = "cpu"
WORKERS = (f"{RELEASE}-{POOL}-0", f"{RELEASE}-{POOL}-1")
CONTROLLER = f"{RELEASE}-slurmctld-0"
READY_TIMEOUT_S = 420.0
LOCAL_IMAGES = CHART_DIR / "ci" / "local-images-values.yaml"
Obj = dict[str, Any]


@dataclass(slots=True)
class Deployed:
    """The installed release on the real node, with what it took to get there."""

    node: RealNode
    kube: KubeCluster
    ns: str
    timings: dict[str, float] = field(default_factory=dict)

    def pods(self, **labels: str) -> list[Obj]:
        """The release's pods, optionally filtered by more labels."""
        sel = ",".join(
            [f"app.kubernetes.io/instance={RELEASE}", *(f"{k}={v}" for k, v in labels.items())]
        )
        path = f"/api/v1/namespaces/{self.ns}/pods"
        return list(self.kube.api.request("GET", path, params={"labelSelector": sel})["items"])

    def exec(self, pod: str, container: str, *argv: str, timeout_s: float = 60) -> str:
        """Run ``argv`` in a container through the apiserver and the kubelet (kubectl exec)."""
        out = self.kube.kubectl(
            "exec",
            f"--namespace={self.ns}",
            pod,
            "-c",
            container,
            "--",
            *argv,
            timeout_s=timeout_s,
        )
        return out.stdout

    def logs(self, pod: str, container: str) -> str:
        """A container's log through the apiserver (the kubelet serves it)."""
        path = f"/api/v1/namespaces/{self.ns}/pods/{pod}/log"
        return str(self.kube.api.request("GET", path, params={"container": container}))

    def diagnose(self) -> str:
        """Every pod's container states and each unready container's last log lines."""
        lines = []
        for pod in self.pods():
            name = pod["metadata"]["name"]
            status = pod.get("status", {})
            lines.append(f"pod {name}: {status.get('phase')}")
            for cond in status.get("conditions", []):
                if cond.get("status") != "True":
                    lines.append(
                        f"  {cond['type']}=False {cond.get('reason', '')} {cond.get('message', '')}"
                    )
            for cs in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
                lines.append(
                    f"  {cs['name']}: ready={cs.get('ready')} restarts={cs.get('restartCount')} "
                    f"state={json.dumps(cs.get('state'))[:300]} "
                    f"last={json.dumps(cs.get('lastState'))[:300]}"
                )
                if not cs.get("ready"):
                    try:
                        tail = self.logs(name, cs["name"]).splitlines()[-8:]
                    except Exception as exc:  # noqa: BLE001 - diagnostics only
                        tail = [f"(no log: {exc})"]
                    lines += [f"    | {ln[:300]}" for ln in tail]
        events = self.kube.kubectl(
            "get", "events", f"--namespace={self.ns}", "--sort-by=.lastTimestamp", check=False
        ).stdout.splitlines()[-25:]
        return "\n".join([*lines, "events:", *events])


def _ready(pod: Obj) -> bool:
    conds = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _local_volumes(node: RealNode, ns: str) -> list[str]:
    """``local`` PersistentVolumes on the node, pre-bound to the chart's two claims."""
    made: list[str] = []
    for claim, size in (
        (f"state-{RELEASE}-slurmctld-0", "1Gi"),
        (f"{RELEASE}-mosquitto-data", "1Gi"),
    ):
        name = f"pv-{ns}-{len(made)}"
        path = node.hostpath_dir / name
        path.mkdir(parents=True)
        node.cluster.api.request(
            "POST",
            "/api/v1/persistentvolumes",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": size},
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
                    "claimRef": {"namespace": ns, "name": claim},
                },
            },
        )
        made.append(name)
    return made


def _values(tmp: Path) -> Path:
    values = {
        "kubernetesService": {"host": API_HOST, "port": API_PORT},
        "pools": [
            {
                "name": POOL,
                "replicas": len(WORKERS),
                "gpus": 0,
                "cpus": os.cpu_count() or 1,
                "realMemoryMB": 1024,
            }
        ],
        # preStop drains, waits for jobs until grace - margin, then requeues.
        "workers": {"terminationGracePeriodSeconds": 40, "prestop": {"marginSeconds": 10}},
        "controller": {"persistence": {"size": "1Gi"}},
        "agent": {
            "health": {"nvidiaVisibleDevices": "", "checks": {"dcgm": False, "fabric": False}}
        },
    }
    path = tmp / "node-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.fixture(scope="module")
def deployed(session_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    """The chart installed once on a fresh real node; every pod Ready (or a diagnosis)."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    images = ensure_chart_images()
    timings["images_build_or_cache_s"] = time.monotonic() - t0
    tag = secrets.token_hex(3)
    kube = KubeCluster(session_root / f"crk-{tag}")
    node = RealNode(session_root / f"crn-{tag}", cluster=kube)
    try:
        kube.start()
        node.start()
        t0 = time.monotonic()
        imported = import_images(node, images)
        timings["image_import_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        assert import_images(node, images) == []  # by content key: nothing twice
        timings["image_import_again_s"] = time.monotonic() - t0
        assert len(imported) == len(images)
        ns = f"chart-{tag}"
        kube.create_namespace(ns)
        _local_volumes(node, ns)
        deployed = Deployed(node=node, kube=kube, ns=ns, timings=timings)
        tmp = tmp_path_factory.mktemp("chart-real")
        assert kube.tools is not None
        helm = Helm(binary=kube.tools.helm, home=tmp / "helm", kubeconfig=kube.kubeconfig)
        t0 = time.monotonic()
        helm.run(
            "install",
            RELEASE,
            str(CHART_DIR),
            f"--namespace={ns}",
            *value_args([LOCAL_IMAGES, _values(tmp)], image_values(images)),
        )

        def all_ready() -> bool:
            pods = deployed.pods()
            # slurmctld, 2 workers, login, 2 coordinators, mosquitto
            return len(pods) == 7 and all(_ready(p) for p in pods)

        try:
            wait_for(
                "every pod of the release Ready", all_ready, timeout_s=READY_TIMEOUT_S, interval_s=1
            )
        except HarnessError as exc:
            pytest.fail(f"{exc}\n{deployed.diagnose()}")
        timings["install_to_ready_s"] = time.monotonic() - t0
        print(f"\n[chart-real] timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
        yield deployed
    finally:
        try:
            node.stop()
        finally:
            kube.stop()


def test_slurmctld_runs_and_every_worker_is_slurmd_plus_agent_and_idle(deployed: Deployed) -> None:
    """slurmctld Running; each worker pod 2/2 (slurmd + agent sidecar); its node idle in sinfo."""
    ctl = deployed.pods(**{"app.kubernetes.io/component": "slurmctld"})
    assert [p["metadata"]["name"] for p in ctl] == [CONTROLLER]
    assert ctl[0]["status"]["phase"] == "Running"
    workers = deployed.pods(**{"app.kubernetes.io/component": "slurmd"})
    assert sorted(p["metadata"]["name"] for p in workers) == list(WORKERS)
    for pod in workers:
        states = {
            cs["name"]: cs
            for cs in pod["status"].get("initContainerStatuses", [])
            + pod["status"].get("containerStatuses", [])
        }
        assert set(states) == {"slonkd-agent", "slurmd"}, states.keys()
        assert all(cs["ready"] and "running" in cs["state"] for cs in states.values()), states
    seen: dict[str, str] = {}

    def idle() -> bool:
        out = deployed.exec(CONTROLLER, "slurmctld", "sinfo", "-h", "-N", "-o", "%N %T")
        seen.clear()
        seen.update(dict(line.split() for line in out.splitlines() if line.strip()))
        return all(seen.get(w) == "idle" for w in WORKERS)

    try:
        wait_for("every worker idle in sinfo", idle, timeout_s=90, interval_s=2)
    except HarnessError:
        pytest.fail(f"sinfo: {seen}\n{deployed.diagnose()}")


def test_one_coordinator_leads_through_the_lease_and_the_standby_is_ready(
    deployed: Deployed,
) -> None:
    """The chart's Lease names one of the two Ready coordinator pods as holder."""
    coords = deployed.pods(**{"app.kubernetes.io/component": "coordinator"})
    names = {p["metadata"]["name"] for p in coords}
    assert len(names) == 2
    assert all(_ready(p) for p in coords)
    lease = deployed.kube.api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{deployed.ns}/leases/{RELEASE}-coordinator"
    )
    assert lease["spec"]["holderIdentity"] in names, lease["spec"]


def test_every_agent_got_its_mqtt_credentials_from_the_coordinator(deployed: Deployed) -> None:
    """Each agent sidecar logged bus.bootstrap_done: /v1/credentials took its projected token."""
    for pod in WORKERS:

        def bootstrapped(pod: str = pod) -> list[Obj]:
            return [
                e
                for e in _json_lines(deployed.logs(pod, "slonkd-agent"))
                if e.get("event") == "bus.bootstrap_done"
            ]

        try:
            wait_for(f"{pod}'s agent bootstrapped", lambda: bool(bootstrapped()), timeout_s=60)
        except HarnessError:
            pytest.fail(
                f"{pod}: no bus.bootstrap_done\n"
                + "\n".join(deployed.logs(pod, "slonkd-agent").splitlines()[-20:])
            )
        done = bootstrapped()
        assert done[0]["cluster"] == "slonk"
        assert done[0]["username"]


def _json_lines(text: str) -> list[Obj]:
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def _job_state(deployed: Deployed, job: str) -> str:
    out = deployed.exec(CONTROLLER, "slurmctld", "scontrol", "-o", "show", "job", job)
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return f"{fields.get('JobState', '?')}:{fields.get('Reason', '')}:{fields.get('NodeList', '')}"


def test_deleting_a_worker_pod_requeues_its_job_through_the_kubelets_prestop(
    deployed: Deployed,
) -> None:
    """kubectl delete of a busy worker: the kubelet runs `slonkd prestop`, the job is requeued.

    Never FAILED, CANCELLED or NODE_FAIL; the StatefulSet's new pod comes back 2/2.
    """
    victim = WORKERS[0]
    out = deployed.exec(
        CONTROLLER,
        "slurmctld",
        "sbatch",
        "--requeue",
        "-w",
        victim,
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 600",
    )
    job = out.strip().split()[-1]
    wait_for(
        f"job {job} running",
        lambda: _job_state(deployed, job).startswith("RUNNING"),
        timeout_s=60,
        interval_s=1,
    )
    old_uid = next(p for p in deployed.pods() if p["metadata"]["name"] == victim)["metadata"]["uid"]
    deployed.kube.api.request("DELETE", f"/api/v1/namespaces/{deployed.ns}/pods/{victim}")
    states: list[str] = []
    reasons: list[str] = []

    def replaced() -> bool:
        state = _job_state(deployed, job)
        if not states or states[-1] != state:
            states.append(state)
        node = deployed.exec(CONTROLLER, "slurmctld", "sinfo", "-h", "-n", victim, "-o", "%T|%100E")
        if not reasons or reasons[-1] != node.strip():
            reasons.append(node.strip())
        pods = {p["metadata"]["name"]: p for p in deployed.pods()}
        new = pods.get(victim)
        return new is not None and new["metadata"]["uid"] != old_uid and _ready(new)

    try:
        wait_for(f"{victim} replaced and Ready", replaced, timeout_s=180, interval_s=1)
    except HarnessError:
        pytest.fail(f"job states {states}, node {reasons}\n{deployed.diagnose()}")
    bad = [s for s in states if s.split(":")[0] in ("FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT")]
    assert not bad, states
    assert any(s.startswith(("PENDING", "REQUEUED", "REQUEUE_HOLD")) for s in states), states
    # the kubelet ran the preStop: the node was drained with slonkd's reason
    assert any("slonkd:pod-terminating" in r for r in reasons), reasons

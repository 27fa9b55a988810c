"""The Helm chart installs on the real apiserver, runs on GPU nodes, upgrades and uninstalls.

kwok plays the kubelet of GPU-labelled fake nodes (capacity ``nvidia.com/gpu``), so these
tests prove the objects (scheduling, volumes, RBAC, PodDisruptionBudgets, OnDelete
rollouts), not the images: ``container/smoke.sh`` runs those. RBAC is checked with real
tokens of the chart's ServiceAccounts making the calls the agent and coordinator make.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd.core.coordinator_state import CoordinatorState
from slonkd_sandbox.chart.helm import CHART_DIR, Helm
from slonkd_sandbox.kube.api import ApiError, KubeApi
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import wait_for
from tests.cli import slonkd

pytestmark = pytest.mark.kube

GPU_CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
GPU_LABELS = {"nvidia.com/gpu.present": "true"}
NAMESPACED = (
    "/api/v1/namespaces/{ns}/pods",
    "/api/v1/namespaces/{ns}/services",
    "/api/v1/namespaces/{ns}/configmaps",
    "/api/v1/namespaces/{ns}/secrets",
    "/api/v1/namespaces/{ns}/serviceaccounts",
    "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "/apis/apps/v1/namespaces/{ns}/deployments",
    "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
)
CLUSTER_SCOPED = (
    "/apis/scheduling.k8s.io/v1/priorityclasses",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
)
NODE_EVENT_NAMESPACED = (
    "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
)
Obj = dict[str, Any]


@dataclass(slots=True)
class Install:
    """One namespace with GPU kwok nodes, pre-bound volumes and (once installed) a release."""

    kube: KubeCluster
    helm: Helm
    ns: str
    release: str
    tag: str
    values: Path
    nodes: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    job_outputs: list[str] = field(default_factory=list)
    """What each run of the secrets Job printed (created/kept per Secret)."""

    def helm_args(self, *more: str) -> list[str]:
        """Namespace and values for install/upgrade."""
        return [f"--namespace={self.ns}", f"--values={self.values}", *more]

    def install(self, *extra: str) -> None:
        """``helm install`` the chart (no --wait: the tests poll the objects themselves)."""
        self.with_secrets_job("install", self.release, str(CHART_DIR), *self.helm_args(*extra))

    def with_secrets_job(self, *helm_args: str) -> None:
        """Run helm, and play the kubelet for its pre-install/pre-upgrade secrets Job.

        kwok runs no container: the Job's pod is Running on a fake node, so its command (the
        container's args, ``slonkd secrets ensure``) runs here with a token of the Job's own
        ServiceAccount, while helm waits for the Job, before any other object of the release
        exists; then the pod is marked Succeeded (exit 0), the Job completes and helm goes on.
        """
        with ThreadPoolExecutor(max_workers=1) as pool:
            done = pool.submit(self.helm.run, *helm_args)
            self._run_secrets_job(done, installing=helm_args[0] == "install")
            done.result(timeout=300)

    def _run_secrets_job(self, helm_done: Future[Any], *, installing: bool) -> None:
        api, job = self.kube.api, f"{self.release}-secrets"
        pods = f"/api/v1/namespaces/{self.ns}/pods"
        sel = {"labelSelector": f"app.kubernetes.io/instance={self.release},"
               "app.kubernetes.io/component=secrets"}  # fmt: skip
        found: list[Obj] = []

        def running() -> bool:
            if helm_done.done():
                helm_done.result()  # helm failed: its error, not a timeout here
                raise AssertionError("helm finished before its secrets Job ran")
            items = api.request("GET", pods, params=sel)["items"]
            found[:] = [p for p in items if p.get("status", {}).get("phase") == "Running"]
            return bool(found)

        wait_for(f"{job} pod Running", running, timeout_s=120)
        pod = found[0]
        assert pod["spec"]["serviceAccountName"] == job
        if installing:
            assert not self.workloads(), "the secrets Job runs before any workload exists"
        (container,) = pod["spec"]["containers"]
        config = self.helm.home / f"kubeconfig-{job}-{self.tag}"
        token = self.kube.create_token(self.ns, job)
        config.write_text(self.kube.kubeconfig_for(token, user=job, namespace=self.ns))
        env = {**os.environ, "KUBECONFIG": str(config)}
        env.pop("POD_NAMESPACE", None)
        ran = slonkd(*container["args"], env=env)
        assert ran.returncode == 0, ran.stderr
        self.job_outputs.append(ran.stdout)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "phase": "Succeeded",
            "conditions": [
                {"type": t, "status": v, "lastTransitionTime": now}
                for t, v in (
                    ("PodScheduled", "True"),
                    ("Initialized", "True"),
                    ("ContainersReady", "False"),
                    ("Ready", "False"),
                )
            ],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
            ],
        }
        api.request(
            "PATCH",
            f"{pods}/{pod['metadata']['name']}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

    def workloads(self) -> list[Obj]:
        """The release's StatefulSets and Deployments."""
        sel = {"labelSelector": f"app.kubernetes.io/instance={self.release}"}
        api = self.kube.api
        return [
            *api.request("GET", f"/apis/apps/v1/namespaces/{self.ns}/statefulsets", params=sel)[
                "items"
            ],
            *api.request("GET", f"/apis/apps/v1/namespaces/{self.ns}/deployments", params=sel)[
                "items"
            ],
        ]

    def pods(self, **labels: str) -> list[Obj]:
        """The release's pods, optionally filtered by more labels."""
        sel = ",".join(
            [f"app.kubernetes.io/instance={self.release}", *(f"{k}={v}" for k, v in labels.items())]
        )
        path = f"/api/v1/namespaces/{self.ns}/pods"
        return list(self.kube.api.request("GET", path, params={"labelSelector": sel})["items"])

    def wait_all_running(self, expected: dict[str, int], timeout_s: float = 120.0) -> None:
        """Wait until each named workload has its replicas Ready and its pods Running."""

        def done() -> bool:
            ready = {
                w["metadata"]["name"]: int(w.get("status", {}).get("readyReplicas", 0))
                for w in self.workloads()
            }
            running = [p for p in self.pods() if p.get("status", {}).get("phase") == "Running"]
            return ready == expected and len(running) == sum(expected.values())

        wait_for(f"{self.release} in {self.ns}: {expected}", done, timeout_s=timeout_s)


def _setup(
    kube: KubeCluster,
    helm_home: Path,
    tag: str,
    *,
    release: str,
    pools: list[Obj],
    node_labels: tuple[dict[str, str], ...] = (GPU_LABELS, GPU_LABELS, GPU_LABELS),
    base_values: dict[str, Any] | None = None,
) -> Install:
    ns = f"chart-{tag}"
    kube.create_namespace(ns)
    here = {"slonk.dev/test": ns}
    values = {
        **(base_values or {}),
        "controller": {"nodeSelector": here, "persistence": {"deleteOnUninstall": True}},
        "coordinator": {"nodeSelector": here},
        "login": {"nodeSelector": here},
        "mosquitto": {"nodeSelector": here},
        "secretsJob": {"nodeSelector": here},
        "pools": [
            {**p, "nodeSelector": {**here, **p.get("nodeSelector", GPU_LABELS)}} for p in pools
        ],
    }
    values_file = helm_home / f"values-{tag}.yaml"
    values_file.write_text(yaml.safe_dump(values))
    assert kube.tools is not None
    inst = Install(
        kube=kube,
        helm=Helm(binary=kube.tools.helm, home=helm_home, kubeconfig=kube.kubeconfig),
        ns=ns,
        release=release,
        tag=tag,
        values=values_file,
    )
    for i, labels in enumerate(node_labels):
        inst.nodes += kube.add_fake_nodes(
            [f"gpu-{tag}-{i}"], labels={**here, **labels}, capacity=GPU_CAPACITY, wait_ready_s=None
        )
    kube.wait_nodes_ready(inst.nodes)
    # No provisioner here: PersistentVolumes pre-bound to the claims the chart makes.
    for claim, size in (
        (f"state-{release}-slurmctld-0", "8Gi"),
        (f"{release}-mosquitto-data", "1Gi"),
    ):
        pv = f"pv-{tag}-{len(inst.volumes)}"
        kube.api.request(
            "POST",
            "/api/v1/persistentvolumes",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv, "labels": {"slonk.dev/test": ns}},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    # kwok mounts nothing: the path is never used.
                    "hostPath": {"path": f"/var/lib/slonk-chart-test/{pv}"},
                    "claimRef": {"namespace": ns, "name": claim},
                },
            },
        )
        inst.volumes.append(pv)
    return inst


def _teardown(inst: Install) -> None:
    inst.helm.run("uninstall", inst.release, f"--namespace={inst.ns}", check=False)
    api = inst.kube.api
    api.request("DELETE", f"/api/v1/namespaces/{inst.ns}", ok=(200, 202, 404))
    for node in inst.nodes:
        api.request("DELETE", f"/api/v1/nodes/{node}", ok=(200, 202, 404))
    for pv in inst.volumes:
        api.request("DELETE", f"/api/v1/persistentvolumes/{pv}", ok=(200, 202, 404))


def _leftovers(inst: Install) -> list[str]:
    """Every object of the release still in its namespace or in the cluster scope."""
    api = inst.kube.api
    left = []
    for path in NAMESPACED:
        for item in api.request("GET", path.format(ns=inst.ns))["items"]:
            name = item["metadata"]["name"]
            labels = item["metadata"].get("labels") or {}
            if name.startswith(f"{inst.release}-") or (
                labels.get("app.kubernetes.io/instance") == inst.release
            ):
                left.append(f"{path.format(ns=inst.ns)}/{name}")
    prefix = f"{inst.ns}-{inst.release}-"
    for path in NODE_EVENT_NAMESPACED:  # the node Events Role and its binding in "default"
        left += [
            f"{path}/{i['metadata']['name']}"
            for i in api.request("GET", path)["items"]
            if i["metadata"]["name"].startswith(prefix)
        ]
    for path in CLUSTER_SCOPED:
        left += [
            f"{path}/{i['metadata']['name']}"
            for i in api.request("GET", path)["items"]
            if i["metadata"]["name"].startswith(prefix)
        ]
    return left


DEFAULT_POOL = {"name": "gpu", "replicas": 2, "gpus": 8, "cpus": 64, "realMemoryMB": 500000}
EXPECTED = {
    "slonk-slurmctld": 1,
    "slonk-gpu": 2,
    "slonk-login": 1,
    "slonk-coordinator": 2,
    "slonk-mosquitto": 1,
}


def _slonk(kube: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Install:
    """Release ``slonk`` of the default pool, set up in a fresh namespace on three GPU nodes."""
    return _setup(
        kube,
        tmp_path_factory.mktemp("helm"),
        secrets.token_hex(3),
        release="slonk",
        pools=[DEFAULT_POOL],
    )


@pytest.fixture(scope="module")
def installed(kube: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    """Release ``slonk`` installed in a fresh namespace on three GPU kwok nodes, all Running."""
    inst = _slonk(kube, tmp_path_factory)
    try:
        inst.install()
        inst.wait_all_running(EXPECTED)
        yield inst
    finally:
        _teardown(inst)


def test_install_runs_every_workload_on_gpu_nodes(installed: Install) -> None:
    """Every StatefulSet and Deployment gets its replicas Running; a worker takes a GPU node."""
    workloads = {w["metadata"]["name"]: w for w in installed.workloads()}
    assert {n: w["spec"]["replicas"] for n, w in workloads.items()} == EXPECTED
    workers = installed.pods(**{"app.kubernetes.io/component": "slurmd"})
    assert sorted(p["metadata"]["name"] for p in workers) == ["slonk-gpu-0", "slonk-gpu-1"]
    placed = [p["spec"]["nodeName"] for p in workers]
    assert len(set(placed)) == 2, "8 GPUs each: one worker per node"
    assert set(placed) <= set(installed.nodes)
    claims = installed.kube.api.request(
        "GET", f"/api/v1/namespaces/{installed.ns}/persistentvolumeclaims"
    )["items"]
    assert {c["metadata"]["name"]: c["status"]["phase"] for c in claims} == {
        "state-slonk-slurmctld-0": "Bound",
        "slonk-mosquitto-data": "Bound",
    }
    pdb = installed.kube.api.request(
        "GET", f"/apis/policy/v1/namespaces/{installed.ns}/poddisruptionbudgets/slonk-gpu"
    )
    wait_for(
        "worker PDB observed",
        lambda: (
            installed.kube.api.request(
                "GET", f"/apis/policy/v1/namespaces/{installed.ns}/poddisruptionbudgets/slonk-gpu"
            )
            .get("status", {})
            .get("currentHealthy")
            == 2
        ),
        timeout_s=30,
    )
    assert pdb["spec"]["maxUnavailable"] == 1


def test_worker_pods_run_the_agent_sidecar_with_prestop_and_low_priority(
    installed: Install,
) -> None:
    """Live worker pods: agent sidecar running, preStop on slurmd, training priority resolved."""
    api = installed.kube.api
    (pod,) = [p for p in installed.pods() if p["metadata"]["name"] == "slonk-gpu-0"]
    spec = pod["spec"]
    (agent,) = spec["initContainers"]
    assert (agent["name"], agent["restartPolicy"]) == ("slonkd-agent", "Always")
    (status,) = pod["status"]["initContainerStatuses"]
    assert "running" in status["state"]
    (slurmd,) = spec["containers"]
    assert slurmd["lifecycle"]["preStop"]["exec"]["command"][:2] == ["slonkd", "prestop"]
    assert spec["terminationGracePeriodSeconds"] == 600
    training = api.request(
        "GET", f"/apis/scheduling.k8s.io/v1/priorityclasses/{installed.ns}-slonk-training"
    )
    assert spec["priority"] == training["value"]
    ctld = next(p for p in installed.pods() if p["metadata"]["name"] == "slonk-slurmctld-0")
    assert ctld["spec"]["priority"] > training["value"]
    sources = {v["name"]: v for v in spec["volumes"]}["slonkd-token"]["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["audience"] == "slonkd"


def _as(kube: KubeCluster, token: str) -> KubeApi:
    return KubeApi(
        host="127.0.0.1", port=kube.ports["apiserver"], ca_file=kube.ca_file, token=token
    )


def _status(
    api: KubeApi,
    method: str,
    path: str,
    body: Obj | None = None,
    content_type: str = "application/json",
    params: dict[str, str] | None = None,
) -> int:
    """The HTTP status of one call (200 for any success)."""
    try:
        api.request(method, path, body, content_type=content_type, params=params)
    except ApiError as exc:
        return exc.status
    return 200


def test_rbac_lets_each_service_account_make_exactly_its_calls(installed: Install) -> None:
    """Real tokens of the chart's ServiceAccounts: allowed calls succeed, others get 403.

    The agent lists and watches its own pod and node and writes nothing (no Events either);
    the coordinator writes Events only in its namespace and the node event namespace
    ("default"), evicts pods but never deletes or reads one by name, replaces its ConfigMaps
    but never patches them.
    """
    kube, ns = installed.kube, installed.ns
    pod = next(p for p in installed.pods() if p["metadata"]["name"] == "slonk-gpu-0")
    node = pod["spec"]["nodeName"]
    agent = _as(kube, kube.create_token(ns, "slonk-agent"))
    coord = _as(kube, kube.create_token(ns, "slonk-coordinator"))
    pods = f"/api/v1/namespaces/{ns}/pods"
    merge = "application/merge-patch+json"
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "slonk-test-"},
        "involvedObject": {"kind": "Pod", "name": "slonk-gpu-0", "namespace": ns},
        "reason": "SlonkTest",
        "message": "rbac test",
        "type": "Normal",
    }

    # The agent lists (from the watch cache) and watches its pod and its node, and nothing else.
    for path, name in ((pods, "slonk-gpu-0"), ("/api/v1/nodes", node)):
        own = {"fieldSelector": f"metadata.name={name}"}
        assert _status(agent, "GET", path, params={**own, "resourceVersion": "0"}) == 200
        watch = {**own, "watch": "1", "timeoutSeconds": "1"}
        assert _status(agent, "GET", path, params=watch) == 200
    forbidden_to_agent: list[tuple[str, str, Obj | None]] = [
        ("GET", f"{pods}/slonk-gpu-0", None),
        ("GET", f"/api/v1/nodes/{node}", None),
        ("POST", f"/api/v1/namespaces/{ns}/events", event),
        ("POST", "/api/v1/namespaces/default/events", event),
        ("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}}),
        ("POST", f"{pods}/slonk-gpu-1/eviction", {"metadata": {"name": "slonk-gpu-1"}}),
        ("GET", f"/api/v1/namespaces/{ns}/secrets", None),
        ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {"spec": {"token": "x"}}),
        ("DELETE", f"{pods}/slonk-gpu-1", None),
    ]
    for method, path, body in forbidden_to_agent:
        assert _status(agent, method, path, body) == 403, path

    # The coordinator cordons and annotates Nodes, sets the SlurmHealthy condition, reviews an
    # agent's pod-bound token, holds its Lease and owns the topology ConfigMap.
    cordon = {"spec": {"unschedulable": True}, "metadata": {"annotations": {"slonk.dev/t": "1"}}}
    assert _status(coord, "PATCH", f"/api/v1/nodes/{node}", cordon, content_type=merge) == 200
    condition = {
        "status": {
            "conditions": [
                {"type": "SlurmHealthy", "status": "True", "reason": "SlonkTest", "message": "ok"}
            ]
        }
    }
    strategic = "application/strategic-merge-patch+json"
    status_path = f"/api/v1/nodes/{node}/status"
    assert _status(coord, "PATCH", status_path, condition, content_type=strategic) == 200
    bound = kube.create_token(
        ns,
        "slonk-agent",
        bound_pod=(pod["metadata"]["name"], pod["metadata"]["uid"]),
        audiences=["slonkd"],
    )
    review = coord.request(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": bound, "audiences": ["slonkd"]},
        },
    )
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == f"system:serviceaccount:{ns}:slonk-agent"
    assert review["status"]["user"]["extra"]["authentication.kubernetes.io/pod-name"] == [
        "slonk-gpu-0"
    ]
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    lease = {"metadata": {"name": "slonk-coordinator"}, "spec": {"holderIdentity": "a"}}
    coord.request("POST", leases, lease)
    current = coord.request("GET", f"{leases}/slonk-coordinator")
    current["spec"]["holderIdentity"] = "b"
    assert (
        coord.request("PUT", f"{leases}/slonk-coordinator", current)["spec"]["holderIdentity"]
        == "b"
    )
    cms = f"/api/v1/namespaces/{ns}/configmaps"
    coord.request(
        "POST", cms, {"metadata": {"name": "slonk-topology"}, "data": {"topology.conf": ""}}
    )
    topology = f"{cms}/slonk-topology"
    current_cm = coord.request("GET", topology)
    current_cm["data"] = {"topology.conf": "SwitchName=s0 Nodes=slonk-gpu-[0-1]\n"}
    assert _status(coord, "PUT", topology, current_cm) == 200
    patch = {"data": {"topology.conf": ""}}
    assert _status(coord, "PATCH", topology, patch, content_type=merge) == 403
    # the credential issuer's check that a token's pod is a worker pod
    one_pod = {"fieldSelector": "metadata.name=slonk-gpu-1"}
    assert _status(coord, "GET", pods, params=one_pod) == 200
    # rollouts list and watch the worker StatefulSets' updateRevision (never write them)
    assert _status(coord, "GET", f"/apis/apps/v1/namespaces/{ns}/statefulsets") == 200
    # Events on Nodes in the node event namespace, the breaker's on its ConfigMap in its own
    node_event = {
        **event,
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "metadata": {"generateName": "slonk-test-", "namespace": "default"},
    }
    made = coord.request("POST", "/api/v1/namespaces/default/events", node_event)
    kube.api.request("DELETE", f"/api/v1/namespaces/default/events/{made['metadata']['name']}")
    assert _status(coord, "POST", f"/api/v1/namespaces/{ns}/events", event) == 200
    elsewhere = {
        **node_event,
        "metadata": {"generateName": "slonk-test-", "namespace": "kube-system"},
    }
    forbidden_to_coordinator: list[tuple[str, str, Obj | None]] = [
        ("POST", "/api/v1/namespaces/kube-system/events", elsewhere),
        ("GET", f"{pods}/slonk-gpu-1", None),
        ("DELETE", f"{pods}/slonk-gpu-1", None),
        ("GET", f"/apis/apps/v1/namespaces/{ns}/statefulsets/slonk-gpu", None),
        ("GET", f"{cms}/slonk-slurm-config", None),
        ("GET", f"/api/v1/namespaces/{ns}/secrets/slonk-munge", None),
        ("DELETE", f"/api/v1/nodes/{node}", None),
        ("POST", pods, {"metadata": {"name": "x"}}),
        ("GET", f"{leases}/someone-else", None),
        ("DELETE", f"/apis/apps/v1/namespaces/{ns}/statefulsets/slonk-gpu", None),
    ]
    for method, path, body in forbidden_to_coordinator:
        assert _status(coord, method, path, body) == 403, path
    kube.kubectl("uncordon", node)
    # Eviction is the coordinator's (201 when the PDB allows, 429 when not; never 403).
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "slonk-gpu-1"}}
    evict = f"{pods}/slonk-gpu-1/eviction"
    assert _status(coord, "POST", evict, eviction) in (200, 429)
    installed.wait_all_running(EXPECTED)


def _live_json(inst: Install, configmap: str, key: str) -> Obj:
    path = f"/api/v1/namespaces/{inst.ns}/configmaps/{configmap}"
    doc: Obj = json.loads(inst.kube.api.request("GET", path)["data"][key])
    return doc


def test_live_settings_name_what_rbac_grants_and_notes_commands_work(installed: Install) -> None:
    """The installed configs name the objects RBAC grants; NOTES' operator commands run.

    The coordinator's state ConfigMap is the one its Role may write; the pause/unpause/budget
    reset lines of ``helm get notes`` (the operator's own kubeconfig) change it, and the
    coordinator's token reads the change; the status API's Service selects both replicas
    on the API port; each pool's agent ConfigMap is mounted by the live worker pods.
    """
    kube, ns, api = installed.kube, installed.ns, installed.kube.api
    config = _live_json(installed, "slonk-coordinator", "config.json")["coordinator"]
    state_name = config["state_name"]
    assert (config["lease_name"], state_name) == ("slonk-coordinator", "slonk-coordinator-state")
    coord = _as(kube, kube.create_token(ns, "slonk-coordinator"))
    cms = f"/api/v1/namespaces/{ns}/configmaps"
    assert _status(coord, "GET", f"{cms}/someone-elses-state") == 403

    notes = installed.helm.run("get", "notes", installed.release, f"--namespace={ns}").stdout
    commands = [
        shlex.split(line.strip())
        for line in notes.splitlines()
        if line.strip().startswith(("slonkd pause", "slonkd unpause", "slonkd budget reset"))
    ]
    assert [c[:2] for c in commands] == [
        ["slonkd", "pause"],
        ["slonkd", "unpause"],
        ["slonkd", "budget"],
    ]
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig)}
    env.pop("POD_NAMESPACE", None)
    seen = []
    for argv in commands:
        assert argv[argv.index("--namespace") + 1] == ns
        assert argv[argv.index("--state") + 1] == state_name
        proc = slonkd(*argv[1:], env=env)
        assert proc.returncode == 0, proc.stderr
        data = coord.request("GET", f"{cms}/{state_name}").get("data")
        seen.append(CoordinatorState.from_data(data).paused)
    assert seen == [True, False, False]

    # the status API: Service port -> both replicas' api port (a standby answers /readyz too),
    # and /metrics on its own port beside it (tests/unit/test_chart_metrics.py)
    svc = api.request("GET", f"/api/v1/namespaces/{ns}/services/slonk-coordinator")
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [
        ("api", config["api_port"]),
        ("metrics", config["metrics_port"]),
    ]

    def api_endpoints() -> bool:
        slices = api.request(
            "GET",
            f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
            params={"labelSelector": "kubernetes.io/service-name=slonk-coordinator"},
        )["items"]
        ready = [
            e
            for s in slices
            if config["api_port"] in [p["port"] for p in s.get("ports") or []]
            for e in s.get("endpoints") or []
            if e.get("conditions", {}).get("ready")
        ]
        return len(ready) == EXPECTED["slonk-coordinator"]

    wait_for("coordinator API endpoints", api_endpoints, timeout_s=60)

    agent = _live_json(installed, "slonk-gpu-agent", "agent.json")["agent"]
    assert agent["health"]["expected_gpus"] == DEFAULT_POOL["gpus"]
    for pod in installed.pods(**{"app.kubernetes.io/component": "slurmd"}):
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["agent-config"]["configMap"]["name"] == "slonk-gpu-agent"


def test_upgrade_keeps_workers_and_secrets_and_uninstall_leaves_nothing(
    kube: KubeCluster, installed: Install, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Upgrade adds a node but replaces no worker; uninstall removes every object it made.

    The same release name is installed in a second namespace beside the first: cluster-scoped
    objects do not collide. The upgrade keeps the munge key and broker password that the
    install's secrets Job made: the upgrade's Job runs again and keeps both. Uninstall leaves
    those Secrets alone (a reinstall finds them), and nothing else.
    """
    inst = _slonk(kube, tmp_path_factory)
    api = kube.api
    try:
        inst.install()
        inst.wait_all_running(EXPECTED)
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in inst.pods()}
        secret_path = f"/api/v1/namespaces/{inst.ns}/secrets"
        munge = api.request("GET", f"{secret_path}/slonk-munge")["data"]
        admin = api.request("GET", f"{secret_path}/slonk-mosquitto-admin")["data"]

        grown = {**DEFAULT_POOL, "replicas": 3}
        values = yaml.safe_load(inst.values.read_text())
        values["pools"][0] = {**values["pools"][0], **grown}
        inst.values.write_text(yaml.safe_dump(values))
        inst.with_secrets_job("upgrade", inst.release, str(CHART_DIR), *inst.helm_args())
        inst.wait_all_running({**EXPECTED, "slonk-gpu": 3})
        made, kept = inst.job_outputs
        for name in ("slonk-munge", "slonk-mosquitto-admin", "slonk-tls"):
            assert f"secret {inst.ns}/{name}: created " in made
            assert f"secret {inst.ns}/{name}: kept " in kept

        after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in inst.pods()}
        for name in ("slonk-gpu-0", "slonk-gpu-1"):
            assert after[name] == before[name], f"{name} was replaced: OnDelete must keep it"
        sts = api.request("GET", f"/apis/apps/v1/namespaces/{inst.ns}/statefulsets/slonk-gpu")
        assert sts["status"]["updateRevision"] != sts["status"]["currentRevision"]
        assert api.request("GET", f"{secret_path}/slonk-munge")["data"] == munge
        assert api.request("GET", f"{secret_path}/slonk-mosquitto-admin")["data"] == admin
        conf = api.request("GET", f"/api/v1/namespaces/{inst.ns}/configmaps/slonk-slurm-config")
        assert "NodeName=slonk-gpu-2 " in conf["data"]["slurm.conf"]
        assert "Nodes=slonk-gpu-[0-2]" in conf["data"]["slurm.conf"]

        node_events = f"{inst.ns}-slonk-node-events"
        assert f"{NODE_EVENT_NAMESPACED[0]}/{node_events}" in _leftovers(inst)
        inst.helm.run("uninstall", inst.release, f"--namespace={inst.ns}")
        made_once = {f"{secret_path}/slonk-{n}" for n in ("munge", "mosquitto-admin", "tls")}
        wait_for(
            f"nothing of {inst.release} left but the Secrets made once",
            lambda: set(_leftovers(inst)) == made_once,
            timeout_s=90,
        )
        # The first install, same release name in another namespace, is untouched.
        for tier in ("control", "serving", "training"):
            api.request(
                "GET", f"/apis/scheduling.k8s.io/v1/priorityclasses/{installed.ns}-slonk-{tier}"
            )
        api.request(
            "GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{installed.ns}-slonk-agent"
        )
        api.request("GET", f"{NODE_EVENT_NAMESPACED[0]}/{installed.ns}-slonk-node-events")
        assert len(installed.pods()) == sum(EXPECTED.values())
    finally:
        _teardown(inst)


OLD_SECRETS = (
    Path(__file__).resolve().parent.parent / "data" / "chart" / "secrets-before-issue-40.yaml"
)
"""templates/secrets.yaml as the chart had it before the secrets Job (issue 40 item 2)."""


def test_upgrade_from_a_chart_that_rendered_its_secrets_keeps_them(
    kube: KubeCluster, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The Secrets an older chart rendered (lookup, randBytes) survive the upgrade to this one.

    Helm deletes on upgrade what the new chart no longer renders; the pre-upgrade Job finds
    them first and adds only ``helm.sh/resource-policy: keep``: same data after the upgrade.
    """
    old_chart = tmp_path / "slonk-old"
    shutil.copytree(CHART_DIR, old_chart)
    shutil.copy(OLD_SECRETS, old_chart / "templates" / "secrets.yaml")
    inst = _slonk(kube, tmp_path_factory)
    api = kube.api
    secret_path = f"/api/v1/namespaces/{inst.ns}/secrets"
    try:
        inst.helm.run("install", inst.release, str(old_chart), *inst.helm_args())
        inst.wait_all_running(EXPECTED)
        names = ("slonk-munge", "slonk-mosquitto-admin")
        before = {n: api.request("GET", f"{secret_path}/{n}")["data"] for n in names}
        inst.with_secrets_job("upgrade", inst.release, str(CHART_DIR), *inst.helm_args())
        inst.wait_all_running(EXPECTED)
        (ran,) = inst.job_outputs
        for name in names:
            now = api.request("GET", f"{secret_path}/{name}", ok=(200, 404))
            assert now.get("data") == before[name], f"{name} lost in the upgrade"
            assert now["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
            assert now["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == (
                "Prune=false"
            )
            assert f"secret {inst.ns}/{name}: kept, released from Helm" in ran
    finally:
        _teardown(inst)  # the namespace, and the Secrets with it


BREAKING = {
    "no pools": ("pools=[]", "minItems"),
    "grace below margin": (
        'workers={"terminationGracePeriodSeconds":20,"prestop":{"marginSeconds":30}}',
        "terminationGracePeriodSeconds (20) must be longer than workers.prestop.marginSeconds (30)",
    ),
    "duplicate node names": (
        'pools=[{"name":"a","replicas":1,"gpus":1,"cpus":1,"realMemoryMB":1},'
        '{"name":"a","replicas":1,"gpus":1,"cpus":1,"realMemoryMB":1}]',
        'duplicate pool name "a"',
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKING))
def test_helm_install_refuses_values_that_break_a_rule(
    kube: KubeCluster, namespace: str, tmp_path: Path, case: str
) -> None:
    """``helm install`` fails with a clear message and creates nothing."""
    assert kube.tools is not None
    helm = Helm(binary=kube.tools.helm, home=tmp_path, kubeconfig=kube.kubeconfig)
    set_json, message = BREAKING[case]
    proc = helm.run(
        "install",
        "bad",
        str(CHART_DIR),
        f"--namespace={namespace}",
        f"--set-json={set_json}",
        check=False,
    )
    assert proc.returncode != 0
    assert message in proc.stderr
    assert not helm.run("list", f"--namespace={namespace}", "--short").stdout.strip()
    secrets_left = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/secrets")["items"]
    assert not [s for s in secrets_left if s["metadata"]["name"].startswith("bad-")]
    assert not [
        c
        for c in kube.api.request("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")["items"]
        if c["metadata"]["name"].startswith(f"{namespace}-bad-")
    ]


H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def test_multi_pool_values_install_and_run_every_pool(
    kube: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """ci/multi-pool-values.yaml installs: three pools (one on the host network) all Running."""
    ci = yaml.safe_load((CHART_DIR / "ci" / "multi-pool-values.yaml").read_text())
    pools = ci.pop("pools")
    pools[1]["nodeSelector"] = A100  # keep the a100 pool off the h100 nodes
    pools[2]["nodeSelector"] = {}
    inst = _setup(
        kube,
        tmp_path_factory.mktemp("helm"),
        secrets.token_hex(3),
        release="multi",
        pools=pools,
        node_labels=(H100, H100, H100, A100, A100, {}),
        base_values=ci,
    )
    try:
        inst.install()
        expected = {
            "multi-slurmctld": 1,
            "multi-h100": 3,
            "multi-a100": 2,
            "multi-cpu": 1,
            "multi-login": 1,
            "multi-coordinator": 2,
            "multi-mosquitto": 1,
        }
        inst.wait_all_running(expected)
        nodes = {n: i for i, n in enumerate(inst.nodes)}
        for pod in inst.pods(**{"app.kubernetes.io/component": "slurmd"}):
            pool = pod["metadata"]["labels"]["slonk.dev/pool"]
            where = nodes[pod["spec"]["nodeName"]]
            if pool == "h100":
                assert where in (0, 1, 2)
                assert pod["spec"]["hostNetwork"] is True
                assert pod["status"]["podIP"] == pod["status"]["hostIP"]
            if pool == "a100":
                assert where in (3, 4)
                assert pod["spec"]["terminationGracePeriodSeconds"] == 1800
        conf = kube.api.request(
            "GET", f"/api/v1/namespaces/{inst.ns}/configmaps/multi-slurm-config"
        )["data"]["slurm.conf"]
        declared = sorted(
            line.split()[0] for line in conf.splitlines() if line.startswith("NodeName=")
        )
        running = sorted(
            f"NodeName={p['metadata']['name']}"
            for p in inst.pods(**{"app.kubernetes.io/component": "slurmd"})
        )
        assert declared == running
        links = {
            pool: _live_json(inst, f"multi-{pool}-agent", "agent.json")["agent"]["health"][
                "nvlink_links"
            ]
            for pool in ("h100", "a100", "cpu")
        }
        assert links == {"h100": 18, "a100": 0, "cpu": 0}  # the h100 pool's override only
    finally:
        _teardown(inst)

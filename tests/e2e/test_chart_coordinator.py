"""The real coordinator runs on what the chart deploys: its config, its RBAC, its seed.

The chart's RBAC, PriorityClasses, worker StatefulSet and coordinator ConfigMap are applied
to the harness's apiserver (kwok runs the worker pods); SLURM starts from the chart's seed
topology.conf with nodes named like the worker pods. ``slonkd coordinator`` then runs as a
local process with the chart's ``config.json`` (only host paths and the port changed) and a
token of the chart's coordinator ServiceAccount: it must lead through the chart's Lease,
select the chart's workers, keep its budget and state in the ConfigMap its Role names,
replace the seed with the labels' topology (a stand-in copies the ConfigMap into slurmctld's
file, as a kubelet does), and see ``slonkd pause`` as printed by the chart's NOTES.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd.core.topology import leaf_membership
from slonkd_sandbox.chart.helm import CHART_DIR, Helm
from slonkd_sandbox.daemon import Coordinators, Daemon, coordinator_env
from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import free_ports, wait_for
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests.cli import slonkd

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

RELEASE = "rel"
NODES = ("rel-gpu-0", "rel-gpu-1")
ZONE, SPINE, LEAF = "topology.kubernetes.io/zone", "slonk.dev/spine", "slonk.dev/leaf"
SHOWN = ("templates/rbac.yaml", "templates/priorityclasses.yaml", "templates/workers.yaml")


class ConfigMapCopy(threading.Thread):
    """The kubelet's part: the coordinator's ConfigMap's topology.conf into slurmctld's file."""

    def __init__(self, kube: KubeCluster, path: str, target: Path) -> None:
        super().__init__(daemon=True)
        self.kube, self.path, self.target = kube, path, target
        self.stopped = threading.Event()

    def run(self) -> None:
        """Poll and copy a new content."""
        while not self.stopped.wait(0.3):
            try:
                text = (self.kube.api.request("GET", self.path).get("data") or {}).get(
                    "topology.conf", ""
                )
            except ApiError:
                continue
            if text and (not self.target.exists() or self.target.read_text() != text):
                self.target.write_text(text)


@dataclass(slots=True)
class Deployed:
    """The chart's objects, SLURM, and the running coordinator."""

    kube: KubeCluster
    ns: str
    slurm: SlurmCluster
    config: dict[str, Any]
    coordinator: Daemon
    url: str

    def get(self, path: str) -> tuple[int, Any]:
        """GET the coordinator's API."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:  # noqa: S310
                raw = response.read()
                return response.status, json.loads(raw) if path.startswith("/v1/") else raw
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            return 0, None

    def events(self, name: str) -> list[dict[str, Any]]:
        """The coordinator's log lines of one event."""
        return self.coordinator.events(name)


def _render(helm: Helm, ns: str, test_label: dict[str, str]) -> tuple[str, dict[str, Any]]:
    values = {
        "pools": [
            {
                "name": "gpu",
                "replicas": len(NODES),
                "gpus": 0,
                "cpus": 2,
                "realMemoryMB": 1000,
                "nodeSelector": test_label,
            }
        ],
        "coordinator": {"budget": {"maxOut": 1, "maxOutPercent": 50, "massPercent": 50}},
    }
    args = [f"--set-json={k}={json.dumps(v)}" for k, v in values.items()]
    manifests = helm.run(
        "template",
        RELEASE,
        str(CHART_DIR),
        f"--namespace={ns}",
        *args,
        *(f"--show-only={s}" for s in SHOWN),
    ).stdout
    rendered = helm.run(
        "template",
        RELEASE,
        str(CHART_DIR),
        f"--namespace={ns}",
        *args,
        "--show-only=templates/coordinator.yaml",
        "--show-only=templates/slurm-config.yaml",
    ).stdout
    objs = [d for d in yaml.safe_load_all(rendered) if d]
    cms = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "ConfigMap"}
    return manifests, {
        "coordinator": json.loads(cms[f"{RELEASE}-coordinator"]["config.json"])["coordinator"],
        "seed": cms[f"{RELEASE}-slurm-config"]["topology.conf"],
        "slurm.conf": cms[f"{RELEASE}-slurm-config"]["slurm.conf"],
    }


def _by_namespace(manifests: str) -> tuple[str, str]:
    """The release namespace's objects, and those naming their own namespace (node Events RBAC)."""
    docs = [d for d in yaml.safe_load_all(manifests) if d]
    there = [d for d in docs if d["metadata"].get("namespace")]
    here = [d for d in docs if not d["metadata"].get("namespace")]
    return yaml.safe_dump_all(here), yaml.safe_dump_all(there)


@pytest.fixture
def deployed(
    kube: KubeCluster,
    namespace: str,
    session_root: Path,
    tmp_path: Path,
    coordinators: Coordinators,
) -> Iterator[Deployed]:
    """The chart's objects applied, SLURM from the seed, the coordinator running."""
    assert kube.tools is not None
    helm = Helm(binary=kube.tools.helm, home=tmp_path / "helm")
    test_label = {"slonk.dev/test": namespace}
    manifests, files = _render(helm, namespace, test_label)
    assert "TopologyPlugin=topology/tree" in files["slurm.conf"]
    nodes = [
        kube.add_fake_nodes(
            [f"{namespace}-k{i}"], labels={**test_label, ZONE: "z", SPINE: "s", LEAF: f"l{i}"}
        )[0]
        for i in range(2)
    ]
    here, there = _by_namespace(manifests)
    kube.kubectl("apply", f"--namespace={namespace}", "-f", "-", stdin=here)
    kube.kubectl("apply", "-f", "-", stdin=there)
    root = Path(tempfile.mkdtemp(prefix="slurm-", dir=session_root))
    slurm = SlurmCluster(root, SlurmLayout(nodes=NODES, topology_plugin="topology/tree"))
    (root / "etc").mkdir(parents=True)
    slurm.topology_conf.write_text(files["seed"])
    copier: ConfigMapCopy | None = None
    try:
        slurm.start()
        slurm.wait_idle(NODES)
        config = dict(files["coordinator"])
        port = free_ports(1)[0]
        # host-only changes, and a short resync: the leader reads the state ConfigMap (an
        # operator's pause) once per pass, and without SLURM or K8s events that is resync_s
        host_only = {"api_port": port, "api_host": "127.0.0.1", "resync_s": 2}
        config.update(host_only, audit_path=str(tmp_path / "audit.jsonl"))
        config["topology"] = {**config["topology"], "slurmctld_copy": str(slurm.topology_conf)}
        (tmp_path / "config.json").write_text(json.dumps({"coordinator": config}))
        token = kube.create_token(namespace, f"{RELEASE}-coordinator")
        kubeconfig = tmp_path / "coordinator.kubeconfig"
        kubeconfig.write_text(kube.kubeconfig_for(token, user="coordinator", namespace=namespace))
        cm = f"/api/v1/namespaces/{namespace}/configmaps/{config['topology']['configmap']}"
        copier = ConfigMapCopy(kube, cm, slurm.topology_conf)
        copier.start()
        env = coordinator_env(namespace=namespace, kubeconfig=kubeconfig, slurm_conf=slurm.conf)
        for key in [k for k in env if k.startswith("SLONKD_MQTT")]:
            del env[key]
        coordinator = coordinators.start(  # the chart's coordinator leads, synced
            env, identity="coordinator-a", config=tmp_path / "config.json", timeout_s=60
        )
        d = Deployed(kube, namespace, slurm, config, coordinator, f"http://127.0.0.1:{port}")
        wait_for(  # its status answers once a first pass is done
            "the chart's coordinator's first pass",
            lambda: d.get("/v1/status")[0] == 200,
            timeout_s=60,
            alive=coordinator.exited,
        )
        yield d
    finally:
        coordinators.stop()
        if copier is not None:
            copier.stopped.set()
            copier.join(timeout=5)
        slurm.stop()
        kube.kubectl(
            "delete",
            f"--namespace={namespace}",
            "--ignore-not-found",
            "--wait=false",
            "-f",
            "-",
            stdin=here,
        )
        kube.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=there)
        for node in nodes:
            kube.api.request("DELETE", f"/api/v1/nodes/{node}", ok=(200, 202, 404))


def test_the_chart_config_runs_the_real_coordinator(deployed: Deployed) -> None:
    """Lease, workers, budget, state and topology all work with the chart's names and RBAC."""
    d, api = deployed, deployed.kube.api
    code, status = d.get("/v1/status")
    assert code == 200
    assert d.get("/readyz")[0] == 200
    code, metrics = d.get("/metrics")  # where the chart's scrape annotation points
    assert code == 200
    assert b"slonkd_paused" in metrics
    assert sorted(row["node"] for row in status["nodes"]) == list(NODES)
    assert [(b["pool"], b["size"], b["limit"]) for b in status["budget"]] == [("gpu", 2, 1)]
    lease = api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{d.ns}/leases/{d.config['lease_name']}"
    )
    assert lease["spec"]["holderIdentity"] == "coordinator-a"

    # the seed is replaced by the labels' leaves once the copy carries the new hash
    wait_for(
        "topology from labels",
        lambda: bool(d.events("topology.reconfigured")),
        timeout_s=60,
    )
    shown = leaf_membership(d.slurm.run("scontrol", "show", "topology").stdout)
    assert set(shown) == set(NODES)
    assert "sw-unlabelled" not in shown.values()
    pods = api.request("GET", f"/api/v1/namespaces/{d.ns}/pods")["items"]
    placed = {
        p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["metadata"]["name"] in NODES
    }
    same_node = placed[NODES[0]] == placed[NODES[1]]
    assert (shown[NODES[0]] == shown[NODES[1]]) == same_node  # the leaf follows the K8s node

    # NOTES' pause, with the operator's (admin) kubeconfig, reaches the coordinator
    state = d.config["state_name"]
    env = {**os.environ, "KUBECONFIG": str(d.kube.kubeconfig)}
    argv = ["pause", "--namespace", d.ns, "--state", state, "--reason", "e2e"]
    proc = slonkd(*argv, env=env)
    assert proc.returncode == 0, proc.stderr
    wait_for(
        "coordinator sees the pause",
        lambda: d.get("/v1/status")[1]["state"].get("paused") is True,
        timeout_s=30,
    )
    # an HTTP 403 anywhere in a log line but its timestamp (whose digits can read "403")
    forbidden = [
        e
        for e in d.coordinator.events()
        if re.search(
            r"(?<![\d.])403(?![\d.])", json.dumps({k: v for k, v in e.items() if k != "timestamp"})
        )
    ]
    assert not forbidden, forbidden[:3]

"""The Kubernetes harness is real: scheduler, cordon, eviction, tokens and compaction work."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from slonkd_sandbox import versions
from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.workloads import worker_statefulset
from tests.contract.kube_helpers import allow_one_disruption, pods_of, two_workers_under_a_pdb

pytestmark = pytest.mark.kube


def _running(pod: dict[str, Any]) -> bool:
    return bool(pod.get("status", {}).get("phase") == "Running")


def _create_sts(kube: KubeCluster, ns: str, body: dict[str, Any]) -> None:
    kube.api.request("POST", f"/apis/apps/v1/namespaces/{ns}/statefulsets", body)


def test_statefulset_pods_are_scheduled_onto_kwok_nodes_and_run(
    kube: KubeCluster, namespace: str, unique: Callable[[str], str]
) -> None:
    """The real scheduler binds a StatefulSet's pods to kwok nodes, and kwok runs them."""
    label = {"slonk.dev/test": namespace}
    nodes = kube.add_fake_nodes([unique("sched-a"), unique("sched-b")], labels=label)
    _create_sts(
        kube, namespace, worker_statefulset("w", replicas=2, node_selector=label, standin=False)
    )

    def both_running() -> bool:
        pods = pods_of(kube, namespace)
        return len(pods) == 2 and all(_running(p) for p in pods)

    wait_for("2 pods Running", both_running, timeout_s=60)
    placed = {p["spec"]["nodeName"] for p in pods_of(kube, namespace)}
    assert placed <= set(nodes)
    assert all(p["status"].get("podIP") for p in pods_of(kube, namespace))


def test_cordoned_node_gets_no_new_pod(
    kube: KubeCluster, namespace: str, unique: Callable[[str], str]
) -> None:
    """A pod whose only eligible node is cordoned stays Pending; uncordon lets it run."""
    label = {"slonk.dev/test": namespace}
    (node,) = kube.add_fake_nodes([unique("cordoned")], labels=label)
    kube.kubectl("cordon", node)
    _create_sts(
        kube, namespace, worker_statefulset("w", replicas=1, node_selector=label, standin=False)
    )

    def unschedulable() -> bool:
        pods = pods_of(kube, namespace)
        conds = pods[0].get("status", {}).get("conditions", []) if pods else []
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds
        )

    wait_for("pod reported Unschedulable", unschedulable, timeout_s=60)
    time.sleep(1.0)
    (pod,) = pods_of(kube, namespace)
    assert not pod["spec"].get("nodeName")
    kube.kubectl("uncordon", node)
    wait_for(
        "pod Running after uncordon", lambda: _running(pods_of(kube, namespace)[0]), timeout_s=60
    )
    assert pods_of(kube, namespace)[0]["spec"]["nodeName"] == node


def _evict(kube: KubeCluster, ns: str, pod: str) -> int:
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": ns},
    }
    try:
        kube.api.request("POST", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", body)
    except ApiError as exc:
        return exc.status
    return 201


def test_eviction_is_refused_by_a_pdb_then_allowed(
    kube: KubeCluster, namespace: str, unique: Callable[[str], str]
) -> None:
    """The Eviction API answers 429 while a PodDisruptionBudget forbids it, 201 once it allows."""
    pdb = two_workers_under_a_pdb(kube, namespace, [unique("evict-a"), unique("evict-b")])
    assert _evict(kube, namespace, "w-0") == 429
    allow_one_disruption(kube, pdb)
    assert _evict(kube, namespace, "w-0") == 201


def test_pod_bound_token_reviews_to_its_pod(
    kube: KubeCluster, namespace: str, unique: Callable[[str], str]
) -> None:
    """A TokenRequest bound to a pod yields a token that TokenReview maps back to that pod."""
    label = {"slonk.dev/test": namespace}
    kube.add_fake_nodes([unique("tok")], labels=label)
    _create_sts(
        kube, namespace, worker_statefulset("w", replicas=1, node_selector=label, standin=False)
    )
    wait_for("pod exists", lambda: len(pods_of(kube, namespace)) == 1, timeout_s=30)
    pod = pods_of(kube, namespace)[0]
    token = kube.create_token(
        namespace, "default", bound_pod=(pod["metadata"]["name"], pod["metadata"]["uid"])
    )
    review = kube.api.request(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
    )
    status = review["status"]
    assert status["authenticated"] is True
    assert status["user"]["username"] == f"system:serviceaccount:{namespace}:default"
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["w-0"]
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    review = kube.api.request(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": forged},
        },
    )
    assert not review["status"].get("authenticated")


def test_compaction_while_the_apiserver_is_down_gives_410_on_resume(
    kube: KubeCluster, namespace: str
) -> None:
    """A watch resumed at a resourceVersion compacted away while the apiserver was down: 410."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    old_rv = kube.api.request("GET", path)["metadata"]["resourceVersion"]
    for i in range(3):
        kube.api.request("POST", path, {"metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}})
    kube.kill_apiserver()
    assert kube.compact_etcd() > int(old_rv)
    kube.start_apiserver()
    events = list(kube.api.watch(path, params={"resourceVersion": old_rv, "timeoutSeconds": "5"}))
    assert events, "the watch must answer with an ERROR event"
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    # A fresh list still works: the harness is whole again.
    assert len(kube.api.request("GET", path)["items"]) == 3 + 1  # + kube-root-ca.crt


def test_an_exited_scheduler_is_started_again_and_pods_are_scheduled(
    kube: KubeCluster, namespace: str, unique: Callable[[str], str]
) -> None:
    """revive() restarts a kube-scheduler that exited (as a kubelet its static pod), only then.

    kube-scheduler exits by design on a corrupted cache (the soak's apiserver restart with a
    compaction provokes it); without the restart a new pod stays Pending for ever.
    """
    assert kube.revive() == [], "nothing exited: nothing to restart"
    old = kube.pids()["scheduler"]
    os.kill(old, signal.SIGKILL)
    wait_for("the scheduler gone", lambda: "scheduler" not in kube.pids(), timeout_s=10)
    label = {"slonk.dev/test": namespace}
    kube.add_fake_nodes([unique("revive")], labels=label)
    _create_sts(
        kube, namespace, worker_statefulset("w", replicas=1, node_selector=label, standin=False)
    )
    time.sleep(2)
    assert not any(p["spec"].get("nodeName") for p in pods_of(kube, namespace)), "no scheduler"
    assert kube.revive() == ["scheduler"]
    assert kube.pids()["scheduler"] != old

    def running() -> bool:
        pods = pods_of(kube, namespace)
        return len(pods) == 1 and _running(pods[0])

    wait_for("the pod scheduled and Running", running, timeout_s=60)


def test_kubectl_and_helm_are_the_pinned_versions(kube: KubeCluster) -> None:
    """kubectl talks to the server, both report the pinned versions, and helm runs."""
    out = kube.kubectl("version", "-o", "json").stdout
    assert f'"gitVersion": "v{versions.KUBERNETES}"' in out
    assert out.count(f"v{versions.KUBERNETES}") >= 2  # client and server
    assert kube.tools is not None
    helm = subprocess.run(
        [str(kube.tools.helm), "version", "--short"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert helm.stdout.startswith(f"v{versions.HELM}")

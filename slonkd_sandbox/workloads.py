"""Manifests the harness and the sandbox create: worker StatefulSets bound to slurmd.

Plain dicts (the apiserver's JSON), built by small functions so that tests, the sandbox and
benchmarks describe the same workers the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from slonkd.core.kube_objects import WORKER_LABELS
from slonkd_sandbox.kube.kwok import KWOK_ANNOTATION, STANDIN_LABEL

WORKER_IMAGE = "slonk/slurm:dev"
"""Never pulled: kwok nodes run no containers."""


GATED_PRESTOP = [
    sys.executable,
    "-c",
    "import os, pathlib, time\n"
    "g = pathlib.Path(os.environ['GATE_DIR']) / 'open'\n"
    "while not g.exists():\n    time.sleep(0.05)\n",
]
"""A preStop that waits until ``$GATE_DIR/open`` exists: the pod stays Terminating until then."""


def prestop_command(grace_s: float, margin_s: float, *, poll_s: float = 0.5) -> list[str]:
    """A worker's preStop hook: this interpreter's ``slonkd prestop`` with its grace and margin."""
    return [
        sys.executable,
        "-m",
        "slonkd.cli.main",
        "prestop",
        "--grace",
        str(grace_s),
        "--margin",
        str(margin_s),
        "--poll",
        str(poll_s),
    ]


def bound_worker_pod(name: str, node: str) -> dict[str, Any]:
    """A worker pod created with ``nodeName`` (no scheduler, no StatefulSet), on kwok node ``node``.

    For fleets too large for a StatefulSet's ordered start (the benchmarks' 5,000): labelled
    as a worker, as the StatefulSet's pods are, so the coordinator takes it for one.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {**WORKER_LABELS, "slonk.dev/pool": "worker"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "slurmd", "image": WORKER_IMAGE}],
            "tolerations": [{"key": KWOK_ANNOTATION, "operator": "Exists"}],
            "automountServiceAccountToken": False,
        },
    }


def worker_statefulset(
    name: str,
    *,
    replicas: int,
    prestop: Sequence[str] | None = None,
    grace_s: int = 30,
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    priority_class: str | None = None,
    standin: bool = True,
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A slurmd worker StatefulSet whose pods the kubelet stand-in binds to slurmd.

    Pod ``<name>-<i>`` is bound to SLURM node ``<name>-<i>`` unless bindings say otherwise.
    With ``standin=False`` the pods are plain kwok pods: a deletion completes at once.
    ``tolerations`` are added to the kwok node's (a pool's own, e.g. a GPU pool's taint).
    """
    pod_labels = {**WORKER_LABELS, "slonk.dev/pool": name, **(labels or {})}
    if standin:
        pod_labels[STANDIN_LABEL] = "standin"
    container: dict[str, Any] = {
        "name": "slurmd",
        "image": WORKER_IMAGE,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            *({"name": k, "value": v} for k, v in (env or {}).items()),
        ],
    }
    if prestop:
        container["lifecycle"] = {"preStop": {"exec": {"command": list(prestop)}}}
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace_s,
        "containers": [container],
        "tolerations": [
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
            *(dict(t) for t in tolerations),
        ],
        "nodeSelector": {"type": "kwok", **(node_selector or {})},
        "automountServiceAccountToken": False,
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": {"slonk.dev/pool": name}},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"slonk.dev/pool": name}},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }


def spread_over_nodes(
    sts: dict[str, Any],
    *,
    when: str = "DoNotSchedule",
    honor_taints: bool = False,
    match: Mapping[str, str] | None = None,
) -> None:
    """Spread the pods of ``sts`` over K8s nodes: at most one more on a node than on another.

    ``when`` is the constraint's ``whenUnsatisfiable`` (``"ScheduleAnyway"`` lets a cordon
    or a full node double pods up); ``honor_taints`` counts only nodes whose taints the pods
    tolerate; ``match`` selects the pods counted together (the StatefulSet's pool unless
    told otherwise).
    """
    constraint: dict[str, Any] = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": when,
        "labelSelector": {
            "matchLabels": dict(match or {"slonk.dev/pool": sts["metadata"]["name"]})
        },
    }
    if honor_taints:
        constraint["nodeTaintsPolicy"] = "Honor"
    sts["spec"]["template"]["spec"]["topologySpreadConstraints"] = [constraint]


def pod_disruption_budget(
    name: str, *, selector: Mapping[str, str], min_available: int
) -> dict[str, Any]:
    """A PodDisruptionBudget over pods matching ``selector``."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(selector)}},
    }

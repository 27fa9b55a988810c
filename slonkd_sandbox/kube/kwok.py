"""kwok's fake nodes: the process that plays their kubelets, and the Node objects it manages.

Fake nodes are plain Node objects with the annotation ``kwok.x-k8s.io/node: fake``
(:func:`fake_node_body`). kwok's stages (``slonkd_sandbox/stages/*.yaml``) make their pods
Running and Ready at once; a deleted pod vanishes at once too, unless it carries the label
``slonk.dev/kubelet: standin`` (:data:`STANDIN_LABEL`; see :mod:`slonkd_sandbox.kube.kubelet`).

Neighbours: :mod:`slonkd_sandbox.kube.cluster` (starts kwok with :func:`kwok_argv` after the control
plane), :mod:`slonkd_sandbox.kube.components` (the control plane's other processes),
:mod:`slonkd_sandbox.workloads` (labels pods for the stand-in).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from slonkd_sandbox.toolchain import Tools

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
STANDIN_LABEL = "slonk.dev/kubelet"


def write_stages(path: Path) -> Path:
    """Write kwok's stage file (every packaged stage, in name order) to ``path``."""
    docs = []
    stage_dir = resources.files("slonkd_sandbox").joinpath("stages")
    for res in sorted(stage_dir.iterdir(), key=lambda r: r.name):
        if res.name.endswith(".yaml"):
            docs.append(res.read_text())
    path.write_text("\n---\n".join(docs))
    return path


def kwok_argv(
    tools: Tools, *, kubeconfig: Path, stages: Path, ports: Mapping[str, int]
) -> list[str]:
    """kwok managing only the annotated nodes, serving on ``ports['kwok_server']``."""
    return [
        str(tools.kwok),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
        "--node-ip=127.0.0.1",
        f"--node-port={ports['kwok_node']}",
        f"--server-address=127.0.0.1:{ports['kwok_server']}",
        "--node-lease-duration-seconds=40",
        "--v=INFO",
    ]


def fake_node_body(
    name: str, *, labels: Mapping[str, str] | None = None, capacity: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Node object that kwok manages (annotation ``kwok.x-k8s.io/node: fake``)."""
    cap = dict(capacity or {"cpu": "32", "memory": "256Gi", "pods": "110"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {"capacity": cap, "allocatable": cap},
    }


__all__ = ["KWOK_ANNOTATION", "STANDIN_LABEL", "fake_node_body", "kwok_argv", "write_stages"]

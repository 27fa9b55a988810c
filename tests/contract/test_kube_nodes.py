"""Node changes against the real apiserver: cordon ownership, taint races, the condition."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from slonkd.adapters.kube.nodes import NodeWriter
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import TerminalError
from slonkd.core.kube_changes import ChangeOutcome
from slonkd.core.kube_objects import CORDONED_BY_ANNOTATION, SLURM_HEALTHY, TaintEffect
from slonkd.testing.kube import KubeCluster
from slonkd.testing.kubeapi import ApiError

pytestmark = pytest.mark.kube


@pytest.fixture
def node(kube: KubeCluster, unique: Callable[[str], str]) -> Iterator[str]:
    """A fresh kwok node (kwok and the node controllers keep writing to it meanwhile)."""
    (name,) = kube.add_fake_nodes([unique("wr")], wait_ready_s=None)
    yield name
    kube.api.request("DELETE", f"/api/v1/nodes/{name}", ok=(200, 404))


def _get(kube: KubeCluster, name: str) -> dict[str, Any]:
    node: dict[str, Any] = kube.api.request("GET", f"/api/v1/nodes/{name}")
    return node


def _unschedulable(kube: KubeCluster, name: str) -> bool:
    return bool(_get(kube, name)["spec"].get("unschedulable"))


async def test_cordon_by_someone_else_is_never_undone(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """An admin's cordon is reported FOREIGN and survives slonkd's cordon and uncordon."""
    writer = NodeWriter(kube_transport)
    kube.kubectl("cordon", node)
    assert (await writer.cordon(node, cause="health")).outcome is ChangeOutcome.FOREIGN
    assert (await writer.uncordon(node)).outcome is ChangeOutcome.FOREIGN
    assert _unschedulable(kube, node)
    assert CORDONED_BY_ANNOTATION not in (_get(kube, node)["metadata"].get("annotations") or {})


async def test_slonkd_cordon_is_marked_idempotent_and_undone(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """slonkd's cordon carries its mark, a second cordon changes nothing, uncordon lifts it."""
    writer = NodeWriter(kube_transport)
    assert (await writer.cordon(node, cause="health")).outcome is ChangeOutcome.CHANGED
    assert _get(kube, node)["metadata"]["annotations"][CORDONED_BY_ANNOTATION] == "health"
    assert (await writer.cordon(node, cause="health")).outcome is ChangeOutcome.UNCHANGED
    assert (await writer.uncordon(node)).outcome is ChangeOutcome.CHANGED
    assert not _unschedulable(kube, node)
    assert CORDONED_BY_ANNOTATION not in (_get(kube, node)["metadata"].get("annotations") or {})
    assert (await writer.uncordon(node)).outcome is ChangeOutcome.UNCHANGED


async def test_recordon_by_admin_after_slonkd_cordon_stays(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """slonkd cordons, an admin uncordons and re-cordons: slonkd's uncordon leaves it cordoned."""
    writer = NodeWriter(kube_transport)
    assert (await writer.cordon(node, cause="health")).outcome is ChangeOutcome.CHANGED
    kube.kubectl("uncordon", node)
    kube.kubectl("cordon", node)
    result = await writer.uncordon(node)
    assert result.outcome is ChangeOutcome.FOREIGN
    assert _unschedulable(kube, node)
    assert CORDONED_BY_ANNOTATION not in (_get(kube, node)["metadata"].get("annotations") or {})


def _other_controller_adds(kube: KubeCluster, node: str, key: str) -> int:
    """Another well-behaved controller: read-modify-write with a resourceVersion precondition."""
    conflicts = 0
    while True:
        current = _get(kube, node)
        taints = [*(current["spec"].get("taints") or []), {"key": key, "effect": "NoSchedule"}]
        patch = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"taints": taints},
        }
        try:
            kube.api.request(
                "PATCH",
                f"/api/v1/nodes/{node}",
                patch,
                content_type="application/merge-patch+json",
            )
            return conflicts
        except ApiError as exc:
            if exc.status != 409:
                raise
            conflicts += 1


async def test_others_taints_added_concurrently_survive(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """slonkd toggles its taints while another controller adds taints: none of those is lost."""
    writer = NodeWriter(kube_transport)
    others = [f"example.com/t{i}" for i in range(8)]

    async def slonkd_side() -> None:
        for i in range(8):
            await writer.set_taint(node, "slonk.dev/a", TaintEffect.NO_SCHEDULE, value=str(i))
            await writer.set_taint(node, "slonk.dev/b", TaintEffect.NO_EXECUTE)
            await writer.remove_taint(node, "slonk.dev/b")

    other_conflicts: list[int] = []

    async def other_side() -> None:
        for key in others:
            other_conflicts.append(await asyncio.to_thread(_other_controller_adds, kube, node, key))

    await asyncio.gather(slonkd_side(), other_side())
    assert writer.conflicts + sum(other_conflicts) > 0, "no race happened: nothing was tested"
    taints = {(t["key"], t.get("value", "")) for t in _get(kube, node)["spec"].get("taints", [])}
    assert {k for k, _ in taints} >= set(others)
    assert ("slonk.dev/a", "7") in taints
    assert not any(k == "slonk.dev/b" for k, _ in taints)
    assert (
        await writer.set_taint(node, "slonk.dev/a", TaintEffect.NO_SCHEDULE, value="7")
    ).outcome is ChangeOutcome.UNCHANGED
    with pytest.raises(TerminalError):
        await writer.remove_taint(node, "example.com/t0")


async def test_slurm_healthy_condition_keeps_other_conditions(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """SlurmHealthy is set on the status; another writer's condition stays; repeats are no-ops."""
    writer = NodeWriter(kube_transport)
    other = {"type": "GpuHealthy", "status": "True", "reason": "Fine", "message": "ok"}
    kube.api.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {"status": {"conditions": [other]}},
        content_type="application/strategic-merge-patch+json",
    )
    first = await writer.set_slurm_healthy(node, healthy=False, reason="SlurmDown", message="x")
    assert first.outcome is ChangeOutcome.CHANGED
    again = await writer.set_slurm_healthy(node, healthy=False, reason="SlurmDown", message="x")
    assert again.outcome is ChangeOutcome.UNCHANGED
    conds = {c["type"]: c for c in _get(kube, node)["status"]["conditions"]}
    assert conds[SLURM_HEALTHY]["status"] == "False"
    assert conds["GpuHealthy"]["status"] == "True"
    await writer.set_slurm_healthy(node, healthy=True, reason="SlurmUp")
    conds = {c["type"]: c for c in _get(kube, node)["status"]["conditions"]}
    assert conds[SLURM_HEALTHY]["status"] == "True"
    assert conds["GpuHealthy"]["status"] == "True"


async def test_labels_and_annotations_only_under_slonk_prefix(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """slonkd sets and removes its own labels and annotations and refuses foreign keys."""
    writer = NodeWriter(kube_transport)
    assert (await writer.set_labels(node, {"slonk.dev/pool": "a"})).outcome is ChangeOutcome.CHANGED
    assert (
        await writer.set_labels(node, {"slonk.dev/pool": "a"})
    ).outcome is ChangeOutcome.UNCHANGED
    await writer.set_annotations(node, {"slonk.dev/remediation": "reboot"})
    meta = _get(kube, node)["metadata"]
    assert meta["labels"]["slonk.dev/pool"] == "a"
    assert meta["annotations"]["slonk.dev/remediation"] == "reboot"
    await writer.set_labels(node, {"slonk.dev/pool": None})
    assert "slonk.dev/pool" not in _get(kube, node)["metadata"]["labels"]
    with pytest.raises(TerminalError):
        await writer.set_labels(node, {"kubernetes.io/hostname": "x"})


async def test_changes_to_a_missing_node_are_gone(kube_transport: KubeTransport) -> None:
    """A node that does not exist gives GONE, never an error."""
    writer = NodeWriter(kube_transport)
    assert (await writer.cordon("no-such-node-x", cause="c")).outcome is ChangeOutcome.GONE
    assert (await writer.uncordon("no-such-node-x")).outcome is ChangeOutcome.GONE

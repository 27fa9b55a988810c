"""Node changes against the real apiserver: cordon ownership, taint races, the condition."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from slonkd.adapters.kube.nodes import NodeWriter
from slonkd.adapters.kube.parsing import field_owners, node_from_json
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.decide import decide
from slonkd.core.errors import TerminalError
from slonkd.core.kube_changes import ChangeOutcome
from slonkd.core.kube_objects import (
    CORDONED_BY_ANNOTATION,
    SLURM_HEALTHY,
    Pod,
    PodName,
    PodPhase,
    TaintEffect,
)
from slonkd.core.plan import Kind, NodeView, Policy
from slonkd.core.slurm_node import NodeName
from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import wait_for

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


def _taints(kube: KubeCluster, name: str) -> set[tuple[str, str, str]]:
    return {
        (t["key"], t["effect"], t.get("value", ""))
        for t in _get(kube, name)["spec"].get("taints") or []
    }


def _untaints(kube: KubeCluster, name: str) -> set[str]:
    """The taint keys ``decide`` would remove from the node as parsed (its pod healthy)."""
    kube_node = node_from_json(_get(kube, name))
    pod = Pod(
        name=PodName("w-0"),
        namespace="slonk",
        uid="u",
        resource_version="1",
        node_name=kube_node.name,
        phase=PodPhase.RUNNING,
        ready=True,
    )
    view = NodeView(
        node=NodeName("w-0"),
        now=1000.0,
        slurm=None,
        pod=pod,
        pod_ready_since=0.0,
        kube_node=kube_node,
    )
    return {a.key for a in decide(view, Policy()).actions if a.kind is Kind.UNTAINT}


async def test_an_operators_slonk_taint_is_never_removed(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """A ``slonk.dev/`` taint a person put there is not slonkd's: never removed nor taken over."""
    writer = NodeWriter(kube_transport)
    kube.kubectl("taint", "node", node, "slonk.dev/manual-repair=psu-swap:NoSchedule")
    kube.kubectl("taint", "node", node, "slonk.dev/unhealthy=ops:NoExecute")
    operators = {
        ("slonk.dev/manual-repair", "NoSchedule", "psu-swap"),
        ("slonk.dev/unhealthy", "NoExecute", "ops"),
    }
    assert _untaints(kube, node) == set()  # decide, on the node as the adapter parses it
    removed = await writer.remove_taint(node, "slonk.dev/manual-repair")
    assert removed.outcome is ChangeOutcome.FOREIGN, removed
    removed = await writer.remove_taint(node, "slonk.dev/unhealthy")
    assert removed.outcome is ChangeOutcome.FOREIGN, removed
    taken = await writer.set_taint(node, "slonk.dev/manual-repair", TaintEffect.NO_SCHEDULE, "x")
    assert taken.outcome is ChangeOutcome.FOREIGN, taken
    assert _taints(kube, node) >= operators
    # slonkd's own taint of the same key (another effect) goes and comes back; theirs stay
    ours = await writer.set_taint(node, "slonk.dev/unhealthy", TaintEffect.NO_SCHEDULE, "gpu")
    assert ours.outcome is ChangeOutcome.CHANGED
    assert _untaints(kube, node) == {"slonk.dev/unhealthy"}
    assert (await writer.remove_taint(node, "slonk.dev/unhealthy")).outcome is ChangeOutcome.CHANGED
    assert _taints(kube, node) >= operators
    assert ("slonk.dev/unhealthy", "NoSchedule", "gpu") not in _taints(kube, node)


async def test_slonkds_taint_changed_by_a_person_becomes_theirs(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """slonkd's taint whose value an operator changed is no longer slonkd's to remove."""
    writer = NodeWriter(kube_transport)
    await writer.set_taint(node, "slonk.dev/unhealthy", TaintEffect.NO_SCHEDULE, "slurm-failure")
    kube.kubectl("taint", "node", node, "--overwrite", "slonk.dev/unhealthy=keep:NoSchedule")
    assert _untaints(kube, node) == set()
    assert (await writer.remove_taint(node, "slonk.dev/unhealthy")).outcome is ChangeOutcome.FOREIGN
    assert ("slonk.dev/unhealthy", "NoSchedule", "keep") in _taints(kube, node)


async def test_kubectl_cordon_of_a_node_slonkd_cordoned_leaves_no_trace(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """``kubectl cordon`` on a node slonkd cordoned sends nothing: the apiserver records nothing.

    So that cordon cannot be told from slonkd's (the documented rule: slonkd lifts a cordon
    that carries its mark and whose field only slonkd owns). What an operator does to keep
    it does leave a trace: removing slonkd's mark, or applying the field server-side.
    """
    writer = NodeWriter(kube_transport)
    assert (await writer.cordon(node, cause="health")).outcome is ChangeOutcome.CHANGED

    def settled() -> bool:
        # The fresh node's other writers first: kwok (status) and the node controller, whose
        # unschedulable taint follows slonkd's cordon. A manager first seen between the two
        # reads below is theirs, not kubectl's (the full run of 2026-12-02 caught one).
        got = _get(kube, node)
        managers = {e["manager"] for e in got["metadata"]["managedFields"]}
        taints = {t["key"] for t in got["spec"].get("taints", [])}
        return {"kwok", "kube-controller-manager"} <= managers and (
            "node.kubernetes.io/unschedulable" in taints
        )

    wait_for("kwok and the node controller wrote the node", settled, timeout_s=30)
    before = _get(kube, node)
    out = kube.kubectl("cordon", node).stdout
    assert "already cordoned" in out, out
    after = _get(kube, node)
    assert field_owners(after, "spec", "unschedulable") == {writer.manager}
    managers = {e["manager"] for e in after["metadata"]["managedFields"]}
    assert managers == {e["manager"] for e in before["metadata"]["managedFields"]}
    assert not any("kubectl" in m for m in managers), managers
    # the operator's server-side apply of the field makes it theirs too: slonkd leaves it
    applied = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "spec": {"unschedulable": True},
        }
    )
    kube.kubectl("apply", "--server-side", "--field-manager=ops", "-f", "-", stdin=applied)
    assert field_owners(_get(kube, node), "spec", "unschedulable") == {writer.manager, "ops"}
    assert (await writer.uncordon(node)).outcome is ChangeOutcome.FOREIGN
    assert _unschedulable(kube, node)


async def test_removing_slonkds_cordon_mark_takes_the_cordon_over(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """An operator removes ``slonk.dev/cordoned-by``: the cordon is theirs, never lifted."""
    writer = NodeWriter(kube_transport)
    assert (await writer.cordon(node, cause="health")).outcome is ChangeOutcome.CHANGED
    kube.kubectl("annotate", "node", node, f"{CORDONED_BY_ANNOTATION}-")
    assert not node_from_json(_get(kube, node)).cordoned_by_slonkd
    assert (await writer.uncordon(node)).outcome is ChangeOutcome.FOREIGN
    assert _unschedulable(kube, node)


async def test_cordon_and_taint_are_one_write_that_keeps_each_ones_rules(
    kube: KubeCluster, kube_transport: KubeTransport, node: str
) -> None:
    """Cordon and failure taint in one read and one write, no conflict (issue 21).

    Right after a cordon the node lifecycle controller adds ``node.kubernetes.io/
    unschedulable``: the taint written after it in a second read-modify-write met a 409 and
    read again. Written together, each keeps its rule: an admin's cordon stays theirs
    (FOREIGN, no mark) while slonkd's taint is still added and recorded.
    """
    writer = NodeWriter(kube_transport)
    key = "slonk.dev/unhealthy"
    cordon, taint = await writer.cordon_and_taint(
        node, cause="slurm-failure", key=key, effect=TaintEffect.NO_SCHEDULE, value="v"
    )
    assert (cordon.outcome, taint.outcome) == (ChangeOutcome.CHANGED, ChangeOutcome.CHANGED)
    raw = _get(kube, node)
    assert raw["spec"]["unschedulable"]
    assert raw["metadata"]["annotations"][CORDONED_BY_ANNOTATION] == "slurm-failure"
    assert node_from_json(raw).our_taints[0].key == key
    again = await writer.cordon_and_taint(
        node, cause="slurm-failure", key=key, effect=TaintEffect.NO_SCHEDULE, value="v"
    )
    assert [r.outcome for r in again] == [ChangeOutcome.UNCHANGED, ChangeOutcome.UNCHANGED]
    assert (await writer.uncordon(node)).outcome is ChangeOutcome.CHANGED
    assert (await writer.remove_taint(node, key)).outcome is ChangeOutcome.CHANGED
    kube.kubectl("cordon", node)  # now an admin's cordon
    cordon, taint = await writer.cordon_and_taint(
        node, cause="slurm-failure", key=key, effect=TaintEffect.NO_SCHEDULE, value="v"
    )
    assert (cordon.outcome, taint.outcome) == (ChangeOutcome.FOREIGN, ChangeOutcome.CHANGED)
    raw = _get(kube, node)
    assert CORDONED_BY_ANNOTATION not in raw["metadata"]["annotations"]
    assert node_from_json(raw).our_taints[0].key == key

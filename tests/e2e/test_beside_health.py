"""Living beside another health system: its taint, condition and drain outlive slonkd's marks.

The ``fleet`` of ``tests/e2e/coordinator_fleet.py`` (20 worker pods on 10 kwok nodes, 20
real slurmd, a real coordinator) and a stand-in for a vendor's GPU health operator, which
marks K8s node N the way such systems do: a SLURM drain of pod B's node under its own
reason, its own NoSchedule taint ``nvidia.com/gpu-unhealthy`` on N (its own field manager,
read-modify-write) and its own condition ``GpuHealthy=False`` (status subresource). slonkd
counts the taint as maintenance (pod A, N's other worker, is drained
``slonkd:k8s-tainted:gpu-unhealthy``) and leaves B's drain alone; then SLURM fails A:
slonkd cordons N, taints it ``slonk.dev/unhealthy``, sets ``SlurmHealthy=False``, evicts
A's pod, and lifts all three once A's replacement has settled elsewhere. Through all of it
and after, the operator's taint and condition are as it wrote them and B is drained under
its reason; once the operator removes its taint, slonkd's next passes still leave B's drain
and the condition alone. The contract is docs/operations.md, "Living beside other health
systems"; the rules are :mod:`slonkd.core.kube_objects`, :mod:`slonkd.adapters.kube.nodes`,
:mod:`slonkd.core.decide` and :mod:`slonkd.core.slurm_plan`.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest

from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.procs import wait_for
from tests.e2e import coordinator_fleet
from tests.e2e.coordinator_fleet import Fleet

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

coordinator_config = coordinator_fleet.coordinator_config
fleet_slurm = coordinator_fleet.fleet_slurm
fleet = coordinator_fleet.fleet

MANAGER = "gpu-health-operator"
"""The other system's field manager."""
TAINT = {"key": "nvidia.com/gpu-unhealthy", "value": "xid-79", "effect": "NoSchedule"}
CONDITION = "GpuHealthy"
DRAIN_REASON = "gpu-health-operator: Xid 79 on GPU 3"


def _edit_taints(f: Fleet, node: str, *, add: bool) -> None:
    """The operator adds (or removes) its taint as a well-behaved controller does.

    Read-modify-write with the resourceVersion as precondition (the taints list is replaced
    whole by a patch), everyone else's taints kept, under its own field manager.
    """
    while True:
        current = f.knode(node)
        taints = [t for t in current["spec"].get("taints") or [] if t["key"] != TAINT["key"]]
        patch = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"taints": [*taints, TAINT] if add else taints},
        }
        try:
            f.kube.api.request(
                "PATCH", f"/api/v1/nodes/{node}", patch,
                params={"fieldManager": MANAGER},
                content_type="application/merge-patch+json",
            )  # fmt: skip
            return
        except ApiError as exc:
            if exc.status != 409:
                raise


def _set_condition(f: Fleet, node: str) -> None:
    """The operator's own condition, on the status subresource, merged by type."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": CONDITION,
        "status": "False",
        "reason": "XidError",
        "message": "Xid 79 on GPU 3",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    f.kube.api.request(
        "PATCH", f"/api/v1/nodes/{node}/status", {"status": {"conditions": [condition]}},
        params={"fieldManager": MANAGER},
        content_type="application/strategic-merge-patch+json",
    )  # fmt: skip


def _theirs(node: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The operator's taints and conditions on a K8s node's JSON, as the apiserver keeps them."""
    taints = [t for t in node["spec"].get("taints") or [] if t["key"] == TAINT["key"]]
    conditions = [c for c in node["status"].get("conditions") or [] if c["type"] == CONDITION]
    return taints, conditions


def _slonkds_marks(node: dict[str, Any]) -> list[str]:
    """What of slonkd's is on a K8s node (empty: nothing).

    Its cordon, ``slonk.dev/`` taints and annotations, and ``SlurmHealthy`` other than True.
    """
    taints = node["spec"].get("taints") or []
    marks = [t["key"] for t in taints if t["key"].startswith("slonk.dev/")]
    marks += [k for k in node["metadata"].get("annotations") or {} if k.startswith("slonk.dev/")]
    if node["spec"].get("unschedulable"):
        marks.append("unschedulable")
    conditions = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
    if conditions.get("SlurmHealthy", "True") != "True":
        marks.append(f"SlurmHealthy={conditions['SlurmHealthy']}")
    return marks


def _passes(f: Fleet) -> int:
    with urllib.request.urlopen(f"{f.api_url()}/v1/status", timeout=10) as resp:  # noqa: S310
        return int(json.loads(resp.read())["passes"]["count"])


def _drained_under(f: Fleet, node: str) -> tuple[str, str]:
    """``(state, reason)`` of a SLURM node."""
    return f.slurm.node_states()[node], f.reasons()[node]


def test_another_systems_taint_condition_and_drain_outlive_slonkds_marks(fleet: Fleet) -> None:
    """slonkd makes and lifts its marks on a K8s node another health system marked too.

    Its taint and condition are exactly as written after slonkd's cordon, taint, condition
    and their lifting; its SLURM drain keeps its state and reason through every pass.
    """
    f, victim = fleet, "w-3"
    kube_node = next(n for n in f.kube_nodes if victim in f.pods_on(n))
    sibling = next(p for p in f.pods_on(kube_node) if p != victim)

    # The other system drains the sibling's SLURM node, then marks the K8s node.
    f.slurm.run("scontrol", "update", f"nodename={sibling}", "state=drain",
                f"reason={DRAIN_REASON}")  # fmt: skip
    _edit_taints(f, kube_node, add=True)
    _set_condition(f, kube_node)
    taints, conditions = _theirs(f.knode(kube_node))
    assert len(taints) == 1, taints
    assert len(conditions) == 1, conditions

    # slonkd counts the untolerated NoSchedule taint as maintenance: it drains the victim,
    # and leaves the sibling, held under the other system's reason, as it is.
    wait_for(
        "the victim drained for the other system's taint",
        lambda: f.reasons()[victim].startswith("slonkd:k8s-tainted:gpu-unhealthy"),
        timeout_s=20, interval_s=0.2,
    )  # fmt: skip
    assert _drained_under(f, sibling) == ("drained", DRAIN_REASON)
    explained = json.loads(f.slonkd("explain", sibling).stdout)
    assert any("not slonkd's: left alone" in n for n in explained["decision"]["notes"]), explained
    assert _slonkds_marks(f.knode(kube_node)) == []  # maintenance marks nothing in K8s

    # SLURM fails the victim: slonkd marks N, evicts the victim's pod, and lifts its marks
    # once the replacement has settled on another K8s node.
    f.fail([victim])
    wait_for("N marked", lambda: (victim, kube_node) in f.cordons(), timeout_s=20)
    wait_for(
        "the replacement settled elsewhere",
        lambda: any(victim in f.pods_on(n) for n in f.kube_nodes if n != kube_node),
        timeout_s=30, interval_s=0.2,
    )  # fmt: skip
    wait_for(
        "slonkd's marks lifted from N",
        lambda: _slonkds_marks(f.knode(kube_node)) == [],
        timeout_s=20, interval_s=0.2,
    )  # fmt: skip
    made = {
        e["event"]
        for e in f.events()
        if e.get("kube_node") == kube_node and e.get("outcome") == "changed"
    }
    lifecycle = {"kube.cordon", "kube.taint", "kube.set_condition", "kube.uncordon", "kube.untaint"}
    assert lifecycle <= made, made
    node = f.knode(kube_node)
    assert _theirs(node) == (taints, conditions), node
    assert _drained_under(f, sibling) == ("drained", DRAIN_REASON)
    assert f.reasons()[victim] == "Kill task failed"  # SLURM's: slonkd never clears it

    # The other system lifts its taint but keeps its condition and drain: slonkd's next
    # passes release nothing of theirs and mark nothing for the condition.
    _edit_taints(f, kube_node, add=False)
    seen = _passes(f)
    wait_for("three more passes", lambda: _passes(f) >= seen + 3, timeout_s=30, interval_s=0.2)
    node = f.knode(kube_node)
    assert _theirs(node) == ([], conditions), node
    assert _slonkds_marks(node) == [], node
    assert _drained_under(f, sibling) == ("drained", DRAIN_REASON)
    audit = [json.loads(line) for line in f.audit.read_text().splitlines()]
    slurm_writes = {"drain", "release", "down", "slurm-reboot"}
    on_sibling = [a for a in audit if a.get("node") == sibling and a.get("action") in slurm_writes]
    # a pass that read SLURM before the other system's drain may plan a drain of its own
    # there: the write's compare-and-set reads the node again and skips it
    assert all(a["outcome"] == "skipped: foreign-reason" for a in on_sibling), on_sibling

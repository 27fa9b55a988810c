"""Quarantined hardware end to end: a remediated machine waits in plain sight, a person returns it.

The coordinator fleet of :mod:`tests.e2e.coordinator_fleet` (a real kube-apiserver, SLURM
22.05, one coordinator): both worker pods of one K8s node fail in SLURM at once, slonkd
marks the node and evicts both, their replacements settle elsewhere, and the machine keeps
slonkd's marks with no worker pod. ``slonkd status`` lists it as quarantined; ``slonkd
return`` lifts exactly slonkd's marks (the apiserver's managedFields decide the cordon's
owner) and leaves an operator's taint.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from slonkd_sandbox.procs import wait_for
from tests.e2e import coordinator_fleet
from tests.e2e.coordinator_fleet import Fleet

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

coordinator_config = coordinator_fleet.coordinator_config
fleet_slurm = coordinator_fleet.fleet_slurm
fleet = coordinator_fleet.fleet

VENDOR = {"key": "vendor.example/repair", "value": "ticket-17", "effect": "NoSchedule"}


def _quarantined(fleet: Fleet) -> dict[str, dict[str, Any]]:
    shown = fleet.slonkd("status", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    return {q["kube_node"]: q for q in json.loads(shown.stdout)["quarantined"]["nodes"]}


def test_a_remediated_machine_is_listed_and_a_return_lifts_only_slonkds_marks(
    fleet: Fleet,
) -> None:
    """Both pods of a K8s node fail: evicted, the machine quarantined, then returned by hand."""
    kube_node = next(n for n in fleet.kube_nodes if len(fleet.pods_on(n)) == 2)
    pods = fleet.pods_on(kube_node)
    fleet.fail(pods)
    wait_for(
        "both pods settled on other machines",
        lambda: all(
            any(p in fleet.pods_on(n) for n in fleet.kube_nodes if n != kube_node) for p in pods
        ),
        timeout_s=60,
    )
    wait_for("the machine quarantined", lambda: kube_node in _quarantined(fleet), timeout_s=30)
    entry = _quarantined(fleet)[kube_node]
    assert entry["rung"] == "pod-evicted", entry
    assert entry["why"].startswith("slurm-failure"), entry
    assert entry["since"], entry
    table = fleet.slonkd("status")
    assert "quarantined (waiting for a person)" in table.stdout, table.stdout
    # an operator's own taint on the same machine, added the way slonkd's rules ask
    node = fleet.knode(kube_node)
    fleet.kube.api.request(
        "PATCH",
        f"/api/v1/nodes/{kube_node}",
        {"spec": {"taints": [*node["spec"].get("taints", []), VENDOR]}},
        content_type="application/merge-patch+json",
    )
    returned = fleet.slonkd("return", kube_node, "--by", "alice")
    assert returned.returncode == 0, returned.stderr
    node = fleet.knode(kube_node)
    taints = {t["key"] for t in node["spec"].get("taints", [])}
    assert taints == {VENDOR["key"]}, taints  # slonkd's taint gone, the operator's kept
    assert not node["spec"].get("unschedulable")
    conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
    assert conditions["SlurmHealthy"] == "True"
    assert "slonk.dev/cordoned-by" not in (node["metadata"].get("annotations") or {})
    history = json.loads(fleet.state()["remediation"])[kube_node]
    assert history["returnedBy"] == "alice"
    assert history["attempts"] >= 1
    audit = [json.loads(line) for line in fleet.audit.read_text().splitlines()]
    (record,) = [a for a in audit if a["action"] == "return"]
    assert (record["cause"], record["outcome"]) == ("returned by alice", "returned")
    wait_for("no longer quarantined", lambda: kube_node not in _quarantined(fleet), timeout_s=10)
    # nothing of slonkd's is left there: a second return is refused, in one line
    again = fleet.slonkd("return", kube_node, "--by", "alice")
    assert again.returncode == 1
    assert "none of slonkd's marks" in again.stderr
    assert again.stderr.count("\n") == 1

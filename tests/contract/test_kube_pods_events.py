"""Evictions, deletions and Events against the real apiserver."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slonkd.adapters.kube.events import EventRecorder, EventSettings
from slonkd.adapters.kube.pods import PodWriter
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_changes import ChangeOutcome, ObjectRef
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import wait_for
from tests.contract.kube_helpers import (
    allow_one_disruption,
    pending_pod,
    pods_of,
    two_workers_under_a_pdb,
)

pytestmark = pytest.mark.kube


async def test_eviction_is_refused_under_a_pdb_then_allowed(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str, unique: Callable[[str], str]
) -> None:
    """Eviction answers REFUSED while a PDB forbids it and CHANGED once the PDB allows it."""
    pdb = two_workers_under_a_pdb(kube, namespace, [unique("ev-a"), unique("ev-b")])
    writer = PodWriter(kube_transport)
    pod = next(p for p in pods_of(kube, namespace) if p["metadata"]["name"] == "w-0")
    uid = pod["metadata"]["uid"]
    refused = await writer.evict(namespace, "w-0", uid=uid)
    assert refused.outcome is ChangeOutcome.REFUSED
    assert "disruption budget" in refused.detail
    allow_one_disruption(kube, pdb)
    assert (await writer.evict(namespace, "w-0", uid=uid)).outcome is ChangeOutcome.CHANGED
    # The StatefulSet brings w-0 back with a new uid: the old decision must not hit it. The
    # apiserver judges the PDB before the uid precondition, so wait until the new pod runs and
    # the PDB allows a disruption again (until then a stale eviction is REFUSED, and retried).
    wait_for(
        "w-0 replaced and Running",
        lambda: any(
            p["metadata"]["name"] == "w-0"
            and p["metadata"]["uid"] != uid
            and p.get("status", {}).get("phase") == "Running"
            for p in pods_of(kube, namespace)
        ),
        timeout_s=30,
    )
    wait_for(
        "PDB allows a disruption",
        lambda: kube.api.request("GET", pdb).get("status", {}).get("disruptionsAllowed", 0) >= 1,
        timeout_s=30,
    )
    assert (await writer.evict(namespace, "w-0", uid=uid)).outcome is ChangeOutcome.GONE
    assert (await writer.evict(namespace, "nope", uid="x")).outcome is ChangeOutcome.GONE


async def test_delete_with_grace_then_gone(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """A pod deleted with a grace period is gone; deleting it again reports GONE."""
    created = kube.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pending_pod("d"))
    writer = PodWriter(kube_transport)
    uid = created["metadata"]["uid"]
    assert (
        await writer.delete(namespace, "d", uid=uid, grace_s=5)
    ).outcome is ChangeOutcome.CHANGED
    assert (await writer.delete(namespace, "d", uid=uid, grace_s=5)).outcome is ChangeOutcome.GONE


async def test_events_are_aggregated_and_rate_limited(
    kube: KubeCluster, kube_transport: KubeTransport, unique: Callable[[str], str]
) -> None:
    """A repeated Event bumps its count; past the burst, Events about that node are dropped."""
    (node,) = kube.add_fake_nodes([unique("evnode")], wait_ready_s=None)
    uid = kube.api.request("GET", f"/api/v1/nodes/{node}")["metadata"]["uid"]
    recorder = EventRecorder(kube_transport, EventSettings(burst=3, refill_s=3600))
    ref = ObjectRef(kind="Node", name=node, uid=uid)
    first = await recorder.record(ref, type_="Warning", reason="SlurmDown", message="slurmd died")
    assert first.outcome is ChangeOutcome.CHANGED
    again = await recorder.record(ref, type_="Warning", reason="SlurmDown", message="slurmd died")
    assert again.outcome is ChangeOutcome.UNCHANGED
    other = await recorder.record(ref, type_="Normal", reason="Cordoned", message="by slonkd")
    assert other.outcome is ChangeOutcome.CHANGED
    dropped = await recorder.record(ref, type_="Normal", reason="Uncordoned", message="x")
    assert dropped.outcome is ChangeOutcome.DROPPED
    events = kube.api.request(
        "GET",
        "/api/v1/namespaces/default/events",
        params={"fieldSelector": f"involvedObject.name={node}"},
    )["items"]
    ours = {e["reason"]: e for e in events if e["source"].get("component") == "slonkd"}
    assert set(ours) == {"SlurmDown", "Cordoned"}
    assert ours["SlurmDown"]["count"] == 2
    assert ours["SlurmDown"]["type"] == "Warning"
    assert ours["SlurmDown"]["involvedObject"]["uid"] == uid
    kube.api.request("DELETE", f"/api/v1/nodes/{node}", ok=(200, 404))

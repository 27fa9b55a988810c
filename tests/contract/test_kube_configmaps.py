"""A ConfigMap slonkd owns: created labelled, replaced only while labelled, foreign ones left."""

from __future__ import annotations

import pytest

from slonkd.adapters.kube.configmaps import OWNER_LABEL, OWNER_VALUE, OwnedConfigMap
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_changes import ChangeOutcome
from slonkd_sandbox.kube.cluster import KubeCluster

pytestmark = pytest.mark.kube


async def test_created_updated_unchanged_and_a_foreign_one_left_alone(
    kube: KubeCluster, namespace: str, kube_transport: KubeTransport
) -> None:
    """Create with the owner label, update on new data, no write on equal data; never foreign."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    cm = OwnedConfigMap(kube_transport, namespace, "slonkd-topology")
    assert (await cm.publish({"topology.conf": "one\n"})).detail == "created"
    obj = kube.api.request("GET", f"{path}/slonkd-topology")
    assert obj["metadata"]["labels"][OWNER_LABEL] == OWNER_VALUE
    version = obj["metadata"]["resourceVersion"]
    assert (await cm.publish({"topology.conf": "one\n"})).outcome is ChangeOutcome.UNCHANGED
    assert kube.api.request("GET", f"{path}/slonkd-topology")["metadata"]["resourceVersion"] == (
        version
    )
    assert (await cm.publish({"topology.conf": "two\n"})).detail == "updated"
    assert kube.api.request("GET", f"{path}/slonkd-topology")["data"] == {"topology.conf": "two\n"}

    kube.api.request("POST", path, {"metadata": {"name": "theirs"}, "data": {"k": "v"}})
    foreign = await OwnedConfigMap(kube_transport, namespace, "theirs").publish({"k": "mine"})
    assert foreign.outcome is ChangeOutcome.FOREIGN
    assert "not slonkd's" in foreign.detail
    assert kube.api.request("GET", f"{path}/theirs")["data"] == {"k": "v"}

"""The transport's error translation against real failures: refused connections, bad tokens."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from slonkd.adapters.kube.errors import Call, KubeNotFound, KubeUnavailable
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import TerminalError, TransientError
from slonkd.testing.kube import KubeCluster

pytestmark = pytest.mark.kube

GET_NODES = Call(verb="list", resource="nodes")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_unreachable_apiserver_is_a_transient_error(
    kube: KubeCluster, tmp_path: Path
) -> None:
    """A refused connection becomes a TransientError (KubeUnavailable), chained to its cause."""
    config = kube.kubeconfig_for(kube.admin_token, user="admin").replace(
        kube.server, f"https://127.0.0.1:{_closed_port()}"
    )
    path = tmp_path / "dead.kubeconfig"
    path.write_text(config)
    transport = await KubeTransport.from_kubeconfig(path, timeout_s=2)
    try:
        with pytest.raises(KubeUnavailable) as caught:
            await transport.request(GET_NODES, "GET", "/api/v1/nodes")
        assert isinstance(caught.value, TransientError)
        assert caught.value.__cause__ is not None
    finally:
        await transport.close()


async def test_rejected_token_is_terminal(kube: KubeCluster, tmp_path: Path) -> None:
    """A token the apiserver does not know (401) is a TerminalError, not retried."""
    path = tmp_path / "bad.kubeconfig"
    path.write_text(kube.kubeconfig_for("not-a-token", user="nobody"))
    transport = await KubeTransport.from_kubeconfig(path)
    try:
        with pytest.raises(TerminalError, match="401"):
            await transport.request(GET_NODES, "GET", "/api/v1/nodes")
    finally:
        await transport.close()


async def test_missing_object_is_not_found_and_writes_carry_slonkds_field_manager(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """GET of a missing object raises KubeNotFound; a created object lists slonkd as manager."""
    with pytest.raises(KubeNotFound):
        await kube_transport.request(
            Call(verb="get", resource="configmaps", namespace=namespace, name="x"),
            "GET",
            f"/api/v1/namespaces/{namespace}/configmaps/x",
        )
    created = await kube_transport.request(
        Call(verb="create", resource="configmaps", namespace=namespace),
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"metadata": {"name": "x"}, "data": {"a": "1"}},
    )
    managers = {m["manager"] for m in created["metadata"]["managedFields"]}
    assert managers == {"slonkd"}

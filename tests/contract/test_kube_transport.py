"""The transport against the real apiserver: errors translated, every way of authenticating."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
from pathlib import Path

import pytest

from slonkd.adapters.kube.errors import Call, KubeNotFound, KubeUnavailable
from slonkd.adapters.kube.kubeconfig import in_cluster_endpoint
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import TerminalError, TransientError
from slonkd_sandbox.kube.cluster import KubeCluster

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
    async with await KubeTransport.from_kubeconfig(path, timeout_s=2) as transport:
        with pytest.raises(KubeUnavailable) as caught:
            await transport.request(GET_NODES, "GET", "/api/v1/nodes")
        assert isinstance(caught.value, TransientError)
        assert caught.value.__cause__ is not None


async def test_rejected_token_is_terminal(kube: KubeCluster, tmp_path: Path) -> None:
    """A token the apiserver does not know (401) is a TerminalError, not retried."""
    path = tmp_path / "bad.kubeconfig"
    path.write_text(kube.kubeconfig_for("not-a-token", user="nobody"))
    async with await KubeTransport.from_kubeconfig(path) as transport:
        with pytest.raises(TerminalError, match="401"):
            await transport.request(GET_NODES, "GET", "/api/v1/nodes")


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


WHO_AM_I = Call(verb="create", resource="selfsubjectreviews", group="authentication.k8s.io")


async def _who_am_i(transport: KubeTransport) -> str:
    review = await transport.request(
        WHO_AM_I,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


def _client_cert(kube: KubeCluster, out: Path, user: str) -> tuple[Path, Path]:
    """A client certificate for ``user`` in system:masters, signed by the apiserver's client CA."""
    key, csr, crt = out / "me.key", out / "me.csr", out / "me.crt"
    ca = kube.ca_file

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/O=system:masters/CN={user}",
            "-keyout", str(key), "-out", str(csr))  # fmt: skip
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca.parent / "ca.key"),
            "-CAcreateserial", "-days", "1", "-out", str(crt))  # fmt: skip
    return crt, key


def _self_signed_ca(out: Path) -> Path:
    out.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=other-ca", "-keyout", str(out / "ca.key"), "-out", str(out / "ca.crt")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return out / "ca.crt"


@pytest.mark.parametrize("inline", [True, False], ids=["data", "files"])
async def test_client_certificate_authenticates(
    kube: KubeCluster, tmp_path: Path, inline: bool
) -> None:
    """A kubeconfig with a client certificate (inline or as files) is that user to the server."""
    crt, key = _client_cert(kube, tmp_path, "slonkd-cert-user")
    if inline:
        user = {
            "client-certificate-data": base64.b64encode(crt.read_bytes()).decode(),
            "client-key-data": base64.b64encode(key.read_bytes()).decode(),
        }
    else:
        user = {"client-certificate": crt.name, "client-key": key.name}  # relative to the file
    config = json.loads(kube.kubeconfig_for("unused", user="me"))
    config["users"] = [{"name": "me", "user": user}]
    path = tmp_path / "cert.kubeconfig"
    path.write_text(json.dumps(config))
    async with await KubeTransport.from_kubeconfig(path) as transport:
        assert await _who_am_i(transport) == "slonkd-cert-user"
        await transport.request(GET_NODES, "GET", "/api/v1/nodes")  # system:masters may


async def test_in_cluster_token_is_read_again_as_it_rotates(
    kube: KubeCluster, tmp_path: Path
) -> None:
    """In-cluster: the mounted token is re-read, so a rotated token is used from then on."""
    (tmp_path / "ca.crt").write_bytes(kube.ca_file.read_bytes())
    token = tmp_path / "token"
    token.write_text(kube.admin_token + "\n")
    port = kube.server.rsplit(":", 1)[1]
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
    async with KubeTransport(in_cluster_endpoint(env, tmp_path), token_refresh_s=0) as transport:
        assert await _who_am_i(transport) == "admin"
        token.write_text("rotated-to-an-unknown-token\n")
        with pytest.raises(TerminalError, match="401"):
            await transport.request(GET_NODES, "GET", "/api/v1/nodes")
        token.write_text(kube.admin_token + "\n")
        assert await _who_am_i(transport) == "admin"


async def test_wrong_ca_fails_verification_as_a_transient_error(
    kube: KubeCluster, tmp_path: Path
) -> None:
    """A server certificate the configured CA did not sign is refused (never trusted blindly)."""
    other = _self_signed_ca(tmp_path / "other")
    config = json.loads(kube.kubeconfig_for(kube.admin_token, user="admin"))
    cluster = config["clusters"][0]["cluster"]
    del cluster["certificate-authority-data"]
    cluster["certificate-authority"] = str(other)
    path = tmp_path / "wrong-ca.kubeconfig"
    path.write_text(json.dumps(config))
    async with await KubeTransport.from_kubeconfig(path, timeout_s=5) as transport:
        with pytest.raises(KubeUnavailable, match="certificate verify failed"):
            await transport.request(GET_NODES, "GET", "/api/v1/nodes")

"""Exec credential plugins against the real apiserver: tokens, client certificates, 401s, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.kube.errors import Call
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.errors import TerminalError
from slonkd_sandbox.kube.cluster import KubeCluster
from tests.contract.test_kube_transport import GET_NODES, _client_cert, _who_am_i

pytestmark = pytest.mark.kube

V1 = "client.authentication.k8s.io/v1"

# Prints answers/N.json for its N-th run (the last one again once they run out) as the
# status of an ExecCredential, and counts its runs in runs.txt.
PLUGIN = f"""\
#!{sys.executable}
import json, pathlib
here = pathlib.Path(__file__).parent
runs = here / "runs.txt"
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
answers = sorted(here.glob("answers/*.json"), key=lambda p: int(p.stem))
status = json.loads(answers[min(n, len(answers)) - 1].read_text())
print(json.dumps({{"apiVersion": "{V1}", "kind": "ExecCredential", "status": status}}))
"""


def exec_kubeconfig(kube: KubeCluster, out: Path, *answers: dict[str, Any]) -> Path:
    """A kubeconfig whose user is the fake plugin in ``out``, answering ``answers`` in turn."""
    (out / "answers").mkdir(parents=True)
    for i, status in enumerate(answers, 1):
        (out / "answers" / f"{i}.json").write_text(json.dumps(status))
    plugin = out / "plugin"
    plugin.write_text(PLUGIN)
    plugin.chmod(0o755)
    config = json.loads(kube.kubeconfig_for("unused", user="exec-user"))
    config["users"] = [
        {"name": "exec-user", "user": {"exec": {"command": "./plugin", "apiVersion": V1}}}
    ]
    path = out / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def runs(out: Path) -> int:
    """How many times the fake plugin in ``out`` ran."""
    path = out / "runs.txt"
    return int(path.read_text()) if path.exists() else 0


def service_account(kube: KubeCluster, namespace: str, *, cluster_role: str, scope: str) -> str:
    """A ServiceAccount bound to ``cluster_role`` (in ``namespace`` or cluster-wide): its token."""
    kube.api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"metadata": {"name": "operator"}},
    )
    binding = {
        "metadata": {"name": f"operator-{namespace}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}],
    }  # fmt: skip
    if scope == "cluster":
        kube.api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    else:
        kube.api.request(
            "POST",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
            binding,
        )
    return kube.create_token(namespace, "operator", expiration_s=3600)


@pytest.fixture
def admin_sa_token(kube: KubeCluster, namespace: str) -> Iterator[str]:
    """A ServiceAccount token of ``namespace`` bound to cluster-admin (binding removed after)."""
    token = service_account(kube, namespace, cluster_role="cluster-admin", scope="cluster")
    yield token
    kube.api.request(
        "DELETE",
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/operator-{namespace}",
        ok=(200, 404),
    )


async def test_exec_plugin_token_lists_nodes_and_reads_a_configmap(
    kube: KubeCluster, namespace: str, admin_sa_token: str, tmp_path: Path
) -> None:
    """The plugin's ServiceAccount token is who the apiserver sees; the plugin runs once."""
    kube.api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": "cm"}, "data": {"k": "v"}},
    )
    path = exec_kubeconfig(kube, tmp_path, {"token": admin_sa_token})
    async with await KubeTransport.from_kubeconfig(path) as transport:
        assert await _who_am_i(transport) == f"system:serviceaccount:{namespace}:operator"
        nodes = await transport.request(GET_NODES, "GET", "/api/v1/nodes")
        assert nodes["kind"] == "NodeList"
        cm = await transport.request(
            Call(verb="get", resource="configmaps", namespace=namespace, name="cm"),
            "GET",
            f"/api/v1/namespaces/{namespace}/configmaps/cm",
        )
        assert cm["data"] == {"k": "v"}
        assert runs(tmp_path) == 1


async def test_a_rejected_token_runs_the_plugin_again_and_retries_once(
    kube: KubeCluster, namespace: str, admin_sa_token: str, tmp_path: Path
) -> None:
    """401 for the plugin's first token: the plugin runs again and the request succeeds."""
    path = exec_kubeconfig(kube, tmp_path, {"token": "revoked"}, {"token": admin_sa_token})
    async with await KubeTransport.from_kubeconfig(path) as transport:
        nodes = await transport.request(GET_NODES, "GET", "/api/v1/nodes")
        assert nodes["kind"] == "NodeList"
        assert runs(tmp_path) == 2
        await transport.request(GET_NODES, "GET", "/api/v1/nodes")
        assert runs(tmp_path) == 2


async def test_a_token_still_rejected_after_the_retry_is_terminal(
    kube: KubeCluster, tmp_path: Path
) -> None:
    """The request is retried once, not forever: a second 401 is the usual TerminalError."""
    path = exec_kubeconfig(kube, tmp_path, {"token": "revoked"})
    async with await KubeTransport.from_kubeconfig(path) as transport:
        with pytest.raises(TerminalError, match="401"):
            await transport.request(GET_NODES, "GET", "/api/v1/nodes")
        assert runs(tmp_path) == 2


async def test_exec_plugin_client_certificate_authenticates(
    kube: KubeCluster, tmp_path: Path
) -> None:
    """A plugin answering with a client certificate and key: that certificate's user."""
    crt, key = _client_cert(kube, tmp_path, "slonkd-exec-cert-user")
    status = {"clientCertificateData": crt.read_text(), "clientKeyData": key.read_text()}
    path = exec_kubeconfig(kube, tmp_path / "plugin", status)
    async with await KubeTransport.from_kubeconfig(path) as transport:
        assert await _who_am_i(transport) == "slonkd-exec-cert-user"
        await transport.request(GET_NODES, "GET", "/api/v1/nodes")  # system:masters may


def test_slonkd_pause_with_an_exec_kubeconfig(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """``slonkd pause`` with KUBECONFIG naming an exec plugin writes the state ConfigMap."""
    token = service_account(kube, namespace, cluster_role="edit", scope="namespace")
    path = exec_kubeconfig(kube, tmp_path, {"token": token})
    env = {**os.environ, "KUBECONFIG": str(path)}
    env.pop("POD_NAMESPACE", None)
    argv = [sys.executable, "-m", "slonkd.cli.main", "pause", "--namespace", namespace,
            "--reason", "maintenance", "--by", "alice"]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert token not in done.stdout + done.stderr
    cm = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/slonkd-state")
    state = CoordinatorState.from_data(cm["data"])
    assert state.paused
    assert (state.paused_by, state.paused_reason) == ("alice", "maintenance")
    assert runs(tmp_path) == 1

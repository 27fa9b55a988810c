"""Who the real node's kubelet and CoreDNS are to the apiserver: certificates, kubeconfigs, RBAC.

The kubelet authenticates with a client certificate of the harness CA (``system:node:<name>``
in ``system:nodes``, bound to the ``system:node`` ClusterRole: the harness runs RBAC without
the Node authorizer); CoreDNS with one of its own (``slonkd:realnode:coredns:<id>``, bound to
a ClusterRole that lists and watches what its ``kubernetes`` plugin reads). Their kubeconfigs
reach the apiserver through the relay on the host end of the veth and name ``localhost`` as
the TLS server name, which the serving certificate holds. The bindings are removed at
tear-down; the ClusterRole, shared by every real node, stays.

Neighbours: :mod:`slonkd_sandbox.realnode.node` (the node), :mod:`slonkd_sandbox.kube.pki` (the CA
that signs these certificates), :mod:`slonkd_sandbox.realnode.net` (the relay the kubeconfigs
name).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.pki import sign_client_cert

_RBAC = "/apis/rbac.authorization.k8s.io/v1"
COREDNS_ROLE = "slonkd:realnode:coredns"


def node_user(name: str) -> str:
    """The kubelet's user name for the node ``name``."""
    return f"system:node:{name}"


def coredns_user(node_id: str) -> str:
    """CoreDNS's user name for the node of id ``node_id``."""
    return f"slonkd:realnode:coredns:{node_id}"


def _bindings(name: str, node_id: str) -> tuple[tuple[str, str, str], ...]:
    """(binding, ClusterRole, user) of the node's kubelet and CoreDNS."""
    return (
        (f"slonkd:realnode:{name}", "system:node", node_user(name)),
        (f"slonkd:realnode:coredns:{node_id}", COREDNS_ROLE, coredns_user(node_id)),
    )


def cert_kubeconfig(
    root: Path, user: str, cert: Path, *, cluster: KubeCluster, host_ip: str
) -> Path:
    """Write ``root/<user>.kubeconfig``: ``cert`` against the apiserver through the relay."""
    path = root / f"{user}.kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "harness",
                "cluster": {
                    "server": f"https://{host_ip}:{cluster.ports['apiserver']}",
                    "certificate-authority": str(cluster.ca_file),
                    "tls-server-name": "localhost",
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(cert.with_suffix(".crt")),
                    "client-key": str(cert.with_suffix(".key")),
                },
            }
        ],
        "contexts": [{"name": "harness", "context": {"cluster": "harness", "user": user}}],
        "current-context": "harness",
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


def write_credentials(
    root: Path, *, cluster: KubeCluster, name: str, node_id: str, host_ip: str
) -> None:
    """Sign both client certificates, write both kubeconfigs, create the RBAC objects."""
    ca_dir = cluster.ca_file.parent
    kubelet, dns = node_user(name), coredns_user(node_id)
    sign_client_cert(ca_dir, root / "pki" / "kubelet", cn=kubelet, org="system:nodes")
    sign_client_cert(ca_dir, root / "pki" / "coredns", cn=dns, org="slonkd:coredns")
    cert_kubeconfig(root, "kubelet", root / "pki" / "kubelet", cluster=cluster, host_ip=host_ip)
    cert_kubeconfig(root, "coredns", root / "pki" / "coredns", cluster=cluster, host_ip=host_ip)
    api = cluster.api
    with contextlib.suppress(ApiError):
        api.request(
            "POST",
            f"{_RBAC}/clusterroles",
            {
                "metadata": {"name": COREDNS_ROLE},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["services", "namespaces", "pods", "endpoints"],
                        "verbs": ["list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["list", "watch"],
                    },
                ],
            },
        )
    for binding, role, user in _bindings(name, node_id):
        api.request(
            "POST",
            f"{_RBAC}/clusterrolebindings",
            {
                "metadata": {"name": binding},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
        )


def remove_api_objects(cluster: KubeCluster, *, name: str, node_id: str) -> None:
    """Delete the Node object and both bindings (nothing when the apiserver is down)."""
    if not cluster.pids().get("apiserver"):
        return
    api = cluster.api
    ok = (200, 202, 404)
    api.request("DELETE", f"/api/v1/nodes/{name}", ok=ok)
    for binding, _role, _user in _bindings(name, node_id):
        api.request("DELETE", f"{_RBAC}/clusterrolebindings/{binding}", ok=ok)


__all__ = [
    "COREDNS_ROLE",
    "cert_kubeconfig",
    "coredns_user",
    "node_user",
    "remove_api_objects",
    "write_credentials",
]

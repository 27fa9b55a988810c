"""The command lines of the control plane's processes: etcd, kube-apiserver, kcm, scheduler.

Each function returns the argv of one component for a cluster directory ``root`` and its
``ports`` (``etcd``, ``etcd_peer``, ``apiserver``, ``kcm``, ``scheduler``): every component
listens on 127.0.0.1 only, keeps its files under ``root`` and authenticates as the files of
:mod:`slonkd_sandbox.kube.pki` say. The apiserver runs token auth and RBAC with a
service-account key pair, as a real cluster does.

Neighbours: :mod:`slonkd_sandbox.kube.cluster` (starts these and waits for them),
:mod:`slonkd_sandbox.kube.kwok` (the fake nodes' process), :mod:`slonkd_sandbox.toolchain`
(the binaries named here).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from slonkd_sandbox.toolchain import Tools

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
"""The apiserver's ``--service-cluster-ip-range`` (the real node blackholes it on the host)."""


def etcd_argv(tools: Tools, root: Path, ports: Mapping[str, int]) -> list[str]:
    """etcd with its data dir ``root/etcd`` (kept across restarts), without fsync."""
    client = f"http://127.0.0.1:{ports['etcd']}"
    peer = f"http://127.0.0.1:{ports['etcd_peer']}"
    return [
        str(tools.etcd),
        "--name=n0",
        f"--data-dir={root / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=n0={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_argv(tools: Tools, root: Path, ports: Mapping[str, int]) -> list[str]:
    """kube-apiserver on etcd, with token auth, RBAC and service-account tokens."""
    pki = root / "pki"
    return [
        str(tools.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports['apiserver']}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--token-auth-file={root / 'tokens.csv'}",
        # how it reaches a real kubelet (logs, exec; see realnode.py): by IP, never
        # by a DNS lookup of the node's name on the machine's resolver
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'kubelet-client.key'}",
        "--authorization-mode=RBAC",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--enable-priority-and-fairness=false",
        "--profiling=false",
        "--v=1",
    ]


def kcm_argv(
    tools: Tools,
    root: Path,
    ports: Mapping[str, int],
    *,
    kubeconfig: Path,
    node_monitor_grace_period: str,
) -> list[str]:
    """kube-controller-manager as admin, without leader election or cloud controllers."""
    pki = root / "pki"
    return [
        str(tools.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['kcm']}",
        f"--cert-dir={root / 'kcm-pki'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        "--use-service-account-credentials=false",
        f"--node-monitor-grace-period={node_monitor_grace_period}",
        # the node lifecycle controller labels and untaints each new node at the client's
        # default 20 requests/s: 5,000 kwok nodes took about 18 minutes to settle, and every
        # one of those changes starts a coordinator's pass (a bench "at rest" was not)
        "--kube-api-qps=500",
        "--kube-api-burst=1000",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
        "--v=1",
    ]


def scheduler_argv(
    tools: Tools, root: Path, ports: Mapping[str, int], *, kubeconfig: Path
) -> list[str]:
    """kube-scheduler as admin, without leader election."""
    return [
        str(tools.kube_scheduler),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['scheduler']}",
        f"--cert-dir={root / 'scheduler-pki'}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--v=1",
    ]


__all__ = [
    "SERVICE_CLUSTER_IP_RANGE",
    "apiserver_argv",
    "etcd_argv",
    "kcm_argv",
    "scheduler_argv",
]

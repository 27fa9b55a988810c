"""The real node's configuration files: containerd's, the CNI bridge's, CoreDNS's, the kubelet's.

Pure renderers: each returns the text (or object) of one file from the node's paths and
addresses; :class:`~slonkd_sandbox.realnode.node.RealNode` writes them and starts the processes.
containerd (Debian's 1.6, runc, overlayfs) keeps every state under the node's root; its CNI
config is one ``bridge`` network (``cni0``) with host-local IPAM on the node's pod /24.
CoreDNS serves the cluster domain, answering :data:`API_HOST` with the node's own address
(``hosts``, ahead of the ``kubernetes`` plugin), where a relay forwards to the apiserver.
The kubelet uses cgroupfs under its own cgroupRoot, webhook authentication and
authorization, the node's CoreDNS, and eviction thresholds low enough never to evict.

Neighbours: :mod:`slonkd_sandbox.realnode.node` (writes these, starts the processes),
:mod:`slonkd_sandbox.realnode.access` (the kubeconfigs they name),
:mod:`slonkd_sandbox.realnode.images` (the pause image containerd's sandboxes use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CLUSTER_DOMAIN = "cluster.local"
API_HOST = "kubernetes.default.svc"
"""The name pods use for the apiserver (KUBERNETES_SERVICE_HOST), port :data:`API_PORT`."""
API_PORT = 443
CNI_BIN_DIR = Path("/usr/lib/cni")


def containerd_toml(root: Path, *, socket: Path, pause_image: str) -> str:
    """containerd's config: state under ``root``, the CRI plugin with runc and the CNI bridge."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}/containerd/root"
state = "{root}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/containerd/opt"
[{cri}]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  max_container_log_line_size = 16384
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{root}/containerd/runc"
[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{root}/cni/net.d"
  max_conf_num = 1
"""


def cni_conflist(network: str, *, pod_cidr: str, ipam_dir: Path) -> dict[str, Any]:
    """The CNI network ``network``: bridge ``cni0``, gateway ``.1`` of ``pod_cidr``."""
    gateway = pod_cidr.rsplit(".", 1)[0] + ".1"
    return {
        "cniVersion": "0.4.0",
        "name": network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr, "gateway": gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }


def corefile(node_ip: str, *, kubeconfig: Path) -> str:
    """CoreDNS on ``node_ip``: :data:`API_HOST` is the node, the rest from the apiserver."""
    return f"""{CLUSTER_DOMAIN}:53 {{
    bind {node_ip}
    errors
    ready {node_ip}:8181
    hosts {{
        {node_ip} {API_HOST}.{CLUSTER_DOMAIN}
        fallthrough
    }}
    kubernetes {CLUSTER_DOMAIN} {{
        kubeconfig {kubeconfig} harness
        pods disabled
        ttl 5
    }}
}}
"""


def kubelet_config(
    root: Path, *, node_ip: str, cgroup_root: str, containerd_socket: Path, ca_file: Path
) -> dict[str, Any]:
    """The KubeletConfiguration of a node at ``node_ip`` with its files under ``root``."""
    endpoint = f"unix://{containerd_socket}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "address": node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": node_ip,
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [node_ip],
        "resolvConf": "",
        "podLogsDir": str(root / "pod-logs"),
        "volumePluginDir": str(root / "kubelet" / "volume-plugins"),
        "failSwapOn": False,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "maxPods": 110,
        "syncFrequency": "10s",
    }


__all__ = [
    "API_HOST",
    "API_PORT",
    "CLUSTER_DOMAIN",
    "CNI_BIN_DIR",
    "cni_conflist",
    "containerd_toml",
    "corefile",
    "kubelet_config",
]

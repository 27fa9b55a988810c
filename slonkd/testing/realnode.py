"""A real Kubernetes node on this machine: containerd, runc, CNI bridge, kubelet and CoreDNS.

kwok nodes run no containers; this node does. It registers with a running
:class:`~slonkd.testing.kube.KubeCluster`, runs pods with Debian's containerd 1.6 and runc,
and serves the cluster domain with CoreDNS so a headless Service name resolves to pod IPs.

Network isolation (the reason for the layout): containerd, the kubelet and CoreDNS run in a
network namespace of the node's own (``nsenter --net``, so they still share the host's mount
namespace: the kubelet's volume mounts must be visible to containerd's shims). The pods' CNI
bridge ``cni0`` lives in that namespace too. It is joined to the host only by a veth pair on a
private /30 and its routing table holds that /30, the pod bridge's /24 and an explicit
``unreachable default``: a packet from a pod or the node to an address that is not on this
machine dies in the node's namespace with "no route to host" and never reaches the host's
uplink. The alternative, kubelet on the host and only pods in a private namespace, does not
work with the bridge plugin (the bridge is created where containerd runs, and pods would
route through the host's default route). Everything the kubelet and the CNI plugins create
(cni0, veths, any KUBE-* or CNI chain) is therefore inside the namespace and dies with it.
Safety nets on the host as well: blackhole routes for the Service CIDR and the pod supernet
10.244.0.0/16, set before the namespace exists and removed at tear-down (the host's
``ip_forward`` is left alone; it is off on this machine kind).

The apiserver listens on 127.0.0.1 only, which the namespace cannot reach. A ``socat`` relay
on the host end of the veth forwards to it (kube.py unchanged in that respect; the kubelet's
kubeconfig names ``localhost`` as the TLS server name, which the serving certificate holds).
Pods reach the apiserver by name, never by the ``kubernetes`` Service's ClusterIP (no
kube-proxy programs it): CoreDNS answers ``kubernetes.default.svc.cluster.local`` with the
node's own address (``hosts``, ahead of the ``kubernetes`` plugin), where a second relay in the
node's namespace listens on port 443 and forwards to the host's. The serving certificate
holds ``kubernetes.default.svc``, so a client given that name in ``KUBERNETES_SERVICE_HOST``
(:data:`API_HOST`; the chart's ``kubernetesService`` values) verifies it as usual.
The kubelet authenticates with a client certificate of the harness CA (``system:node:<name>``
in ``system:nodes``, bound to the ``system:node`` ClusterRole: the harness runs RBAC without
the Node authorizer); the apiserver reaches the kubelet (logs, exec) at the node's InternalIP
(kube.py asks for it: never a DNS lookup of the node's name) with its ``kubelet-client``
certificate, checked by the kubelet against the same CA plus webhook authorization.

The kubelet's cgroupRoot gets the CPU weight of a whole machine (``cpu.shares`` 1024 per
CPU): the node's pods then compete with the host's other processes as a node of their own
would, not as one more process among them.

Pods use the images of :mod:`slonkd.testing.realnode_images` (imported with ``ctr``, no
registry) with ``imagePullPolicy: Never``. Tear-down kills every task through ``ctr`` before
containerd stops, unmounts everything under the node's directory, removes its cgroups, the
namespace (and with it cni0 and the veths), the host routes and the CNI result cache;
:meth:`RealNode.leftovers` lists whatever survived.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slonkd.testing import procs
from slonkd.testing.kube import KubeCluster
from slonkd.testing.kube_pki import sign_client_cert
from slonkd.testing.kubeapi import ApiError
from slonkd.testing.procs import HarnessError
from slonkd.testing.realnode_images import NodeImages, ensure_node_images
from slonkd.testing.toolchain import NodeTools, ensure_node_tools

SERVICE_CIDR = "10.0.0.0/24"
"""The harness apiserver's ``--service-cluster-ip-range`` (kube.py): blackholed on the host."""
POD_SUPERNET = "10.244.0.0/16"
"""Blackholed on the host: no pod address is ever routed off this machine."""
CLUSTER_DOMAIN = "cluster.local"
API_HOST = "kubernetes.default.svc"
"""The name pods use for the apiserver (KUBERNETES_SERVICE_HOST), port :data:`API_PORT`."""
API_PORT = 443
CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_CACHE_DIR = Path("/var/lib/cni/results")
KUBELET_DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
"""Hard-coded in the kubelet, whatever its root directory."""
HOST_DIRS = (
    Path("/var/lib/kubelet/device-plugins"),
    Path("/var/lib/kubelet"),
    CNI_CACHE_DIR,
    CNI_CACHE_DIR.parent,
    Path("/run/containerd/s"),
    Path("/run/containerd"),
)
"""Directories the kubelet, libcni and containerd's shims create on the host whatever their
configuration says: removed at tear-down when empty (another node may still use them)."""
CGROUP_MOUNTS = Path("/sys/fs/cgroup")
_CMD_TIMEOUT_S = 60.0


def _run(argv: Sequence[str], *, check: bool = True, timeout_s: float = _CMD_TIMEOUT_S) -> str:
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and proc.returncode != 0:
        raise HarnessError(f"{' '.join(argv)} failed (rc {proc.returncode}): {proc.stderr[-1500:]}")
    return proc.stdout


def _running_exes() -> list[Path]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                out.append(Path(os.readlink(entry / "exe")))
    return out


@dataclass(slots=True)
class RealNode:
    """A kubelet + containerd node registered with ``cluster``; use as context or start/stop."""

    root: Path
    cluster: KubeCluster
    name: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    images: NodeImages | None = None
    tools: NodeTools | None = None
    node_ip: str = ""
    host_ip: str = ""
    _id: str = ""
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _owned_routes: list[str] = field(default_factory=list)
    _cgroup_dirs: list[Path] = field(default_factory=list)
    _container_ids: set[str] = field(default_factory=set)
    _started: bool = False

    # -- names -------------------------------------------------------------------------------

    def __post_init__(self) -> None:
        self._id = self._id or secrets.token_hex(3)
        self.name = self.name or f"realnode-{self._id}"

    @property
    def netns(self) -> str:
        """The node's network namespace (``ip netns`` name)."""
        return f"slonkd-{self._id}"

    @property
    def host_veth(self) -> str:
        """The host end of the veth pair (the node end is ``eth0`` in the namespace)."""
        return f"slonkd-{self._id}"

    @property
    def cgroup_root(self) -> str:
        """The kubelet's cgroupRoot: pods' cgroups live below it in every hierarchy."""
        return f"/slonkd-{self._id}"

    @property
    def cni_network(self) -> str:
        """The CNI network name (names the CNI result cache files too)."""
        return f"slonkd-{self._id}"

    @property
    def pod_cidr(self) -> str:
        """The node's pod bridge subnet: a /24 of POD_SUPERNET picked by the node's id.

        Two nodes on one control plane rarely share it (their namespaces never connect anyway).
        """
        return f"10.244.{int(self._id, 16) % 256}.0/24"

    @property
    def containerd_socket(self) -> Path:
        """containerd's gRPC socket."""
        return self.root / "containerd.sock"

    @property
    def hostpath_dir(self) -> Path:
        """A directory under the node's root that tests may mount into pods with hostPath."""
        return self.root / "hostpath"

    @property
    def image(self) -> str:
        """The busybox image reference for test pods (``imagePullPolicy: Never``)."""
        if self.images is None:
            raise HarnessError("the node was not started")
        return self.images.busybox

    def nsexec(self, *argv: str) -> list[str]:
        """argv that runs ``argv`` in the node's network namespace (host mount namespace)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]

    def ctr(self, *args: str, check: bool = True, timeout_s: float = _CMD_TIMEOUT_S) -> str:
        """Run ``ctr`` against the node's containerd in the CRI namespace ``k8s.io``."""
        argv = ["ctr", f"--address={self.containerd_socket}", "--namespace=k8s.io", *args]
        return _run(argv, check=check, timeout_s=timeout_s)

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> RealNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, timeout_s: float = 120.0) -> None:
        """Build/find tools and images, set up the network, start everything, wait Ready."""
        begun = time.monotonic()
        if not self.cluster.ports:
            raise HarnessError("start the KubeCluster before the RealNode")
        self._started = True
        self.tools = self.tools or ensure_node_tools()
        self.images = self.images or ensure_node_images()
        self.timings["tools_images_s"] = time.monotonic() - begun
        for sub in ("log", "pki", "hostpath", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self._host_routes()
        self._network()
        self._relay()
        self.timings["network_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        self._credentials()
        self._cgroups()
        self._start_containerd(timeout_s)
        self.timings["containerd_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        self.ctr("images", "import", str(self.images.archive), timeout_s=timeout_s)
        self.timings["image_import_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        self._start_coredns(timeout_s)
        self._spawn(
            "api-relay",
            self.nsexec(
                "socat",
                f"TCP-LISTEN:{API_PORT},bind={self.node_ip},reuseaddr,fork",
                f"TCP:{self.host_ip}:{self.cluster.ports['apiserver']},nodelay",
            ),
        )
        self.timings["coredns_ready_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        self._start_kubelet()
        self.cluster.wait_nodes_ready([self.name], timeout_s=timeout_s)
        self.timings["kubelet_ready_s"] = time.monotonic() - t0
        self.timings["total_s"] = time.monotonic() - begun

    def stop(self) -> None:
        """Tear everything down; best effort per step, then raise if something survived."""
        if not self._started:
            return
        self._started = False
        errors: list[str] = []

        def step(what: str, fn: Any) -> None:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - every step runs, errors are reported
                errors.append(f"{what}: {exc}")

        step("kubelet", lambda: self._stop_proc("kubelet", 10))
        step("coredns", lambda: self._stop_proc("coredns", 5))
        step("api relay", lambda: self._stop_proc("api-relay", 5))
        step("tasks", self._kill_tasks)
        step("containerd", lambda: self._stop_proc("containerd", 10))
        step("processes", self._kill_leftover_processes)
        step("mounts", self._unmount_all)
        step("cgroups", self._remove_cgroups)
        step("netns", self._remove_network)
        step("relay", lambda: self._stop_proc("relay", 5))
        step("routes", self._remove_host_routes)
        step("host files", self._remove_host_files)
        step("api objects", self._remove_api_objects)
        left = self.leftovers()
        if errors or left:
            raise HarnessError("real node tear-down incomplete: " + "; ".join(errors + left))

    # -- host network ----------------------------------------------------------------------------

    def _host_routes(self) -> None:
        for cidr in (SERVICE_CIDR, POD_SUPERNET):
            existing = _run(["ip", "-4", "route", "show", "exact", cidr])
            if existing.strip():
                if not existing.startswith("blackhole"):
                    raise HarnessError(f"{cidr} is routed on this host ({existing.strip()})")
                continue  # another real node's safety net; it removes its own
            _run(["ip", "route", "add", "blackhole", cidr])
            self._owned_routes.append(cidr)

    def _remove_host_routes(self) -> None:
        while self._owned_routes:
            cidr = self._owned_routes.pop()
            _run(["ip", "route", "del", "blackhole", cidr], check=False)

    def _pick_subnet(self) -> tuple[str, str]:
        used = _run(["ip", "-4", "-o", "addr", "show"])
        for _ in range(100):
            rnd = int.from_bytes(os.urandom(2), "big")
            base = f"10.213.{rnd >> 8}.{(rnd & 0xFF) & ~3}"
            a, b, c, d = base.split(".")
            host, node = f"{a}.{b}.{c}.{int(d) + 1}", f"{a}.{b}.{c}.{int(d) + 2}"
            if f" {host}/" not in used and f" {node}/" not in used:
                return host, node
        raise HarnessError("no free /30 in 10.213.0.0/16")

    def _network(self) -> None:
        self.host_ip, self.node_ip = self._pick_subnet()
        ns = self.netns
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", self.host_veth, "type", "veth", "peer", "name", f"n{self._id}"])
        _run(["ip", "link", "set", f"n{self._id}", "netns", ns])
        _run(["ip", "-n", ns, "link", "set", f"n{self._id}", "name", "eth0"])
        _run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_veth])
        _run(["ip", "link", "set", self.host_veth, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{self.node_ip}/30", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        _run(["ip", "-n", ns, "route", "add", "unreachable", "default"])
        self.assert_no_route_out()

    def assert_no_route_out(self, probe: str = "198.51.100.1") -> None:
        """Fail unless the node's namespace has no route to ``probe`` (asks the kernel only)."""
        out = _run(["ip", "-n", self.netns, "route", "get", probe], check=False)
        if out and not out.startswith("unreachable"):
            raise HarnessError(f"the node's namespace routes {probe}: {out.strip()}")
        default = _run(["ip", "-n", self.netns, "-4", "route", "show", "default"])
        if default.strip() != "unreachable default":
            raise HarnessError(f"unexpected default route in the node's namespace: {default}")

    def _relay(self) -> None:
        port = self.cluster.ports["apiserver"]
        self._spawn(
            "relay",
            [
                "socat",
                f"TCP-LISTEN:{port},bind={self.host_ip},reuseaddr,fork",
                f"TCP:127.0.0.1:{port},nodelay",
            ],
        )

    def _remove_network(self) -> None:
        if self.netns in _run(["ip", "netns", "list"]).split():
            _run(["ip", "netns", "del", self.netns])
        # deleting the namespace destroys the pair; the host end may take a moment to go
        _run(["ip", "link", "del", self.host_veth], check=False)

    # -- credentials and API objects ---------------------------------------------------------

    def _kubeconfig(self, user: str, cert: Path) -> Path:
        path = self.root / f"{user}.kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "harness",
                    "cluster": {
                        "server": f"https://{self.host_ip}:{self.cluster.ports['apiserver']}",
                        "certificate-authority": str(self.cluster.ca_file),
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

    def _credentials(self) -> None:
        ca_dir = self.cluster.ca_file.parent
        node_user = f"system:node:{self.name}"
        dns_user = f"slonkd:realnode:coredns:{self._id}"
        sign_client_cert(ca_dir, self.root / "pki" / "kubelet", cn=node_user, org="system:nodes")
        sign_client_cert(ca_dir, self.root / "pki" / "coredns", cn=dns_user, org="slonkd:coredns")
        self._kubeconfig("kubelet", self.root / "pki" / "kubelet")
        self._kubeconfig("coredns", self.root / "pki" / "coredns")
        api = self.cluster.api
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        with contextlib.suppress(ApiError):
            api.request(
                "POST",
                f"{rbac}/clusterroles",
                {
                    "metadata": {"name": "slonkd:realnode:coredns"},
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
        for binding, role, user in (
            (f"slonkd:realnode:{self.name}", "system:node", node_user),
            (f"slonkd:realnode:coredns:{self._id}", "slonkd:realnode:coredns", dns_user),
        ):
            api.request(
                "POST",
                f"{rbac}/clusterrolebindings",
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

    def _remove_api_objects(self) -> None:
        if not self.cluster.pids().get("apiserver"):
            return
        api = self.cluster.api
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        ok = (200, 202, 404)
        api.request("DELETE", f"/api/v1/nodes/{self.name}", ok=ok)
        for binding in (f"slonkd:realnode:{self.name}", f"slonkd:realnode:coredns:{self._id}"):
            api.request("DELETE", f"{rbac}/clusterrolebindings/{binding}", ok=ok)

    # -- cgroups -------------------------------------------------------------------------------

    def _hierarchies(self) -> list[Path]:
        out = []
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if parts[2] == "cgroup" and parts[1].startswith(str(CGROUP_MOUNTS)):
                out.append(Path(parts[1]))
        return out

    def _cgroups(self) -> None:
        for hierarchy in self._hierarchies():
            path = hierarchy / self.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            self._cgroup_dirs.append(path)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / knob).exists():
                    (path / knob).write_text((hierarchy / knob).read_text())
            if (path / "cpu.shares").exists():  # the node's pods weigh as a machine of their own
                (path / "cpu.shares").write_text(str(1024 * (os.cpu_count() or 1)))

    def _remove_cgroups(self) -> None:
        for top in self._cgroup_dirs:
            if not top.exists():
                continue
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for path in [*dirs, top]:
                with contextlib.suppress(FileNotFoundError):
                    path.rmdir()

    # -- containerd, CoreDNS, kubelet ----------------------------------------------------------

    def _spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        proc = procs.spawn(argv, log=self.root / "log" / f"{name}.log")
        self._procs[name] = proc
        return proc

    def _stop_proc(self, name: str, grace_s: float) -> None:
        proc = self._procs.pop(name, None)
        if proc is None:
            return
        procs.stop(proc, grace_s=grace_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # socat's per-connection children

    def _start_containerd(self, timeout_s: float) -> None:
        if self.images is None:
            raise HarnessError("images missing")
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        conf = self.root / "containerd.toml"
        conf.write_text(
            f"""version = 2
root = "{self.root}/containerd/root"
state = "{self.root}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.root}/containerd/opt"
[{cri}]
  sandbox_image = "{self.images.pause}"
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
  Root = "{self.root}/containerd/runc"
[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{self.root}/cni/net.d"
  max_conf_num = 1
"""
        )
        gateway = self.pod_cidr.rsplit(".", 1)[0] + ".1"
        conflist = {
            "cniVersion": "0.4.0",
            "name": self.cni_network,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.pod_cidr, "gateway": gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.root / "cni" / "ipam"),
                    },
                }
            ],
        }
        (self.root / "cni" / "net.d" / "10-slonkd.conflist").write_text(json.dumps(conflist))
        proc = self._spawn(
            "containerd", self.nsexec("containerd", f"--config={conf}", "--log-level=warn")
        )
        procs.wait_for(
            "containerd",
            lambda: bool(self.ctr("version", timeout_s=5)),
            timeout_s=timeout_s,
            interval_s=0.1,
            alive=procs.exited(proc, self.root / "log" / "containerd.log"),
        )

    def _start_coredns(self, timeout_s: float) -> None:
        if self.tools is None:
            raise HarnessError("tools missing")
        corefile = self.root / "Corefile"
        corefile.write_text(
            f"""{CLUSTER_DOMAIN}:53 {{
    bind {self.node_ip}
    errors
    ready {self.node_ip}:8181
    hosts {{
        {self.node_ip} {API_HOST}.{CLUSTER_DOMAIN}
        fallthrough
    }}
    kubernetes {CLUSTER_DOMAIN} {{
        kubeconfig {self.root / "coredns.kubeconfig"} harness
        pods disabled
        ttl 5
    }}
}}
"""
        )
        proc = self._spawn("coredns", self.nsexec(str(self.tools.coredns), f"-conf={corefile}"))

        def ready() -> bool:
            url = f"http://{self.node_ip}:8181/ready"
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)

        procs.wait_for(
            "coredns",
            ready,
            timeout_s=timeout_s,
            interval_s=0.1,
            alive=procs.exited(proc, self.root / "log" / "coredns.log"),
        )

    def _start_kubelet(self) -> None:
        if self.tools is None:
            raise HarnessError("tools missing")
        endpoint = f"unix://{self.containerd_socket}"
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            "address": self.node_ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": self.node_ip,
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cluster.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDomain": CLUSTER_DOMAIN,
            "clusterDNS": [self.node_ip],
            "resolvConf": "",
            "podLogsDir": str(self.root / "pod-logs"),
            "volumePluginDir": str(self.root / "kubelet" / "volume-plugins"),
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
        conf = self.root / "kubelet.yaml"
        conf.write_text(json.dumps(config, indent=2))
        proc = self._spawn(
            "kubelet",
            self.nsexec(
                str(self.tools.kubelet),
                f"--config={conf}",
                f"--kubeconfig={self.root / 'kubelet.kubeconfig'}",
                f"--root-dir={self.root / 'kubelet'}",
                f"--cert-dir={self.root / 'kubelet' / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.node_ip}",
                "--v=2",
            ),
        )
        procs.wait_for(
            "kubelet registered",
            lambda: bool(self.cluster.api.request("GET", f"/api/v1/nodes/{self.name}")),
            timeout_s=60,
            interval_s=0.2,
            alive=procs.exited(proc, self.root / "log" / "kubelet.log"),
        )

    # -- tear-down helpers --------------------------------------------------------------------

    def _kill_tasks(self) -> None:
        if self._procs.get("containerd") is None:
            return
        tasks = self.ctr("tasks", "ls", "-q", check=False).split()
        for task in tasks:
            self.ctr("tasks", "kill", "--signal=SIGKILL", task, check=False)
        deadline = time.monotonic() + 15
        for task in tasks:
            while time.monotonic() < deadline:
                self.ctr("tasks", "delete", "--force", task, check=False)
                if task not in self.ctr("tasks", "ls", "-q", check=False).split():
                    break
                time.sleep(0.1)
        containers = self.ctr("containers", "ls", "-q", check=False).split()
        self._container_ids.update(containers)
        if containers:
            self.ctr("containers", "delete", *containers, check=False)

    def _our_pids(self) -> set[int]:
        """Processes of this node: by argv (its root), cgroup, network namespace or relay group."""
        mine: set[int] = set()
        marker = (str(self.root) + "/").encode()
        cgroup_marker = f":{self.cgroup_root}/".encode()
        cgroup_top = f":{self.cgroup_root}\n".encode()
        netns_path = Path(f"/run/netns/{self.netns}")
        netns_ino = netns_path.stat().st_ino if netns_path.exists() else None
        relay = self._procs.get("relay")
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            try:
                cmdline = (entry / "cmdline").read_bytes()
                cgroup = (entry / "cgroup").read_bytes()
                ns_ino = os.stat(entry / "ns" / "net").st_ino
                pgid = os.getpgid(pid)
            except (OSError, ProcessLookupError):
                continue
            if (
                marker in cmdline
                or cgroup_marker in cgroup
                or cgroup_top in cgroup
                or (netns_ino is not None and ns_ino == netns_ino)
            ) and (relay is None or pgid != relay.pid):
                mine.add(pid)
        return mine

    def _kill_leftover_processes(self) -> None:
        for _ in range(50):
            pids = self._our_pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def _our_mounts(self) -> list[str]:
        prefix = str(self.root) + "/"
        out = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(prefix):
                out.append(point)
        return out

    def _unmount_all(self) -> None:
        for _ in range(5):
            mounts = sorted(set(self._our_mounts()), key=lambda p: -p.count("/"))
            if not mounts:
                return
            for point in mounts:
                done = subprocess.run(
                    ["umount", point], capture_output=True, timeout=30, check=False
                )
                if done.returncode != 0:
                    _run(["umount", "-l", point], check=False, timeout_s=30)

    def _cni_cache(self) -> list[Path]:
        """CNI result files of this node's sandboxes (``<network>-<sandbox id>-<ifname>``)."""
        if not CNI_CACHE_DIR.exists():
            return []
        return [
            path
            for path in CNI_CACHE_DIR.iterdir()
            if path.name.startswith(f"{self.cni_network}-")
            or any(f"-{cid}-" in path.name for cid in self._container_ids)
        ]

    def _remove_host_files(self) -> None:
        for path in self._cni_cache():
            path.unlink(missing_ok=True)
        if not any(exe.name == "kubelet" for exe in _running_exes()):  # the last node out
            KUBELET_DEVICE_PLUGIN_SOCKET.unlink(missing_ok=True)
        for directory in HOST_DIRS:
            with contextlib.suppress(OSError):
                directory.rmdir()

    def leftovers(self) -> list[str]:
        """What of this node survives now: processes, mounts, cgroups, links, netns, routes."""
        left = [f"process {pid}" for pid in sorted(self._our_pids())]
        left += [f"mount {m}" for m in self._our_mounts()]
        left += [f"cgroup {d}" for d in self._cgroup_dirs if d.exists()]
        if self.netns in _run(["ip", "netns", "list"]).split():
            left.append(f"netns {self.netns}")
        if _run(["ip", "link", "show", self.host_veth], check=False):
            left.append(f"link {self.host_veth}")
        left += [f"route {cidr}" for cidr in self._owned_routes]
        left += [f"cni cache {p}" for p in self._cni_cache()]
        return left


__all__ = ["API_HOST", "API_PORT", "CLUSTER_DOMAIN", "POD_SUPERNET", "SERVICE_CIDR", "RealNode"]

"""A real Kubernetes node on this machine: containerd, runc, CNI bridge, kubelet and CoreDNS.

kwok nodes run no containers; this node does. It registers with a running
:class:`~slonkd_sandbox.kube.cluster.KubeCluster`, runs pods with Debian's containerd 1.6 and runc,
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
on the host end of the veth forwards to it (kube/cluster.py unchanged in that respect; the kubelet's
kubeconfig names ``localhost`` as the TLS server name, which the serving certificate holds).
Pods reach the apiserver by name, never by the ``kubernetes`` Service's ClusterIP (no
kube-proxy programs it): CoreDNS answers ``kubernetes.default.svc.cluster.local`` with the
node's own address (``hosts``, ahead of the ``kubernetes`` plugin), where a second relay in the
node's namespace listens on port 443 and forwards to the host's. The serving certificate
holds ``kubernetes.default.svc``, so a client given that name in ``KUBERNETES_SERVICE_HOST``
(:data:`~slonkd_sandbox.realnode.config.API_HOST`; the chart's ``kubernetesService`` values)
verifies it as usual.
The kubelet authenticates with a client certificate of the harness CA (``system:node:<name>``
in ``system:nodes``, bound to the ``system:node`` ClusterRole: the harness runs RBAC without
the Node authorizer); the apiserver reaches the kubelet (logs, exec) at the node's InternalIP
(kube.py asks for it: never a DNS lookup of the node's name) with its ``kubelet-client``
certificate, checked by the kubelet against the same CA plus webhook authorization.

The kubelet's cgroupRoot gets the CPU weight of a whole machine (``cpu.shares`` 1024 per
CPU): the node's pods then compete with the host's other processes as a node of their own
would, not as one more process among them.

Pods use the images of :mod:`slonkd_sandbox.realnode.images` (imported with ``ctr``, no
registry) with ``imagePullPolicy: Never``. Tear-down kills every task through ``ctr`` before
containerd stops, unmounts everything under the node's directory, removes its cgroups, the
namespace (and with it cni0 and the veths), the host routes and the CNI result cache;
:meth:`RealNode.leftovers` lists whatever survived.

This module owns the node's handle: its names, the order of start and tear-down, and the
processes it starts. Neighbours: :mod:`slonkd_sandbox.realnode.net` (namespace, veth, routes,
relay), :mod:`slonkd_sandbox.realnode.config` (the files of containerd, CNI, CoreDNS and the
kubelet), :mod:`slonkd_sandbox.realnode.access` (certificates, kubeconfigs, RBAC),
:mod:`slonkd_sandbox.realnode.host` (cgroups, and what tear-down finds and removes),
:mod:`slonkd_sandbox.realnode.images` (the images) and :mod:`slonkd_sandbox.kube.cluster`
(the control plane it joins).
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

from slonkd_sandbox import procs
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import HarnessError
from slonkd_sandbox.realnode import access as realnode_access
from slonkd_sandbox.realnode import config as realnode_config
from slonkd_sandbox.realnode import host as realnode_host
from slonkd_sandbox.realnode import net as realnode_net
from slonkd_sandbox.realnode.config import API_PORT
from slonkd_sandbox.realnode.images import NodeImages, ensure_node_images
from slonkd_sandbox.toolchain import NodeTools, ensure_node_tools

_CMD_TIMEOUT_S = 60.0


@dataclass(slots=True)
class RealNode(procs.StartStop):
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
        return procs.output(argv, check=check, timeout_s=timeout_s)

    # -- lifecycle -----------------------------------------------------------------------------

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
        realnode_net.add_host_routes(self._owned_routes)
        self.host_ip, self.node_ip = realnode_net.pick_subnet()
        realnode_net.make_network(
            netns=self.netns,
            host_veth=self.host_veth,
            peer=f"n{self._id}",
            host_ip=self.host_ip,
            node_ip=self.node_ip,
        )
        self._spawn("relay", realnode_net.relay_argv(self.host_ip, self.cluster.ports["apiserver"]))
        self.timings["network_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        realnode_access.write_credentials(
            self.root, cluster=self.cluster, name=self.name, node_id=self._id, host_ip=self.host_ip
        )
        realnode_host.make_cgroups(self.cgroup_root, self._cgroup_dirs)
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
        step("processes", lambda: realnode_host.kill_all(self._our_pids))
        step("mounts", lambda: realnode_host.unmount_all(self.root))
        step("cgroups", lambda: realnode_host.remove_cgroups(self._cgroup_dirs))
        step("netns", lambda: realnode_net.remove_network(self.netns, self.host_veth))
        step("relay", lambda: self._stop_proc("relay", 5))
        step("routes", lambda: realnode_net.remove_host_routes(self._owned_routes))
        step(
            "host files",
            lambda: realnode_host.remove_host_files(self.cni_network, self._container_ids),
        )
        step(
            "api objects",
            lambda: realnode_access.remove_api_objects(
                self.cluster, name=self.name, node_id=self._id
            ),
        )
        left = self.leftovers()
        if errors or left:
            raise HarnessError("real node tear-down incomplete: " + "; ".join(errors + left))

    def assert_no_route_out(self, probe: str = "198.51.100.1") -> None:
        """Fail unless the node's namespace has no route to ``probe`` (asks the kernel only)."""
        realnode_net.assert_no_route_out(self.netns, probe)

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
        conf = self.root / "containerd.toml"
        conf.write_text(
            realnode_config.containerd_toml(
                self.root, socket=self.containerd_socket, pause_image=self.images.pause
            )
        )
        conflist = realnode_config.cni_conflist(
            self.cni_network, pod_cidr=self.pod_cidr, ipam_dir=self.root / "cni" / "ipam"
        )
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
            realnode_config.corefile(self.node_ip, kubeconfig=self.root / "coredns.kubeconfig")
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
        config = realnode_config.kubelet_config(
            self.root,
            node_ip=self.node_ip,
            cgroup_root=self.cgroup_root,
            containerd_socket=self.containerd_socket,
            ca_file=self.cluster.ca_file,
        )
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
        realnode_host.kill_tasks(self.ctr, self._container_ids)

    def _our_pids(self) -> set[int]:
        """Processes of this node: by argv (its root), cgroup, network namespace or relay group."""
        relay = self._procs.get("relay")
        return realnode_host.node_pids(
            self.root,
            cgroup_root=self.cgroup_root,
            netns=self.netns,
            spare_pgid=None if relay is None else relay.pid,
        )

    def leftovers(self) -> list[str]:
        """What of this node survives now: processes, mounts, cgroups, links, netns, routes."""
        left = [f"process {pid}" for pid in sorted(self._our_pids())]
        left += [f"mount {m}" for m in realnode_host.mounts_under(self.root)]
        left += [f"cgroup {d}" for d in self._cgroup_dirs if d.exists()]
        if realnode_net.netns_exists(self.netns):
            left.append(f"netns {self.netns}")
        if procs.output(["ip", "link", "show", self.host_veth], check=False):
            left.append(f"link {self.host_veth}")
        left += [f"route {cidr}" for cidr in self._owned_routes]
        left += [
            f"cni cache {p}" for p in realnode_host.cni_cache(self.cni_network, self._container_ids)
        ]
        return left


__all__ = ["RealNode"]

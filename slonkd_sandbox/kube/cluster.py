"""A real Kubernetes control plane on loopback, in one private directory.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake nodes whose
pods become Running).

Binaries come from :mod:`slonkd_sandbox.toolchain` (built once, cached by version). The
apiserver uses token auth and RBAC, a serving certificate from the harness's own CA, and a
service-account key pair, so TokenRequest (including pod-bound tokens) and TokenReview work
as in a real cluster. Nothing listens anywhere but 127.0.0.1.

Fake nodes are plain Node objects with the annotation ``kwok.x-k8s.io/node: fake``. Pods of
such nodes become Running and Ready at once; a deleted pod vanishes at once too, unless it
carries the label ``slonk.dev/kubelet: standin`` (see :mod:`slonkd_sandbox.kube.kubelet`).

This module owns the handle: starting, waiting for, stopping and restarting the processes, and
the helpers tests call on a running cluster. Neighbours: :mod:`slonkd_sandbox.kube.components`
(the components' command lines), :mod:`slonkd_sandbox.kube.kwok` (kwok and its fake nodes),
:mod:`slonkd_sandbox.kube.pki` (certificates, tokens, kubeconfigs),
:mod:`slonkd_sandbox.kube.api` (the REST client of :attr:`KubeCluster.api`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slonkd_sandbox import procs
from slonkd_sandbox.kube import components, kwok, pki
from slonkd_sandbox.kube.api import KubeApi
from slonkd_sandbox.procs import HarnessError
from slonkd_sandbox.toolchain import Tools, ensure_tools


@dataclass(slots=True)
class _Service:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass(slots=True)
class KubeCluster(procs.StartStop):
    """Handle on a running control plane; use as a context manager or start()/stop()."""

    root: Path
    node_monitor_grace_period: str = "40s"
    tools: Tools | None = None
    ports: dict[str, int] = field(default_factory=dict)
    admin_token: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    _services: dict[str, _Service] = field(default_factory=dict)

    # -- paths and clients -------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """An admin kubeconfig (system:masters) for kubectl and slonkd's transport."""
        return self.root / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the apiserver's serving certificate."""
        return self.root / "pki" / "ca.crt"

    @property
    def server(self) -> str:
        """The apiserver's URL."""
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def api(self) -> KubeApi:
        """A stdlib REST client with admin rights."""
        return KubeApi(
            host="127.0.0.1",
            port=self.ports["apiserver"],
            ca_file=self.ca_file,
            token=self.admin_token,
        )

    @property
    def kubectl_path(self) -> Path:
        """The kubectl binary (for PATH)."""
        return self._tools.kubectl

    def kubectl(
        self, *args: str, check: bool = True, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster as admin."""
        proc = subprocess.run(
            [str(self._tools.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if check and proc.returncode != 0:
            raise HarnessError(f"kubectl {' '.join(args)} failed: {proc.stderr[-1500:]}")
        return proc

    @property
    def _tools(self) -> Tools:
        if self.tools is None:
            raise HarnessError("the control plane was not started")
        return self.tools

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, *, timeout_s: float = 120.0) -> None:
        """Build/find the binaries, then start etcd, apiserver, kcm, scheduler and kwok."""
        begun = time.monotonic()
        self.tools = self.tools or ensure_tools()
        self.timings["tools_s"] = time.monotonic() - begun
        self.root.mkdir(parents=True, exist_ok=True)
        names = ["etcd", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok_node", "kwok_server"]
        self.ports = dict(zip(names, procs.free_ports(len(names)), strict=True))
        self._pki()
        t0 = time.monotonic()
        self.start_etcd(timeout_s=timeout_s)
        self.start_apiserver(timeout_s=timeout_s)
        self.timings["etcd_apiserver_ready_s"] = time.monotonic() - t0
        self._write_kubeconfig()
        self._start_kcm(timeout_s=timeout_s)
        self._start_scheduler(timeout_s=timeout_s)
        self._start_kwok()
        self.timings["control_plane_ready_s"] = time.monotonic() - t0
        self.timings["total_s"] = time.monotonic() - begun

    def stop(self) -> None:
        """Stop everything. The apiserver is SIGKILLed: it drains watches for 60 s on TERM."""
        for name in ("kwok", "scheduler", "kcm", "apiserver", "etcd"):
            svc = self._services.pop(name, None)
            if svc is None:
                continue
            if name == "apiserver":
                procs.stop(svc.proc, grace_s=0.5, sig=signal.SIGKILL)
            else:
                procs.stop(svc.proc, grace_s=5)

    def kill_apiserver(self) -> None:
        """SIGKILL the apiserver (etcd keeps the state)."""
        svc = self._services.pop("apiserver", None)
        if svc is not None:
            procs.stop(svc.proc, grace_s=0.5, sig=signal.SIGKILL)

    def revive(self, *, timeout_s: float = 60.0) -> list[str]:
        """Start again each of kube-controller-manager and kube-scheduler that has exited.

        What a kubelet does for a control plane's static pods: kube-scheduler exits by design
        when its cache finds a pod on another node than it recorded ("Scheduler cache is
        corrupted and can badly affect scheduling decisions", then ``FlushAndExit``), which a
        relist after an etcd compaction can provoke. Returns the names restarted.
        """
        starts = {"kcm": self._start_kcm, "scheduler": self._start_scheduler}
        restarted = []
        for name, start in starts.items():
            svc = self._services.get(name)
            if svc is None or svc.proc.poll() is None:
                continue
            start(timeout_s=timeout_s)
            restarted.append(name)
        return restarted

    def pids(self) -> dict[str, int]:
        """Pids of the running services, for leak checks."""
        return {n: s.proc.pid for n, s in self._services.items() if s.proc.poll() is None}

    def _spawn(self, name: str, argv: Sequence[str]) -> _Service:
        log = self.root / "log" / f"{name}.log"
        svc = _Service(name=name, proc=procs.spawn(argv, log=log), log=log)
        self._services[name] = svc
        return svc

    def start_etcd(self, *, timeout_s: float = 60.0) -> None:
        """Start etcd on its data dir (kept across restarts)."""
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        svc = self._spawn("etcd", components.etcd_argv(self._tools, self.root, self.ports))

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client}/health", timeout=1) as resp:  # noqa: S310
                return bool(json.load(resp).get("health") == "true")

        procs.wait_for("etcd", healthy, timeout_s=timeout_s, alive=procs.exited(svc.proc, svc.log))

    def start_apiserver(self, *, timeout_s: float = 60.0) -> None:
        """Start kube-apiserver and wait for /readyz."""
        svc = self._spawn(
            "apiserver", components.apiserver_argv(self._tools, self.root, self.ports)
        )
        api = self.api

        def ready() -> bool:
            api.request("GET", "/readyz")
            return True

        procs.wait_for(
            "kube-apiserver",
            ready,
            timeout_s=timeout_s,
            interval_s=0.1,
            alive=procs.exited(svc.proc, svc.log),
        )

    def _component_health(self, name: str, port: int, timeout_s: float) -> None:
        import ssl

        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the component's self-signed serving cert

        def healthy() -> bool:
            url = f"https://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=1, context=ctx) as resp:
                return bool(resp.status == 200)

        svc = self._services[name]
        procs.wait_for(name, healthy, timeout_s=timeout_s, alive=procs.exited(svc.proc, svc.log))

    def _start_kcm(self, *, timeout_s: float) -> None:
        self._spawn(
            "kcm",
            components.kcm_argv(
                self._tools,
                self.root,
                self.ports,
                kubeconfig=self.kubeconfig,
                node_monitor_grace_period=self.node_monitor_grace_period,
            ),
        )
        self._component_health("kcm", self.ports["kcm"], timeout_s)

    def _start_scheduler(self, *, timeout_s: float) -> None:
        self._spawn(
            "scheduler",
            components.scheduler_argv(
                self._tools, self.root, self.ports, kubeconfig=self.kubeconfig
            ),
        )
        self._component_health("scheduler", self.ports["scheduler"], timeout_s)

    def _start_kwok(self) -> None:
        stages = kwok.write_stages(self.root / "kwok-stages.yaml")
        svc = self._spawn(
            "kwok",
            kwok.kwok_argv(
                self._tools, kubeconfig=self.kubeconfig, stages=stages, ports=self.ports
            ),
        )

        def serving() -> bool:
            url = f"http://127.0.0.1:{self.ports['kwok_server']}/healthz"
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)

        procs.wait_for("kwok", serving, timeout_s=30, alive=procs.exited(svc.proc, svc.log))

    # -- pki and kubeconfig -----------------------------------------------------------------

    def _pki(self) -> None:
        if not self.admin_token:
            self.admin_token = secrets.token_hex(24)
        pki.write_pki(self.root, self.admin_token)

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(self.kubeconfig_for(self.admin_token, user="admin"))
        self.kubeconfig.chmod(0o600)

    def kubeconfig_for(self, token: str, *, user: str, namespace: str = "default") -> str:
        """A kubeconfig (JSON, which is YAML) that authenticates with ``token``."""
        return pki.token_kubeconfig(
            self.server, self.ca_file, token, user=user, namespace=namespace
        )

    # -- helpers for tests ------------------------------------------------------------------

    def create_namespace(self, name: str, *, timeout_s: float = 30.0) -> None:
        """Create a namespace and wait until its default ServiceAccount exists.

        The controller-manager creates it; after a test restarted the apiserver its informers
        may still be backing off (client-go waits up to 30 s and more between relists), so
        after 10 s the harness creates the ServiceAccount itself, as the controller would.
        """
        self.api.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        path = f"/api/v1/namespaces/{name}/serviceaccounts"

        def has_sa() -> bool:
            self.api.request("GET", f"{path}/default")
            return True

        with contextlib.suppress(procs.HarnessError):
            procs.wait_for(f"namespace {name} ready", has_sa, timeout_s=min(10.0, timeout_s))
            return
        self.api.request("POST", path, {"metadata": {"name": "default"}}, ok=(201, 409))
        procs.wait_for(f"namespace {name} ready", has_sa, timeout_s=timeout_s)

    def add_fake_nodes(
        self,
        names: Iterable[str],
        *,
        labels: Mapping[str, str] | None = None,
        capacity: Mapping[str, str] | None = None,
        wait_ready_s: float | None = 60.0,
    ) -> list[str]:
        """Create kwok-managed Node objects; optionally wait until all are Ready."""
        created = []
        for name in names:
            body = kwok.fake_node_body(name, labels=labels, capacity=capacity)
            self.api.request("POST", "/api/v1/nodes", body)
            created.append(name)
        if wait_ready_s is not None:
            self.wait_nodes_ready(created, timeout_s=wait_ready_s)
        return created

    def wait_nodes_ready(self, names: Sequence[str], *, timeout_s: float = 60.0) -> float:
        """Wait until every named node has condition Ready=True."""
        wanted = set(names)

        def all_ready() -> bool:
            items = self.api.request("GET", "/api/v1/nodes")["items"]
            ready = {
                n["metadata"]["name"]
                for n in items
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
            }
            return wanted <= ready

        return procs.wait_for(
            f"{len(wanted)} nodes Ready", all_ready, timeout_s=timeout_s, interval_s=0.2
        )

    def wait_untainted(
        self, names: Sequence[str], *, timeout_s: float = 60.0, interval_s: float = 0.05
    ) -> float:
        """Wait until no named node carries a taint.

        The node controller lifts a new node's not-ready taints shortly after it is Ready;
        a workload whose spread must see every node waits for that first.
        """

        def untainted() -> bool:
            return all(
                not self.api.request("GET", f"/api/v1/nodes/{n}")["spec"].get("taints")
                for n in names
            )

        return procs.wait_for(
            f"{len(names)} nodes untainted", untainted, timeout_s=timeout_s, interval_s=interval_s
        )

    def create_token(
        self,
        namespace: str,
        service_account: str,
        *,
        bound_pod: tuple[str, str] | None = None,
        audiences: Sequence[str] = (),
        expiration_s: int = 3600,
    ) -> str:
        """Mint a ServiceAccount token by TokenRequest; ``bound_pod=(name, uid)`` binds it."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_s}
        if audiences:
            spec["audiences"] = list(audiences)
        if bound_pod is not None:
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": bound_pod[0],
                "uid": bound_pod[1],
            }
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        return str(self.api.request("POST", path, body)["status"]["token"])

    def etcd_revision(self) -> int:
        """etcd's current revision (the apiserver's resourceVersions come from it)."""
        return int(
            self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"][
                "revision"
            ]
        )

    def compact_etcd(self) -> int:
        """Compact etcd up to its current revision, so older resourceVersions give 410 Gone."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd(self, path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.ports['etcd']}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
            return json.load(resp)


__all__ = ["KubeCluster"]

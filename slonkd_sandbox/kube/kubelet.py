"""A kubelet stand-in that binds fake (kwok) pods to the slurmd processes of the harness.

kwok plays the kubelet for fake nodes but never runs preStop hooks, and a slurmd on the host
would outlive its pod. For pods labelled ``slonk.dev/kubelet: standin`` in one namespace,
this process plays the kubelet's part instead:

- a pod Running (not terminating) -> its slurmd runs (started again for a new pod uid);
- a pod whose deletion started -> run the pod's preStop ``exec`` command as a local process
  with the pod's environment (plain values and the usual downward-API fields), bounded by
  the grace period; then stop the slurmd as a kubelet stops a container (SIGTERM, SIGKILL
  after the rest of the grace, at least 2 s); then finish the deletion (grace 0, uid
  precondition; tried again while the apiserver is away), after which the StatefulSet
  recreates the pod;
- a pod gone without a graceful deletion -> its slurmd is killed at once.

Pod ``P`` is bound to the SLURM node named in the bindings, or to SLURM node ``P`` itself.
Every step is appended to a JSON-lines journal, so tests can check the order of events.

Run as ``python -m slonkd_sandbox.kube.kubelet SPEC.json``; :class:`KubeletStandIn` starts it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slonkd_sandbox import procs
from slonkd_sandbox.kube.api import ApiError, KubeApi
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kwok import STANDIN_LABEL
from slonkd_sandbox.slurm.cluster import SlurmCluster
from slonkd_sandbox.slurm.control import control, slurmd_host_pid

MIN_KILL_GRACE_S = 2.0
"""After preStop, a kubelet still gives containers at least this long before SIGKILL."""
DELETE_BOUND_S = 300.0
"""How long the final deletion is tried again while the apiserver is away (a restart)."""


class _StandIn:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.api = KubeApi(
            host=spec["host"], port=spec["port"], ca_file=Path(spec["ca_file"]), token=spec["token"]
        )
        self.namespace: str = spec["namespace"]
        self.bindings: dict[str, str] = spec.get("bindings", {})
        self.socket = Path(spec["slurm_socket"])
        self.slurm_conf: str = spec["slurm_conf"]
        self.journal = Path(spec["journal"])
        self.log_dir = Path(spec["log_dir"])
        self.started_uids: set[str] = set()
        self.terminating: set[str] = set()
        self.lock = threading.Lock()

    def note(self, event: str, **fields: Any) -> None:
        line = json.dumps({"t": time.time(), "event": event, **fields})
        with self.lock, self.journal.open("a") as out:
            out.write(line + "\n")

    def node_of(self, pod: str) -> str:
        return self.bindings.get(pod, pod)

    def run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        selector = {"labelSelector": f"{STANDIN_LABEL}=standin"}
        self.note("standin.started", namespace=self.namespace)
        while True:
            try:
                listing = self.api.request("GET", path, params=selector)
                for pod in listing["items"]:
                    self.handle("ADDED", pod)
                rv = listing["metadata"]["resourceVersion"]
                for ev in self.api.watch(path, params={**selector, "resourceVersion": rv}):
                    if ev["type"] == "ERROR":
                        break
                    if ev["type"] != "BOOKMARK":
                        self.handle(ev["type"], ev["object"])
            except (OSError, ApiError, ValueError) as exc:
                self.note("standin.watch_error", error=str(exc)[:300])
                time.sleep(0.5)

    def handle(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        name, uid = meta["name"], meta["uid"]
        if kind == "DELETED":
            with self.lock:
                graceful = uid in self.terminating
            if not graceful:
                self.note("pod.vanished", pod=name, uid=uid)
                self.control({"op": "kill_slurmd", "node": self.node_of(name)}, pod=name)
            return
        if meta.get("deletionTimestamp"):
            with self.lock:
                if uid in self.terminating:
                    return
                self.terminating.add(uid)
            threading.Thread(target=self.terminate, args=(pod,), daemon=True).start()
            return
        if pod.get("status", {}).get("phase") == "Running":
            with self.lock:
                if uid in self.started_uids:
                    return
                self.started_uids.add(uid)
            node = self.node_of(name)
            self.control({"op": "start_slurmd", "node": node}, pod=name)
            self.note("slurmd.started", pod=name, uid=uid, node=node)

    def control(self, request: dict[str, Any], *, pod: str) -> dict[str, Any] | None:
        try:
            return control(self.socket, request)
        except Exception as exc:  # noqa: BLE001 - recorded in the journal; the loop goes on
            self.note("slurmd.control_failed", pod=pod, request=request, error=str(exc)[:300])
            return None

    def terminate(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        name, uid = meta["name"], meta["uid"]
        node = self.node_of(name)
        grace = float(
            meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30))
        )
        begun = time.monotonic()
        self.note("pod.terminating", pod=name, uid=uid, node=node, grace_s=grace)
        container, command = _prestop(spec)
        slurmd = slurmd_host_pid(self.slurm_conf, node) if command else None
        if command and slurmd is not None:  # "in the container": slurmd's PID and mounts
            command = ["nsenter", f"--target={slurmd}", "--pid", "--mount", "--", *command]
        if command:
            env = {**os.environ, "SLURM_CONF": self.slurm_conf, **_env(pod, container)}
            log = self.log_dir / f"prestop-{name}-{uid[:8]}.log"
            self.note("prestop.started", pod=name, uid=uid, argv=command)
            try:
                with log.open("ab") as out:
                    proc = subprocess.run(
                        command,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        timeout=max(grace, 0.1),
                        check=False,
                        preexec_fn=procs.die_with_parent,
                    )
                self.note("prestop.exited", pod=name, uid=uid, rc=proc.returncode)
            except subprocess.TimeoutExpired:
                self.note("prestop.timed_out", pod=name, uid=uid)
            except OSError as exc:
                self.note("prestop.failed", pod=name, uid=uid, error=str(exc))
        left = max(grace - (time.monotonic() - begun), MIN_KILL_GRACE_S)
        reply = self.control({"op": "stop_slurmd", "node": node, "grace_s": left}, pod=name)
        self.note("slurmd.stopped", pod=name, uid=uid, node=node, how=(reply or {}).get("how"))
        self.finish_deletion(name, uid)

    def finish_deletion(
        self, name: str, uid: str, *, bound_s: float = DELETE_BOUND_S, pause_s: float = 0.5
    ) -> None:
        """Finish the pod's deletion (grace 0, uid precondition), as a kubelet does.

        Tried again while the apiserver is away or failing (an apiserver restart), up to
        ``bound_s``; a refusal of the request itself (4xx other than 429) is final.
        """
        deadline = time.monotonic() + bound_s
        while True:
            try:
                self.api.request(
                    "DELETE",
                    f"/api/v1/namespaces/{self.namespace}/pods/{name}",
                    {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
                    ok=(200, 202, 404, 409),
                )
            except (OSError, ApiError) as exc:
                self.note("pod.delete_failed", pod=name, uid=uid, error=str(exc)[:300])
                final = isinstance(exc, ApiError) and exc.status < 500 and exc.status != 429
                if final or time.monotonic() >= deadline:
                    self.note("pod.delete_abandoned", pod=name, uid=uid)
                    return
                time.sleep(pause_s)
                continue
            self.note("pod.deleted", pod=name, uid=uid)
            return


def _prestop(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    containers = sorted(spec.get("containers", []), key=lambda c: c.get("name") != "slurmd")
    for container in containers:
        cmd = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        if cmd:
            return container, [str(a) for a in cmd]
    return (containers[0] if containers else {}), []


def _env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.uid": pod["metadata"]["uid"],
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        "status.podIP": pod.get("status", {}).get("podIP", ""),
        "status.hostIP": pod.get("status", {}).get("hostIP", ""),
    }
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = fields.get(item["valueFrom"]["fieldRef"]["fieldPath"], "")
    return env


@dataclass(slots=True)
class KubeletStandIn(procs.StartStop):
    """Starts and stops the stand-in process for one namespace."""

    kube: KubeCluster
    slurm: SlurmCluster
    namespace: str
    root: Path
    bindings: dict[str, str] = field(default_factory=dict)
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def journal(self) -> Path:
        """JSON lines, one per step the stand-in took."""
        return self.root / "kubelet-journal.jsonl"

    def events(self) -> list[dict[str, Any]]:
        """The journal so far."""
        if not self.journal.exists():
            return []
        return [json.loads(x) for x in self.journal.read_text().splitlines() if x.strip()]

    def recorded(self, event: str, uid: str) -> bool:
        """Whether the journal has ``event`` (``slurmd.stopped`` ...) for the pod of ``uid``."""
        return any(e["event"] == event and e.get("uid") == uid for e in self.events())

    def start(self) -> None:
        """Start the stand-in and wait until its watch runs."""
        self.root.mkdir(parents=True, exist_ok=True)
        spec = {
            "host": "127.0.0.1",
            "port": self.kube.ports["apiserver"],
            "ca_file": str(self.kube.ca_file),
            "token": self.kube.admin_token,
            "namespace": self.namespace,
            "bindings": self.bindings,
            "slurm_socket": str(self.slurm.socket_path),
            "slurm_conf": str(self.slurm.conf),
            "journal": str(self.journal),
            "log_dir": str(self.root),
        }
        path = self.root / "kubelet-spec.json"
        path.write_text(json.dumps(spec))
        path.chmod(0o600)
        log = self.root / "kubelet.log"
        self._proc = procs.spawn(
            [sys.executable, "-m", "slonkd_sandbox.kube.kubelet", str(path)], log=log
        )
        procs.wait_for(
            "kubelet stand-in",
            lambda: any(e["event"] == "standin.started" for e in self.events()),
            timeout_s=20,
            alive=procs.exited(self._proc, log),
        )

    def stop(self) -> None:
        """Stop the stand-in (the slurmd processes stay with the SLURM cluster)."""
        if self._proc is not None:
            procs.stop(self._proc, grace_s=2)
            self._proc = None


def main() -> int:
    """Entry point of the stand-in process."""
    spec = json.loads(Path(sys.argv[1]).read_text())
    _StandIn(spec).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

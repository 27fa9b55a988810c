"""The sandbox's agents: one ``slonkd agent`` process per worker pod, living as its pod lives.

In a real cluster the agent is a native sidecar of the slurmd pod: it starts with the pod,
outlives slurmd while the pod terminates, and goes away with the pod; the pod's next
incarnation (perhaps on another K8s node) gets a new agent. kwok runs no containers, so this
thread plays that part for the sandbox: it polls the worker pods and keeps exactly one local
agent process per scheduled pod uid, started with the environment the chart's downward API
would give it (``POD_NAME``, ``POD_UID``, ``POD_NAMESPACE``, ``NODE_NAME``), and stops it once
that pod is gone (bound to the uid, it never acts for the pod's successor meanwhile). Each
agent logs (JSON lines) to ``<logs>/agent-<pod>.log``.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from slonkd_sandbox import procs
from slonkd_sandbox.daemon import Daemon
from slonkd_sandbox.kube.api import KubeApi


@dataclass(slots=True)
class _Agent:
    uid: str
    daemon: Daemon

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        """The agent's process (kept only once started)."""
        proc = self.daemon.proc
        if proc is None:
            raise procs.HarnessError(f"agent of pod uid {self.uid}: not started")
        return proc


class AgentKeeper(procs.StartStop):
    """Keeps one ``slonkd agent`` per live worker pod of ``namespace`` (see module doc)."""

    def __init__(
        self,
        *,
        api: KubeApi,
        namespace: str,
        selector: str,
        env: Mapping[str, str],
        env_for: Callable[[str], Mapping[str, str]],
        logs: Path,
        poll_s: float = 0.3,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.selector = selector
        self.env = dict(env)
        self.env_for = env_for
        self.logs = logs
        self.poll_s = poll_s
        self.agents: dict[str, _Agent] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the keeper thread (and, through it, the agents)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="agent-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop every agent (SIGTERM, SIGKILL after 10 s), then the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def pids(self) -> list[int]:
        """The running agents' pids."""
        with self._lock:
            return [a.proc.pid for a in self.agents.values() if a.proc.poll() is None]

    def _loop(self) -> None:
        # Agents are started and stopped by this thread only: their parent-death signal is
        # tied to the thread that forked them, so they must not outlive it, nor die before.
        try:
            while not self._stop.is_set():
                try:
                    self.sync()
                except Exception as exc:  # noqa: BLE001 - an apiserver hiccup: poll again
                    self._note({"event": "keeper.poll_failed", "error": str(exc)[:300]})
                self._stop.wait(self.poll_s)
        finally:
            with self._lock:
                for name, agent in list(self.agents.items()):
                    self._end(name, agent)
                self.agents.clear()

    def sync(self) -> None:
        """Start agents for new scheduled pods, stop those whose pod is gone or replaced."""
        items = self.api.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            params={"labelSelector": self.selector},
        )["items"]
        live = {
            p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName") or "")
            for p in items
        }
        with self._lock:
            for name, agent in list(self.agents.items()):
                uid = live.get(name, ("", ""))[0]
                if uid != agent.uid or agent.proc.poll() is not None:
                    self._end(name, agent)
                    del self.agents[name]
            for name, (uid, node) in sorted(live.items()):
                if name not in self.agents and node and not self._stop.is_set():
                    self.agents[name] = self._spawn(name, uid, node)

    def _spawn(self, pod: str, uid: str, node: str) -> _Agent:
        env = {
            **self.env,
            **self.env_for(pod),
            "POD_NAME": pod,
            "POD_UID": uid,
            "POD_NAMESPACE": self.namespace,
            "NODE_NAME": node,
        }
        log = self.logs / f"agent-{pod}.log"
        self._note({"event": "keeper.agent_start", "pod": pod, "uid": uid, "node": node})
        return _Agent(uid=uid, daemon=Daemon(role="agent", env=env, log=log).start())

    def _end(self, pod: str, agent: _Agent) -> None:
        self._note({"event": "keeper.agent_stop", "pod": pod, "uid": agent.uid})
        agent.daemon.stop(grace_s=10.0)

    def _note(self, fields: dict[str, object]) -> None:
        with (self.logs / "agent-keeper.log").open("a") as out:
            out.write(json.dumps({"t": time.time(), **fields}) + "\n")


__all__ = ["AgentKeeper"]

"""The demo's access to a running sandbox: SLURM clients, the apiserver, checks, job watch.

:class:`Sandbox` runs SLURM commands the way the sandbox's mode calls for: the host's clients
with the sandbox's ``SLURM_CONF`` (process mode), or ``kubectl exec`` into the slurmctld
container and ``sbatch`` over SSH as the user on the login pod (real mode, the chart on a
real node). :func:`check` waits for a state and prints it as passed; :class:`JobWatch`
samples job and node states in the background so a killed job is seen even if it is
requeued later. Used by :mod:`slonkd_sandbox.sandbox.demo` and its real-mode scenes.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slonkd_sandbox.kube.api import KubeApi
from slonkd_sandbox.sampling import Sampler

KILLED = frozenset(
    {"FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL", "PREEMPTED", "OUT_OF_MEMORY"}
)


class DemoFailed(Exception):
    """A check did not hold."""


def say(message: str) -> None:
    """Print a line of the demo at once."""
    print(message, flush=True)


@dataclass(slots=True)
class Sandbox:
    """Access to a running sandbox: SLURM clients, the apiserver, and what the demo saw."""

    state: dict[str, Any]
    api: KubeApi
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def ns(self) -> str:
        """The namespace of the worker pods."""
        return str(self.state["namespace"])

    @property
    def real(self) -> bool:
        """The chart on a real node (``up --real``), not processes next to a stand-in."""
        return self.state.get("mode") == "real"

    @property
    def slow(self) -> float:
        """Factor on every wait: containers start slower than processes."""
        return 4.0 if self.real else 1.0

    def kubectl(self, *argv: str) -> list[str]:
        """argv of kubectl against the sandbox's apiserver."""
        return [self.state["kubectl"], f"--kubeconfig={self.state['kubeconfig']}", *argv]

    # -- SLURM -----------------------------------------------------------------------------

    def slurm(self, *argv: str, show: bool = False) -> str:
        """Run a SLURM client against the sandbox; its stdout."""
        if show:
            say(f"    $ {'slurm ' if self.real else ''}{shlex.join(argv)}")
        env = {**os.environ, "SLURM_CONF": self.state.get("slurm_conf", "")}
        full = list(argv)
        if self.real:  # the operator's way in: kubectl exec into the slurmctld container
            ctl = self.state["controller"]
            full = self.kubectl("exec", "-n", self.ns, ctl["pod"], "-c", ctl["container"], "--")
            full += argv
        proc = subprocess.run(
            full, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        if proc.returncode != 0:
            raise DemoFailed(f"{' '.join(argv)}: {proc.stderr.strip()[:300]}")
        return proc.stdout

    def node(self, name: str) -> dict[str, str]:
        """``scontrol show node`` as fields (Reason keeps its spaces)."""
        text = self.slurm("scontrol", "-o", "show", "node", name).strip()
        fields: dict[str, str] = {}
        head, sep, reason = text.partition(" Reason=")
        for tok in head.split():
            key, _, value = tok.partition("=")
            fields[key] = value
        if sep:
            fields["Reason"] = reason.split(" [")[0].strip()
        return fields

    def in_service(self, name: str) -> bool:
        """Idle, mixed or allocated, with no drain, down or fail and no reason."""
        f = self.node(name)
        state = f.get("State", "")
        return not any(w in state for w in ("DRAIN", "DOWN", "FAIL", "NOT_RESPONDING")) and (
            "Reason" not in f
        )

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as fields."""
        text = self.slurm("scontrol", "-o", "show", "job", job_id)
        return dict(tok.split("=", 1) for tok in text.split() if "=" in tok)

    def submit(self, *extra: str) -> str:
        """A requeueable batch job that sleeps; its id."""
        return self.sbatch("--requeue", *extra, wrap="sleep 3600")

    def sbatch(self, *extra: str, wrap: str) -> str:
        """A batch job running ``wrap``; its id. Real mode: over SSH as the user."""
        argv = ("sbatch", "--parsable", "-o", "/dev/null", *extra, "--wrap", wrap)
        if not self.real:
            return self.slurm(*argv, show=True).strip().split(";")[0]
        from slonkd_sandbox.sandbox.real import ssh_argv

        say(f"    $ login {shlex.join(argv)}        # ssh {self.state['login']['user']}@login")
        login = self.pod(self.state["login"]["pod"]) or {}
        remote = shlex.join(argv)  # ssh hands the words to the login shell
        full = [*ssh_argv(self.state, login.get("status", {}).get("podIP", "")), remote]
        proc = subprocess.run(full, capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            raise DemoFailed(f"ssh sbatch: {proc.stderr.strip()[:300]}")
        return proc.stdout.strip().split(";")[0]

    # -- Kubernetes --------------------------------------------------------------------------

    def pod(self, name: str) -> dict[str, Any] | None:
        """The pod's JSON (None when absent)."""
        items = self.api.request(
            "GET",
            f"/api/v1/namespaces/{self.ns}/pods",
            params={"fieldSelector": f"metadata.name={name}"},
        )["items"]
        return items[0] if items else None

    def pod_ready(self, name: str, *, not_uid: str = "") -> bool:
        """Running and Ready (and, if given, not the pod with uid ``not_uid``)."""
        pod = self.pod(name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return False
        if not_uid and pod["metadata"]["uid"] == not_uid:
            return False
        conds = pod.get("status", {}).get("conditions") or []
        return pod.get("status", {}).get("phase") == "Running" and any(
            c["type"] == "Ready" and c["status"] == "True" for c in conds
        )

    def knode(self, name: str) -> dict[str, Any]:
        """A K8s node's JSON."""
        return dict(self.api.request("GET", f"/api/v1/nodes/{name}"))

    def sts(self) -> dict[str, Any]:
        """The worker StatefulSet."""
        path = f"/apis/apps/v1/namespaces/{self.ns}/statefulsets/{self.state['statefulset']}"
        return dict(self.api.request("GET", path))


def wait(what: str, probe: Callable[[], bool], timeout_s: float) -> float:
    """Poll ``probe`` (0.2 s) until true; the seconds it took. DemoFailed on timeout."""
    began = time.monotonic()
    while True:
        try:
            if probe():
                return time.monotonic() - began
        except DemoFailed:
            pass
        if time.monotonic() - began > timeout_s:
            raise DemoFailed(f"{what}: not seen within {timeout_s:.0f} s")
        time.sleep(0.2)


def check(sb: Sandbox, what: str, probe: Callable[[], bool], timeout_s: float) -> None:
    """Wait for ``probe`` and print the check as passed."""
    took = wait(what, probe, timeout_s * sb.slow)
    say(f"    ok  {what} ({took:.1f} s)")
    sb.record.setdefault("checks", []).append(what)


class JobWatch(Sampler):
    """Samples job states in the background: a killed job is seen even if requeued later."""

    def __init__(self, sb: Sandbox, jobs: list[str]) -> None:
        super().__init__()
        self.sb, self.jobs = sb, jobs
        self.seen: dict[str, set[str]] = {j: set() for j in jobs}
        self.most_out = 0

    def sample(self) -> None:
        """The jobs' states, and how many workers are out at once."""
        workers = self.sb.state["workers"]
        try:
            for job in self.jobs:
                self.seen[job].add(self.sb.job(job).get("JobState", "?"))
            out = self.sb.slurm("sinfo", "-h", "-N", "-o", "%N %t")
        except (DemoFailed, subprocess.TimeoutExpired):
            return
        down = {
            n
            for n, s in (line.split() for line in out.splitlines() if line.strip())
            if n in workers and any(w in s for w in ("drain", "drng", "down", "fail"))
        }
        self.most_out = max(self.most_out, len(down))

    def killed(self) -> dict[str, set[str]]:
        """Jobs seen in a state that means killed."""
        return {j: s & KILLED for j, s in self.seen.items() if s & KILLED}


__all__ = ["KILLED", "DemoFailed", "JobWatch", "Sandbox", "check", "say", "wait"]

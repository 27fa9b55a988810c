"""``slonkd sandbox up`` and ``down``: the sandbox as a detached process tree, and its end.

``up`` checks what the machine must have (Debian's SLURM, munge and mosquitto), builds the
Kubernetes binaries if they are not cached yet (with the toolchain's progress), then starts
``slonkd sandbox run`` in a new session, detached, with its output in ``<dir>/sandbox.log``,
and shows that log until the sandbox wrote ``ready`` into ``<dir>/state.json`` (or died).

With ``--real`` it starts ``slonkd sandbox run --real`` the same way
(:mod:`slonkd_sandbox.sandbox.real`: the chart on a real node; root needed).

``down`` stops exactly what ``up`` started: the supervisor recorded in ``state.json`` (pid
and start time, so a reused pid is never signalled) gets SIGTERM and stops its services in
order; then every process the state recorded, and every process still below the supervisor,
is checked by pid and start time and, only if it is still that same process, killed. In the
real mode it then checks that the node left nothing behind (processes, mounts, its network
namespace) and lists what it finds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from slonkd_sandbox.sandbox.real import missing_programs as real_missing_programs
from slonkd_sandbox.sandbox.run import MARKER, descendants, prepare_dir, proc_start_time

NEEDED = ("slurmctld", "slurmd", "scontrol", "sinfo", "sbatch", "munged", "mosquitto")
DOWN_TIMEOUT_S = 90.0
REAL_DOWN_TIMEOUT_S = 300.0
"""The real node stops every container, unmounts and removes its namespace: give it time."""


def _say(message: str) -> None:
    print(f"[sandbox] {message}", flush=True)


def read_state(root: Path) -> dict[str, Any] | None:
    """The sandbox's ``state.json``, or None."""
    try:
        doc = json.loads((root / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _alive(entry: dict[str, Any]) -> bool:
    """Whether the recorded process still runs (same pid, same start time)."""
    return proc_start_time(int(entry["pid"])) == entry.get("start")


def missing_programs() -> list[str]:
    """The programs the sandbox runs that are not installed."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [p for p in NEEDED if shutil.which(p, path=path) is None]


def up(
    root: Path,
    *,
    workers: int,
    real: bool = False,
    accounting: bool = False,
    timeout_s: float = 0.0,
) -> int:
    """Start the sandbox detached; return once it is ready (0) or failed (1)."""
    began = time.monotonic()
    timeout_s = timeout_s or (1800.0 if real else 900.0)  # real, cold: images and kubelet
    state = read_state(root)
    if state and not state.get("stopped") and _alive(state["supervisor"]):
        _say(f"a sandbox is running in {root} already: `slonkd sandbox down --dir {root}` first")
        return 1
    if real and os.geteuid() != 0:
        _say("--real needs root (network namespace, mounts, containerd)")
        return 1
    missing = real_missing_programs() if real else missing_programs()
    if missing:
        _say(
            f"missing programs: {', '.join(missing)}. Run scripts/bootstrap from the repository "
            "(it installs Debian's slurmctld slurmd slurm-client munge mosquitto)"
        )
        return 1
    _say("Kubernetes binaries (built from Go modules on first use, cached afterwards)")
    from slonkd_sandbox.toolchain import ToolchainError, ensure_tools

    try:
        ensure_tools()  # prints its progress; nothing to do when cached
    except ToolchainError as exc:
        _say(f"cannot build the Kubernetes binaries: {exc} (Go >= 1.25 is needed once)")
        return 1
    prepare_dir(root)
    log = root / "sandbox.log"
    with log.open("ab") as out, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "slonkd_sandbox",  # slonkd sandbox, installed or only checked out
                "run",
                "--dir",
                str(root),
                "--workers",
                str(workers),
                "--keep-dir",
                *(["--accounting"] if accounting else []),
                *(["--real"] if real else []),
            ],
            stdin=devnull,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # detached: no terminal signal reaches it
        )
    _say(f"started the {'real-node ' if real else ''}sandbox (pid {proc.pid}); its log: {log}")
    try:
        ready = follow(root, log, proc, deadline=began + timeout_s)
    except KeyboardInterrupt:
        _say("interrupted: stopping what was started")
        down(root)
        return 130
    if ready:
        _say(f"up in {time.monotonic() - began:.1f} s (detached; pid {proc.pid})")
        return 0
    if proc.poll() is not None:
        _say(f"the sandbox exited ({proc.returncode}) before it was ready; see {log}")
        return 1
    _say(f"not ready after {timeout_s:.0f} s: stopping it")
    down(root)
    return 1


def follow(root: Path, log: Path, proc: subprocess.Popen[bytes], *, deadline: float) -> bool:
    """Show ``log`` as it grows until the state says ready (True), the runner died or time ran out.

    The state is read before the log: the runner prints where to look and only then writes
    ``ready``, so the log read after a ready state holds those lines (read the other way
    round, a state that turned ready between the two reads ended ``up`` without them).
    """
    shown = 0
    while True:
        ended = proc.poll() is not None or time.monotonic() > deadline  # its last lines still show
        state = read_state(root)
        text = log.read_text(errors="replace")
        if len(text) > shown:
            sys.stdout.write(text[shown:])
            sys.stdout.flush()
            shown = len(text)
        if state and state.get("ready"):
            return True
        if ended:
            return False
        time.sleep(0.2)


def down(root: Path) -> int:
    """Stop what ``up`` started in ``root`` and nothing else; 0 when nothing of it is left."""
    state = read_state(root)
    if state is None or not (root / MARKER).exists():
        _say(f"no sandbox in {root}")
        return 0
    supervisor = state["supervisor"]
    recorded = list(state.get("processes", []))
    if _alive(supervisor):
        recorded += descendants(int(supervisor["pid"]))  # agents of pods made since `up`
        _say(f"stopping the sandbox (pid {supervisor['pid']})")
        os.kill(int(supervisor["pid"]), signal.SIGTERM)
        real = state.get("mode") == "real"
        deadline = time.monotonic() + (REAL_DOWN_TIMEOUT_S if real else DOWN_TIMEOUT_S)
        while _alive(supervisor) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(supervisor):
            _say("the sandbox did not stop in time: killing it")
            os.kill(int(supervisor["pid"]), signal.SIGKILL)
    left = [p for p in recorded if _alive(p)]
    if left:
        time.sleep(2.0)  # parent-death signals and last SIGTERMs land
        left = [p for p in recorded if _alive(p)]
    for entry in left:
        _say(f"killing leftover pid {entry['pid']}: {entry['cmd'][:80]}")
        try:
            os.kill(int(entry["pid"]), signal.SIGKILL)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in left) and time.monotonic() < deadline:
        time.sleep(0.1)
    still = [p for p in left if _alive(p)]
    (root / "env.sh").unlink(missing_ok=True)
    state = read_state(root) or state
    state.update({"ready": False, "stopped": True})
    (root / "state.json").write_text(json.dumps(state, indent=2))
    if still:
        _say(f"{len(still)} process(es) could not be stopped: {[p['pid'] for p in still]}")
        return 1
    if state.get("mode") == "real":
        from slonkd_sandbox.sandbox.real import host_leftovers

        left_behind = host_leftovers(state)
        deadline = time.monotonic() + 15  # a child killed with its parent may still be exiting
        while left_behind and time.monotonic() < deadline:
            time.sleep(0.5)
            left_behind = host_leftovers(state)
        for item in left_behind:
            _say(f"left behind: {item}")
        if left_behind:
            return 1
    _say(f"stopped; logs kept in {root}")
    return 0


__all__ = ["down", "missing_programs", "read_state", "up"]

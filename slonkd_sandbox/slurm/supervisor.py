"""PID 1 of the harness's SLURM PID namespace: starts and stops munged, slurmctld and slurmd.

Run by :class:`slonkd_sandbox.slurm.cluster.SlurmCluster` as
``unshare --pid --fork --mount-proc --kill-child=SIGKILL python -m slonkd_sandbox.slurm.supervisor
SPEC``. Because it is the namespace's init, every daemon and job step of the cluster dies
with it; it exits when its stdin closes (its parent went away) or on ``shutdown``.

Each slurmd runs in a PID namespace of its own (a nested ``unshare``), as a container would:
stopping it the way a kubelet stops a container (SIGTERM, then SIGKILL after a grace) also
kills that node's job steps, so a test sees its jobs hit by a dying node as in a real cluster.

Control: a Unix socket (``SPEC.socket``) taking one JSON object per line and answering one
JSON line: ``{"op": "status"}``, ``{"op": "start_slurmd", "node": N}``,
``{"op": "stop_slurmd", "node": N, "grace_s": S}``, ``{"op": "kill_slurmd", "node": N}``,
``{"op": "start_slurmctld"}``, ``{"op": "stop_slurmctld", "grace_s": S}``,
``{"op": "kill_slurmctld"}``, ``{"op": "shutdown"}``, ``{"op": "start_slurmdbd"}``,
``{"op": "stop_slurmdbd", "grace_s": S}`` (clusters with accounting), and
``{"op": "reboot_slurmd", "node": N}``:
it answers at once and two seconds later stops that slurmd as a kubelet would and starts it
again with a fresh boot time (the harness's RebootProgram sends it, so ``scontrol reboot``
completes as after a real reboot). With accounting (``SPEC.accounting``, see
:mod:`slonkd_sandbox.accounting`) it first starts mariadbd and slurmdbd and registers the
cluster with ``sacctmgr``, then slurmctld. Any process that can reach the socket
(the pytest process, the kubelet stand-in) may send them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_procs: dict[str, subprocess.Popen[bytes]] = {}
_spec: dict[str, Any] = {}
_done = threading.Event()


def _log_path(name: str) -> Path:
    return Path(_spec["root"]) / "log" / f"{name}.out"


def _spawn(key: str, argv: list[str]) -> int:
    old = _procs.get(key)
    if old is not None and old.poll() is None:
        return old.pid
    log = _log_path(key)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "SLURM_CONF": _spec["slurm_conf"]},
        )
    _procs[key] = proc
    return proc.pid


def _inner_pid(proc: subprocess.Popen[bytes]) -> int | None:
    """The pid (in our namespace) of the first child of a nested ``unshare --fork``."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _stop(key: str, grace_s: float, *, nested: bool) -> str:
    proc = _procs.get(key)
    if proc is None or proc.poll() is not None:
        return "not-running"
    target = _inner_pid(proc) if nested else proc.pid
    if grace_s > 0 and target is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
            return "terminated"
        except subprocess.TimeoutExpired:
            pass
    if nested and target is not None:
        # SIGKILL the namespace's init: the kernel then kills every process in it.
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)
    proc.kill()
    proc.wait(timeout=10)
    return "killed"


def _slurmd_argv(node: str, *, booted_now: bool = False) -> list[str]:
    """The argv of ``node``'s slurmd in a PID namespace of its own.

    ``booted_now``: also in a time namespace whose boot time is now, so slurmctld, which
    compares the boot time slurmd reports with its reboot request, sees the reboot complete.
    """
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    # Uptime under a second: the boot time lands after slurmctld's reboot request time.
    fresh = ["--time", f"--boottime={-int(uptime)}"] if booted_now else []
    return [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        *fresh,
        "--kill-child=SIGKILL",
        *_spec["slurmd_argv"],
        "-N",
        node,
    ]


def _handle(request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    node = str(request.get("node", ""))
    grace = float(request.get("grace_s", 0))
    if op in {"start_slurmd", "stop_slurmd", "kill_slurmd", "reboot_slurmd"} and (
        node not in _spec["nodes"]
    ):
        return {"ok": False, "error": f"unknown node {node!r}"}
    with _lock:
        if op == "status":
            return {
                "ok": True,
                "running": {k: p.pid for k, p in _procs.items() if p.poll() is None},
            }
        if op == "start_slurmd":
            return {"ok": True, "pid": _spawn(f"slurmd-{node}", _slurmd_argv(node))}
        if op == "stop_slurmd":
            return {"ok": True, "how": _stop(f"slurmd-{node}", grace, nested=True)}
        if op == "kill_slurmd":
            return {"ok": True, "how": _stop(f"slurmd-{node}", 0, nested=True)}
        if op == "reboot_slurmd":
            threading.Thread(target=_reboot, args=(node,), daemon=True).start()
            return {"ok": True}
        if op == "start_slurmctld":
            return {"ok": True, "pid": _spawn("slurmctld", _spec["slurmctld_argv"])}
        if op == "stop_slurmctld":
            return {"ok": True, "how": _stop("slurmctld", grace or 5.0, nested=False)}
        if op == "kill_slurmctld":
            return {"ok": True, "how": _stop("slurmctld", 0, nested=False)}
        if op == "start_slurmdbd" and "accounting" in _spec:
            return {"ok": True, "pid": _spawn("slurmdbd", _spec["accounting"]["slurmdbd_argv"])}
        if op == "stop_slurmdbd" and "accounting" in _spec:
            return {"ok": True, "how": _stop("slurmdbd", grace or 5.0, nested=False)}
        if op == "shutdown":
            _done.set()
            return {"ok": True}
    return {"ok": False, "error": f"unknown op {op!r}"}


def _wait(what: str, ready: Any, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout_s} s")
        time.sleep(0.05)


def _ok(argv: list[str]) -> bool:
    proc = subprocess.run(
        argv,
        capture_output=True,
        env={**os.environ, "SLURM_CONF": _spec["slurm_conf"]},
        timeout=30,
        check=False,
    )
    return proc.returncode == 0


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _start_accounting(acct: dict[str, Any]) -> None:
    """mariadbd, slurmdbd's database account, slurmdbd, then the cluster in sacctmgr."""
    _spawn("mariadbd", acct["mariadbd_argv"])
    _wait("mariadbd", lambda: _ok(acct["grant_argv"]), _procs["mariadbd"])
    _spawn("slurmdbd", acct["slurmdbd_argv"])
    _wait("slurmdbd", lambda: _listening(int(acct["slurmdbd_port"])), _procs["slurmdbd"])
    for argv in acct["setup_argvs"]:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env={**os.environ, "SLURM_CONF": _spec["slurm_conf"]},
            timeout=60,
            check=False,
        )
        out = proc.stdout + proc.stderr
        if proc.returncode != 0 and "Nothing new added" not in out:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {out[-500:]}")


def _reboot(node: str) -> None:
    """Restart ``node``'s slurmd once its RebootProgram returned (a reboot, as SLURM sees it)."""
    time.sleep(2.0)
    with _lock:
        _stop(f"slurmd-{node}", 5.0, nested=True)
        _spawn(f"slurmd-{node}", _slurmd_argv(node, booted_now=True))


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for raw in self.rfile:
            try:
                request = json.loads(raw)
                if not isinstance(request, dict):
                    raise ValueError("request must be an object")
                reply = _handle(request)
            except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            self.wfile.write(json.dumps(reply).encode() + b"\n")
            self.wfile.flush()


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def _watch_stdin() -> None:
    while sys.stdin.buffer.read(4096):
        pass
    _done.set()


def main() -> int:
    """Start munged, slurmctld and every slurmd, then serve the control socket."""
    _spec.update(json.loads(Path(sys.argv[1]).read_text()))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: _done.set())
    _spawn("munged", _spec["munged_argv"])
    munge_socket = Path(_spec["munge_socket"])
    deadline = time.monotonic() + 20
    while not munge_socket.exists():
        if time.monotonic() > deadline or _procs["munged"].poll() is not None:
            print("munged did not start", file=sys.stderr)
            return 1
        time.sleep(0.02)
    if "accounting" in _spec:
        try:
            _start_accounting(_spec["accounting"])
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"accounting did not start: {exc}", file=sys.stderr)
            return 1
    _spawn("slurmctld", _spec["slurmctld_argv"])
    for node in _spec["autostart"]:
        _spawn(f"slurmd-{node}", _slurmd_argv(node))
    server = _Server(_spec["socket"], _Handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    threading.Thread(target=_watch_stdin, daemon=True).start()
    print("supervisor ready", flush=True)
    _done.wait()
    server.shutdown()
    # The cluster is thrown away: give the controllers a moment to save their state, then
    # exit; as the namespace's init exits, the kernel SIGKILLs whatever is left (slurmd too).
    with _lock:
        for proc in _procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 0.5
        for key, proc in _procs.items():
            if key.startswith("slurmd-"):
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    # Not a normal interpreter exit: the stdin watcher may sit in read(), and finalizing
    # under it waits on the reader's lock, then aborts ("could not acquire lock for
    # <stdin>"), over a second per cluster stopped (measured: 1.6 s from shutdown to exit).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())

"""Process plumbing shared by the harness services: free ports, readiness polls, children.

Every child the harness starts gets ``PR_SET_PDEATHSIG=SIGKILL`` so that it dies with the
process that started it, even when that process is SIGKILLed: a crashed test run leaves no
daemon behind. Children are started from argv lists, never through a shell.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Self

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


class HarnessError(RuntimeError):
    """A real service could not be started, reached or stopped."""


class StartStop:
    """A harness service used with ``with``: entering calls :meth:`start`, leaving :meth:`stop`."""

    __slots__ = ()

    def start(self) -> None:
        """Start the service (each service says how)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the service (each service says how)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL the calling process when its parent exits (preexec_fn)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


LISTEN_FLOOR = 10000
"""The lowest port the harness listens on (below it: well-known and registered services)."""


PORT_SLICE_ENV = "SLONKD_SANDBOX_PORT_SLICE"
"""``K/N``: this process (and its children) listen only in the K-th of N equal slices of
:func:`listen_span` (K from 0). Runs side by side (parallel test workers) set it so that
two of them never pick the same free port in the moment between the check and the bind."""


def listen_span() -> tuple[int, int]:
    """The ports ``[first, stop)`` this process's servers listen on (see :func:`whole_span`).

    Its slice of them where :data:`PORT_SLICE_ENV` names one; a malformed value is an error
    that names the variable.
    """
    first, stop = whole_span()
    raw = os.environ.get(PORT_SLICE_ENV)
    if not raw:
        return first, stop
    try:
        k, n = (int(x) for x in raw.split("/"))
        if not 0 <= k < n:
            raise ValueError
    except ValueError:
        raise HarnessError(f"{PORT_SLICE_ENV}={raw!r}: want K/N with 0 <= K < N") from None
    width = (stop - first) // n
    return first + k * width, first + (k + 1) * width


def whole_span() -> tuple[int, int]:
    """The ports ``[first, stop)`` the harness's servers listen on: outside the ephemeral range.

    A daemon the harness restarts on its port (an agent, a coordinator, slurmctld, the
    broker) must find it free again. In the kernel's ephemeral range
    (``ip_local_port_range``) any outbound connection made while the daemon was down may take
    that port as its local end and hold it as long as it lives: the soak saw an agent's port
    held by another agent's broker connection for four minutes. In a cluster every pod has its
    own network namespace, so this is the harness's problem only.
    """
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    if low - LISTEN_FLOOR >= 4096:
        return LISTEN_FLOOR, low
    return high + 1, 65536  # a range set low: listen above it


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports on 127.0.0.1 that were free a moment ago.

    From :func:`listen_span` (never the ephemeral range), from a random start so that runs
    side by side rarely probe the same ports.
    """
    first, stop = listen_span()
    width = stop - first
    base = int.from_bytes(os.urandom(2), "big") % width
    chosen: list[int] = []
    for offset in range(width):
        port = first + (base + offset) % width
        if _port_free(port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise HarnessError(f"no {count} free ports in [{first}, {stop})")


def free_port_range(count: int) -> int:
    """Return the first port of ``count`` consecutive ports that are all free now.

    slurm.conf gives slurmd a ``Port=[a-b]`` range, so its ports must be consecutive. From
    :func:`listen_span`, from a random start so that runs side by side rarely probe the same
    range.
    """
    start, stop = listen_span()
    rng = int.from_bytes(os.urandom(2), "big")
    base = start + (rng * 7) % (stop - start - count)
    for offset in range(0, stop - start, count + 1):
        first = start + (base - start + offset) % (stop - start - count)
        if all(_port_free(p) for p in range(first, first + count)):
            return first
    raise HarnessError(f"no {count} consecutive free ports")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for(
    what: str,
    probe: Callable[[], bool],
    *,
    timeout_s: float,
    interval_s: float = 0.05,
    alive: Callable[[], str | None] | None = None,
) -> float:
    """Poll ``probe`` until it is true; return the seconds it took.

    ``alive`` returns an error text when the service died meanwhile, so a crashed daemon
    fails fast with its reason instead of a timeout.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        try:
            if probe():
                return time.monotonic() - started
        except Exception:  # noqa: BLE001, S110 - a probe that raises means "not ready yet"
            pass
        if alive is not None:
            problem = alive()
            if problem:
                raise HarnessError(f"{what}: {problem}")
        if time.monotonic() > deadline:
            raise HarnessError(f"{what}: not ready after {timeout_s:.0f} s")
        time.sleep(interval_s)


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin: int | None = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """Start a daemon with stdout+stderr to ``log``; it dies when this process dies."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            preexec_fn=die_with_parent,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes], *, grace_s: float = 5.0, sig: int = signal.SIGTERM) -> None:
    """Send ``sig``, wait up to ``grace_s``, then SIGKILL; always reaps the child."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def exited(proc: subprocess.Popen[bytes], log: Path) -> Callable[[], str | None]:
    """An ``alive`` callback for :func:`wait_for` that reports an early exit with its log."""

    def check() -> str | None:
        if proc.poll() is None:
            return None
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        return f"exited with {proc.returncode}; log tail:\n{tail}"

    return check


def tail(path: Path, limit: int = 2000) -> str:
    """Last ``limit`` characters of a log file, for error messages."""
    return path.read_text(errors="replace")[-limit:] if path.exists() else "(no log)"


def output(argv: Sequence[str], *, check: bool = True, timeout_s: float = 60.0) -> str:
    """Run a short command (argv, no shell) and return its stdout; raise on failure if ``check``."""
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and proc.returncode != 0:
        raise HarnessError(f"{' '.join(argv)} failed (rc {proc.returncode}): {proc.stderr[-1500:]}")
    return proc.stdout

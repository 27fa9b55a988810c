"""Probe runners: commands, path stats, TCP connects and kernel-log reads, each with a deadline.

A probe never hangs the agent: every external call has a timeout, and work that can block
in the kernel (stat of an NFS mount, a tool stuck in D state) runs in a child process. A
child that does not die when killed is *stuck*: :class:`ProbeGuard` remembers it and never
starts the same probe again on top of it; stuck probes are counted and reported as
``unknown`` with ``timed_out`` set, which the hysteresis turns into a fail when it repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

KILL_WAIT_S: Final = 1.0
"""How long a killed probe may take to disappear before it counts as stuck."""

_HOST_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a command probe produced."""

    rc: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    missing: bool = False
    """The tool is not installed."""
    stuck: bool = False
    """An earlier run of this probe is still alive; nothing was started."""


@dataclass(slots=True)
class ProbeGuard:
    """Per-probe bookkeeping of children that outlived their deadline."""

    running: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    stuck_total: int = 0

    def busy(self, key: str) -> bool:
        """Whether an earlier child of ``key`` is still alive."""
        proc = self.running.get(key)
        if proc is None:
            return False
        if proc.returncode is None:
            return True
        del self.running[key]
        return False

    @property
    def stuck_now(self) -> list[str]:
        """Keys whose child is still alive after its deadline."""
        return sorted(k for k in list(self.running) if self.busy(k))


async def run_command(
    key: str,
    argv: Sequence[str],
    *,
    timeout_s: float,
    guard: ProbeGuard,
    max_output: int = 1 << 20,
) -> Outcome:
    """Run ``argv`` (never a shell) with a deadline; kill it when late, note it when stuck."""
    if guard.busy(key):
        return Outcome(rc=None, timed_out=True, stuck=True)
    if shutil.which(argv[0]) is None:
        return Outcome(rc=None, missing=True)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        return Outcome(rc=None, missing=True)
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except TimeoutError:
        await _kill(key, proc, guard)
        return Outcome(rc=None, timed_out=True)
    return Outcome(
        rc=proc.returncode,
        stdout=out[:max_output].decode(errors="replace"),
        stderr=err[:max_output].decode(errors="replace"),
    )


async def _kill(key: str, proc: asyncio.subprocess.Process, guard: ProbeGuard) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 9)
    try:
        async with asyncio.timeout(KILL_WAIT_S):
            await proc.wait()
    except TimeoutError:
        guard.running[key] = proc  # in D state: SIGKILL waits for the kernel
        guard.stuck_total += 1


_STAT_CHILD: Final = (
    "import json, os, stat, sys\n"
    "p = sys.argv[1]\n"
    "try:\n"
    "    st = os.stat(p)\n"
    "    if stat.S_ISDIR(st.st_mode):\n"
    "        with os.scandir(p) as it:\n"
    "            next(it, None)\n"
    "    else:\n"
    "        with open(p, 'rb') as f:\n"
    "            f.read(1)\n"
    "    print(json.dumps({'ok': True, 'mount': os.path.ismount(p)}))\n"
    "except OSError as e:\n"
    "    print(json.dumps({'ok': False, 'error': f'{e.strerror} ({e.errno})'}))\n"
)
"""stat the path, then list one entry of a directory or read one byte of a file: a hung
NFS server blocks either (and so does a FIFO with no writer, which tests use)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PathProbe:
    """Whether a path answered a stat in time, and if it is a mount point."""

    responded: bool
    is_mount: bool | None = None
    error: str = ""
    stuck: bool = False


async def probe_path(path: str, *, timeout_s: float, guard: ProbeGuard) -> PathProbe:
    """stat ``path`` in a child process: a hung NFS mount blocks the child, not the agent."""
    outcome = await run_command(
        f"stat:{path}",
        [sys.executable, "-I", "-c", _STAT_CHILD, path],
        timeout_s=timeout_s,
        guard=guard,
    )
    if outcome.timed_out or outcome.rc is None:
        return PathProbe(responded=False, stuck=outcome.stuck)
    try:
        answer = json.loads(outcome.stdout)
    except json.JSONDecodeError:
        return PathProbe(responded=True, error=f"probe failed: {outcome.stderr[-200:]}")
    if not answer.get("ok"):
        return PathProbe(responded=True, error=str(answer.get("error", "?")))
    return PathProbe(responded=True, is_mount=bool(answer.get("mount")))


async def tcp_listening(host: str, port: int, *, timeout_s: float) -> tuple[bool, str]:
    """Whether something accepts TCP connections on ``host:port`` (and why not)."""
    try:
        async with asyncio.timeout(timeout_s):
            _reader, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return False, "connect timed out"
    except OSError as exc:
        return False, exc.strerror or str(exc)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True, ""


async def ping(peer: str, *, timeout_s: float, guard: ProbeGuard) -> bool:
    """One ICMP echo to ``peer`` (a checked host name or address, never an option)."""
    if not _HOST_RE.fullmatch(peer):
        raise ValueError(f"not a host name or address: {peer[:80]!r}")
    wait = str(max(1, int(timeout_s)))
    outcome = await run_command(
        f"ping:{peer}",
        ["ping", "-n", "-q", "-c", "1", "-W", wait, "--", peer],
        timeout_s=timeout_s + 1,
        guard=guard,
    )
    return outcome.rc == 0


class KmsgReader:
    """Reads new kernel log records from ``/dev/kmsg`` without blocking."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self._path = path
        self._fd: int | None = None
        self._partial = ""

    def read_new(self, limit: int = 100_000) -> list[str]:
        """Records added since the last call (all of the ring buffer on the first call)."""
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDONLY | os.O_NONBLOCK)
        records: list[str] = []
        while len(records) < limit:
            try:
                chunk = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before we read them
                    continue
                raise
            if not chunk:
                break
            # /dev/kmsg gives one whole record per read; a plain file (a saved dmesg) gives
            # many lines per read, the last maybe cut: keep that part for the next read.
            text = self._partial + chunk.decode(errors="replace")
            *lines, self._partial = text.split("\n")
            records.extend(lines)
        return records

    def close(self) -> None:
        """Release the file descriptor."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

"""The parent's side of the pyslurm child: start it, ask it one op at a time, restart it.

:class:`PyslurmChild` runs :mod:`slonkd.adapters.slurm.pyslurm_child` as an asyncio
subprocess (``[*prefix, python, -m, MODULE, CONF]``, argv only) with ``PYTHONPATH`` led by
the pyslurm build's site, and speaks its JSON lines with request ids:

- The start waits for the child's ``{"ready": ...}`` hello (kept in :attr:`hello`) for
  ``CHILD_START_S``. A child that dies first on the very first start is a TerminalError (an
  import error, an undefined symbol, a release mismatch: this build cannot serve), unless its
  last words say the controller could not be reached; any later start failure is transient.
- One op in flight, behind an :class:`asyncio.Lock` (the child is serial). Each op has its
  own timeout: past it the child is killed (SIGKILL) and the op is a TransientError.
- A child that died (or was killed) is started again by the next op, at waits doubling from
  ``RESTART_S`` to ``RESTART_MAX_S`` while it keeps dying (:class:`~slonkd.adapters.slurm.
  slurm_child.Restarts`, shared with the libslurm child); meanwhile ops fail fast.
- An answer's error word becomes slonkd's error (:func:`~slonkd.adapters.slurm.
  parsing_pyslurm.error_for`); a line that is not JSON or answers another id is dropped.

Writes (``write=True``, :mod:`slonkd.adapters.slurm.pyslurm_writes`): the child says
``{"id": n, "sending": ...}`` right before each request leaves it. A write whose child dies or
times out before that line never reached slurmctld (:class:`~slonkd.adapters.slurm.runner.
NotReachedError`: the compare-and-set may send it again after a read); after it, the outcome
is unknown (:class:`~slonkd.core.errors.OutcomeUnknownError`: never sent again), unless the
child's last words say it could not reach the controller (libslurm ends the process when the
controller's name does not resolve, before anything left). A leader's fencing check
(:func:`~slonkd.core.fencing.before_write`) runs right before the request line is written,
with no await between: one check a request, as for one ``scontrol`` process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from slonkd.adapters.slurm import slurm_child
from slonkd.adapters.slurm.parsing import MAX_OUTPUT_BYTES
from slonkd.adapters.slurm.parsing_pyslurm import error_for
from slonkd.adapters.slurm.runner import NotReachedError, count_calls
from slonkd.core.errors import OutcomeUnknownError, SlonkdError, TerminalError, TransientError
from slonkd.core.fencing import before_write
from slonkd.core.log_events import SLURM_PYSLURM_CHILD_EXITED

log = structlog.get_logger("slonkd.slurm")

MODULE = "slonkd.adapters.slurm.pyslurm_child"
_NAME = "pyslurm child"
_CONTACT_WORDS = ("unable to resolve", "unable to contact", "connection refused")
"""Last words of a start that failed for the controller, not for the build: transient."""


def child_env(env: Mapping[str, str], pyslurm_path: str = "") -> dict[str, str]:
    """The child's environment: ours, ``env`` over it, ``PYTHONPATH`` led by ``pyslurm_path``."""
    out = {**os.environ, **env}
    if pyslurm_path:
        rest = out.get("PYTHONPATH", "")
        out["PYTHONPATH"] = pyslurm_path + (os.pathsep + rest if rest else "")
    return out


class PyslurmChild:
    """One long-lived pyslurm child; :meth:`ask` sends an op and returns its ``ok``."""

    def __init__(
        self,
        *,
        conf: str | None = None,
        env: Mapping[str, str] | None = None,
        pyslurm_path: str = "",
        prefix: Sequence[str] | None = None,
    ) -> None:
        self.argv = slurm_child.child_argv(MODULE, [conf or ""], prefix)
        self.env = child_env(env or {}, pyslurm_path)
        self.hello: dict[str, Any] = {}
        """The last start's hello: ``pyslurm``, ``library``, ``api``, ``pid``."""
        self.rpcs = 0
        """SLURM RPCs the child reported so far."""
        self._proc: asyncio.subprocess.Process | None = None
        self._said: deque[str] = deque(maxlen=slurm_child.LAST_WORDS)
        self._stderr: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._restarts = slurm_child.Restarts(
            slurm_child.RESTART_S, slurm_child.RESTART_MAX_S, starts=0
        )
        self._tried = False
        self._down = ""
        self._sending = False

    @property
    def starts(self) -> int:
        """Children started so far."""
        return self._restarts.starts

    async def ask(
        self,
        op: str,
        args: Mapping[str, object] | None = None,
        *,
        timeout_s: float,
        write: bool = False,
    ) -> Any:
        """The ``ok`` of op ``op``, or slonkd's error for the child's.

        A read: TransientError on a timeout (the child is killed) or a death (its last words
        said). A write (``write``): NotReachedError or OutcomeUnknownError instead, by whether
        the child said ``sending`` (see the module docstring); the fencing check first.
        """
        async with self._lock:
            proc = await self._alive()
            rid = next(self._ids)
            line = json.dumps({"id": rid, "op": op, "args": dict(args or {})}) + "\n"
            self._sending = False
            if write:
                before_write()  # a leader's term: its lease, right before the request
            try:
                async with asyncio.timeout(timeout_s):  # not wait_for: see test_cancellation.py
                    said = await self._exchange(proc, rid, line.encode())
            except TimeoutError:
                await _kill(proc)
                died = await self._died(proc, op, f"no answer to {op} in {timeout_s:g} s")
                raise (await self._lost(proc, rid, died)) if write else died from None
            if said is None:
                died = await self._died(proc, op, "")
                raise (await self._lost(proc, rid, died)) if write else died
            self._restarts.answered()
            rpcs = said.get("rpcs", 0)
            rpcs = rpcs if isinstance(rpcs, int) and not isinstance(rpcs, bool) else 0
            self.rpcs += rpcs
            count_calls(rpcs)  # a write's own count (runner.counting)
            if "error" in said:
                raise error_for(str(said["error"]), f"pyslurm {op}: {said.get('detail', '')}")
            return said.get("ok")

    async def _lost(
        self, proc: asyncio.subprocess.Process, rid: int, died: TransientError
    ) -> SlonkdError:
        """A write's error when its child died or was killed before answering.

        Its ``sending`` line may still wait in the pipe (written just before the kill): what
        is left is read to the end first, so that no write that left is taken for one that
        did not.
        """
        with contextlib.suppress(TimeoutError, ValueError, ConnectionError):
            async with asyncio.timeout(1.0):
                while proc.stdout is not None and (got := await proc.stdout.readline()):
                    with contextlib.suppress(ValueError):
                        said = json.loads(got)
                        if isinstance(said, dict) and said.get("id") == rid and "sending" in said:
                            self._sending = True
        text = str(died)
        if not self._sending or any(w in text.lower() for w in _CONTACT_WORDS):
            return NotReachedError(text)
        return OutcomeUnknownError(f"{text} (after sending: it may have been applied)")

    async def _exchange(
        self, proc: asyncio.subprocess.Process, rid: int, line: bytes
    ) -> dict[str, Any] | None:
        """Send ``line``; the answer of id ``rid`` (None: the child's pipes closed)."""
        if proc.stdin is None or proc.stdout is None:  # created with PIPE: never
            return None
        try:
            proc.stdin.write(line)
            await proc.stdin.drain()
        except (ConnectionError, RuntimeError):
            return None
        while True:
            try:
                got = await proc.stdout.readline()
            except ValueError:  # over the limit: a line this side will not hold
                raise TransientError(f"{_NAME}: answer over {MAX_OUTPUT_BYTES} bytes") from None
            if not got:
                return None
            try:
                said = json.loads(got)
            except ValueError:
                said = None
            if isinstance(said, dict) and said.get("id") == rid:
                if "sending" in said:
                    self._sending = True
                    continue
                return said
            self._said.append(got.decode(errors="replace").strip()[-200:])  # not ours: dropped

    async def _alive(self) -> asyncio.subprocess.Process:
        """The child, started (again) when there is none and its wait is over."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            return proc
        first = not self._tried
        if not first:
            wait = self._restarts.due_in()
            if wait > 0:
                raise TransientError(f"{_NAME} down ({self._down}): next start in {wait:.0f} s")
            self._restarts.starting()
        self._tried = True
        try:
            self._proc = await self._start()
        except TerminalError as exc:
            self._down = str(exc)[:200]
            if first:
                self._restarts.died()
                if not any(w in str(exc).lower() for w in _CONTACT_WORDS):
                    raise
            raise TransientError(str(exc)) from None
        except TransientError as exc:
            self._down = str(exc)[:200]
            if first:
                self._restarts.died()
            raise
        self._restarts.starts += 1
        return self._proc

    async def _start(self) -> asyncio.subprocess.Process:
        """A child that said hello; TerminalError when it died first, else TransientError."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                limit=MAX_OUTPUT_BYTES,
            )
        except OSError as exc:
            raise TransientError(f"{_NAME}: {exc}") from None
        self._said = deque(maxlen=slurm_child.LAST_WORDS)
        self._stderr = asyncio.ensure_future(_keep_stderr(proc, self._said))
        if proc.stdout is None:  # created with PIPE: never
            raise TransientError(f"{_NAME}: no pipes")
        try:
            async with asyncio.timeout(slurm_child.CHILD_START_S):
                line = await proc.stdout.readline()
        except TimeoutError:
            await _kill(proc)
            raise TransientError(f"{_NAME}: not ready in {slurm_child.CHILD_START_S:g} s") from None
        except ValueError:
            line = b"(a hello over the limit)"
        except asyncio.CancelledError:  # no child left behind, half-started
            _sigkill(proc.pid)
            raise
        if line.startswith(b'{"ready"'):
            with contextlib.suppress(ValueError, TypeError, KeyError):
                self.hello = dict(json.loads(line)["ready"])
            return proc
        await _kill(proc)  # it died, or said something else first: not a child of ours
        await self._last_words()
        said = self._said[-1] if self._said else line.decode(errors="replace").strip()[:200]
        raise TerminalError(f"{_NAME} exited {proc.returncode}: {said}")

    async def _last_words(self) -> None:
        """Let the stderr reader take what the child said before its end (bounded)."""
        if self._stderr is not None and not self._stderr.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await asyncio.shield(self._stderr)

    async def _died(self, proc: asyncio.subprocess.Process, op: str, why: str) -> TransientError:
        """The error of an op whose child died (or was killed); the restart wait begins."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(slurm_child.CHILD_START_S):
                await _kill(proc)
                await self._last_words()
        last = self._said[-1] if self._said else ""
        rc = proc.returncode
        log.warning(
            SLURM_PYSLURM_CHILD_EXITED, op=op, rc=rc, said=last, restart_s=self._restarts.wait_s
        )
        self._restarts.died()
        self._down = why or f"exited {rc}"
        text = f"{_NAME}: {why}" if why else f"{_NAME} exited {rc}"
        return TransientError(f"{text}: {last}" if last else text)

    async def aclose(self) -> None:
        """End the child: stdin closed, then killed after ``CHILD_START_S``."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                async with asyncio.timeout(slurm_child.CHILD_START_S):
                    await proc.wait()
            except TimeoutError:
                await _kill(proc)
        if self._stderr is not None:
            self._stderr.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stderr


async def _keep_stderr(proc: asyncio.subprocess.Process, said: deque[str]) -> None:
    """The child's stderr's last lines, until it closes."""
    if proc.stderr is None:
        return
    while line := await proc.stderr.readline():
        slurm_child.keep_last([line.decode(errors="replace")], said)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the child (if still running) and wait for its end (bounded).

    Python 3.11's ``wait()`` also waits for the child's pipes to close, which a process it
    left behind could hold: its exit status is known before that, and is all this needs.
    """
    if proc.returncode is None:
        _sigkill(proc.pid)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(slurm_child.CHILD_START_S):
            await proc.wait()


def _sigkill(pid: int) -> None:
    """SIGKILL through a pidfd opened now, for a child asyncio has not yet seen exit.

    The pid is only ever signalled through that pidfd; the one window left is between
    asyncio's watcher reaping the child and reporting it (microseconds; a pid reused within
    them is not something Linux does in practice). Not ``Process.kill()``: its
    ``Popen.poll()`` would reap a child that already exited, and asyncio's watcher would then
    report its exit status as 255, its last words' status lost.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # reaped: gone
    except OSError:  # no pidfd on this kernel
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return
    try:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)

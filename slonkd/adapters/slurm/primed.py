"""An ``scontrol`` started before a compare-and-set read, so its update follows the read at once.

SLURM has no compare-and-set: ``scontrol.py`` reads a node (``sinfo``), decides, then writes
(``scontrol update``). A write by a fresh process pays for its start, slurm.conf and plugins
(20-60 ms here, far more on a loaded node) between the read's answer and the write's
arrival, and an operator's drain landing in that gap is overwritten by slonkd's, or
resumed by its release (the soak found one, issue 18). A primed scontrol is started
*before* the read, in its interactive mode, and the read waits for its prompt (``scontrol: ``,
printed by 22.05 and 24.11 on a pipe too): the update is then one line written to a process
that waits on its stdin, and the gap is the time to parse the read and send a line. Without
that wait a primed process still starting when the read answered (a loaded node) widened the
gap by the rest of its start, and the write was no sooner than a new process's (stop 46's CI).

scontrol's interactive line parser is not argv: quotes and backslashes are its own, so only
updates whose every value is in :data:`SAFE_VALUE` go this way (slonkd's reasons are
sanitised to that already, see ``core/reasons.py``); any other takes the argv path. One update
per primed process; the process is closed after the write either way.

A failure is raised as the runner's :meth:`~slonkd.adapters.slurm.runner.CommandRunner.write`
would raise it: :class:`~slonkd.adapters.slurm.runner.NotReachedError` when the line never
reached slurmctld (the process gone before it read it, a refused connection), which
``cas_apply.py`` sends again by argv after a fresh read; :class:`OutcomeUnknownError` when it
may have (no answer in time, the process killed), never sent again. Neighbours:
``runner.py`` (argv prefix, environment with the time fixed to UTC, timeouts, failure
translation), ``scontrol.py`` (the read, the plans), ``cas_apply.py`` (the writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import tempfile
from collections.abc import Sequence
from typing import IO

from slonkd.adapters.slurm.runner import (
    NotReachedError,
    SlurmSettings,
    client_env,
    translate_failure,
)
from slonkd.core.errors import OutcomeUnknownError, TerminalError
from slonkd.core.fencing import before_write

SAFE_VALUE = re.compile(r"[A-Za-z0-9:._,/@+()\[\]%#-]{1,8192}")
"""Values that mean the same to scontrol's line parser as in an argv (one word)."""
MAX_LINE = 2000
"""Longest line sent: scontrol built without readline reads 4,096 bytes, and a longer line
reads as end of input, a silent exit 0 with nothing done. A long hostlist takes argv."""
SAFE_REASON = re.compile(r"[A-Za-z0-9 :._,/@+()%#-]{1,1024}")
"""A reason, sent double-quoted: scontrol takes the quotes off a reason (not off a state)."""
PROMPT = b"scontrol: "
"""What interactive scontrol prints when it waits for a line."""
READY_WAIT_S = 2.0
"""Longest wait for the prompt (bounded by the settings' timeout too); past it the read goes on
and the write waits for the process as before (a wider gap, never a lost write)."""


def line_of(args: Sequence[str]) -> str | None:
    """The interactive ``update`` line for ``key=value`` args, or None if one is unsafe.

    Only nodename, state and reason: ``extra`` (slonkd's cause set, JSON) takes argv.
    """
    words = []
    for arg in args:
        key, eq, value = arg.partition("=")
        if key == "reason" and SAFE_REASON.fullmatch(value) and value.strip() == value:
            words.append(f'reason="{value}"')
        elif key in ("nodename", "state") and eq and SAFE_VALUE.fullmatch(value):
            words.append(arg)
        else:
            return None
    line = "update " + " ".join(words) + "\n"
    return line if words and len(line) <= MAX_LINE else None


class PrimedScontrol:
    """One interactive ``scontrol`` waiting for one update line (see module doc)."""

    def __init__(self, settings: SlurmSettings) -> None:
        self._settings = settings
        self._proc: asyncio.subprocess.Process | None = None
        self._err: IO[bytes] | None = None
        self.sent = 0
        """Updates sent through this process (0 or 1; tests and benchmarks read it)."""

    async def start(self) -> None:
        """Start scontrol (if ``primed_writes``) and wait for its prompt (see module doc).

        A failure to start leaves the argv path.
        """
        s = self._settings
        if not s.primed_writes:
            return
        env = client_env(s)
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *s.argv_prefix,
                "scontrol",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=self._err,
                env=env,
            )
        except OSError:
            self._proc = None
            return
        await self._wait_for_prompt()

    async def _wait_for_prompt(self) -> None:
        """Until the prompt, the process's exit, or READY_WAIT_S (the last two go on as well)."""
        out = self._proc.stdout if self._proc is not None else None
        if out is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(READY_WAIT_S, self._settings.timeout_s)):
                with contextlib.suppress(asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    await out.readuntil(PROMPT)

    def can_send(self, args: Sequence[str]) -> bool:
        """Whether this update can go through the primed process."""
        alive = self._proc is not None and self._proc.returncode is None
        return alive and not self.sent and line_of(args) is not None

    async def update(self, args: Sequence[str]) -> None:
        """Send ``update args`` and wait for scontrol's verdict; raises as the runner's write."""
        proc, line = self._proc, line_of(args)
        if proc is None or proc.stdin is None or line is None or self.sent:
            raise TerminalError("primed scontrol: nothing to send through")  # can_send said no
        before_write()  # a leader's term: its lease, right before the request
        self.sent += 1
        timeout_s = self._settings.timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                proc.stdin.write(line.encode())
                await proc.stdin.drain()
                proc.stdin.close()
                rc = await proc.wait()
        except TimeoutError as exc:
            await self.close()
            raise OutcomeUnknownError(
                f"scontrol update timed out after {timeout_s} s; it may have been applied"
            ) from exc
        except (BrokenPipeError, ConnectionResetError) as exc:
            # the process was gone before it read the line (one line, below PIPE_BUF: all or
            # nothing): nothing left for slurmctld
            await self.close()
            raise NotReachedError(f"primed scontrol went away: {exc}") from exc
        if rc != 0:
            raise translate_failure("scontrol", ("update", *args), rc, self._stderr(), write=True)

    def _stderr(self) -> str:
        if self._err is None:
            return ""
        self._err.seek(0)
        return self._err.read(64 * 1024).decode(errors="replace")

    async def close(self) -> None:
        """End the process: EOF on stdin (it exits without a command), else a kill."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            if proc.stdin is not None and not proc.stdin.is_closing():
                proc.stdin.close()
            try:
                async with asyncio.timeout(self._settings.timeout_s):
                    await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            except asyncio.CancelledError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.shield(proc.wait())
                raise
        if self._err is not None:
            self._err.close()
            self._err = None

"""Runs SLURM client commands as subprocesses and translates their failures.

Owns: the argv prefix (``chroot ROOT env SLURM_CONF=...`` for a SLURM in another root), the
environment (:func:`client_env`: every client prints times in UTC and in SLURM's standard
format, whatever this process's zone), a timeout on every call, the mapping of exit codes
and stderr to :class:`TransientError` / :class:`TerminalError`, and tenacity retries of
transient errors only. Never a shell: argv lists only. Knows nothing of node states (see
``scontrol.py``).

Reads (:meth:`CommandRunner.run`) are retried on any transient error. A write
(:meth:`CommandRunner.write`) is sent again only when it never reached slurmctld
(:class:`NotReachedError`: connection refused, controller name not resolved, only a standby
controller answered); one that may have reached it (a timeout, a reset, a lost answer, the
client killed) is :class:`~slonkd.core.errors.OutcomeUnknownError`, never sent again: the
caller judges it on a fresh read (issue 37: a resume applied but answered late, re-sent after
an operator's drain, cleared that drain). Neighbours: ``primed.py`` (the same rules for a
write through a primed ``scontrol``), ``cas_apply.py`` (which re-reads before a re-send).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from slonkd.adapters.slurm.spawn import Child, pidfd_supported, spawn
from slonkd.core.errors import OutcomeUnknownError, TerminalError, TransientError
from slonkd.core.fencing import before_write

_PIDFD = pidfd_supported()

STDERR_LIMIT = 1000

_TRANSIENT_MARKERS = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "connection reset by peer",
    "broken pipe",
    "zero bytes were transmitted",
    "communication connection failure",
    "slurm backup controller in standby mode",
    "resource temporarily unavailable",
    "transport endpoint is not connected",
    "slurmctld is busy",
    "try again",
)
_NOT_REACHED_MARKERS = (
    "unable to contact slurm controller (connect failure)",
    "communication connection failure",
    "unable to resolve",  # the controller's name: "slurm_set_addr: Unable to resolve ..."
    "unable to establish control machine address",
    "slurm backup controller in standby mode",  # a standby answered: nothing was applied
)
"""What SLURM's clients print when the request never reached an acting slurmctld.

Only these make a write safe to send again, and only when nothing else in the output says the
request may have arrived (two controllers: one not resolved, the other timed out). "Unable to
contact slurm controller" alone is not enough: its ``(send failure)`` and ``(receive
failure)`` may follow a request that arrived."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmSettings:
    """How slonkd reaches SLURM. Defaults suit a node with SLURM's clients on PATH."""

    argv_prefix: tuple[str, ...] = ()
    """Put before every command, e.g. ``("chroot", ROOT, "env", "SLURM_CONF=...")``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to this process's environment for every command (e.g. ``SLURM_CONF``)."""
    timeout_s: float = 20.0
    """Per call; slurmctld's clients give up after about MessageTimeout themselves."""
    attempts: int = 3
    retry_wait_min_s: float = 0.5
    retry_wait_max_s: float = 5.0
    retry_total_s: float = 60.0
    max_hostlist_chars: int = 8192
    """Longest compressed hostlist in one ``scontrol update`` (argv stays far below limits)."""
    primed_writes: bool = True
    """Start a compare-and-set's ``scontrol`` before its read, so the write follows it at
    once (``primed.py``); False: every write is a new process."""


CLIENT_TIME_ENV: Mapping[str, str] = {"TZ": "UTC0", "SLURM_TIME_FORMAT": "standard"}
"""Set for every SLURM client, over this process's environment and ``SlurmSettings.env``.

sinfo and scontrol print a reason's time in their own process's zone, in the format
``SLURM_TIME_FORMAT`` names, and without a zone: a client in another zone than the reader
would shift every ``reason_time`` by hours, and ``relative`` or a strftime format would not
parse. ``UTC0`` is POSIX for UTC and needs no zoneinfo file in a chroot's SLURM root. The
parsers read these times as UTC (``parsing.py``, ``parsing_show_node.py``, ``parsing_cas.py``).
"""


def client_env(settings: SlurmSettings) -> dict[str, str]:
    """The environment of a SLURM client: this process's, the settings', the time fixed."""
    return {**os.environ, **settings.env, **CLIENT_TIME_ENV}


class NotReachedError(TransientError):
    """The request never reached slurmctld (connection refused, name not resolved).

    Nothing was applied, so a write may be sent again (after a fresh read, where it was
    planned on one).
    """


class NodeNotFoundError(TerminalError):
    """scontrol named a node slurmctld does not know."""


class InvalidNodeStateError(TerminalError):
    """slurmctld refused the state change (e.g. resume of a node that is not drained)."""


class PermissionDeniedError(TerminalError):
    """The caller may not do this (not SlurmUser/root/operator)."""


_COUNTERS: ContextVar[tuple[list[int], ...]] = ContextVar("slonkd_slurm_calls", default=())
"""The call counters of the :meth:`CommandRunner.counting` blocks the current task is in."""


def count_calls(calls: int) -> None:
    """``calls`` more SLURM calls in every :func:`counting` block the current task is in."""
    for counter in _COUNTERS.get():
        counter[0] += calls


@contextlib.contextmanager
def counting() -> Iterator[Callable[[], int]]:
    """Count the SLURM calls made inside the block by this asyncio task (and tasks it starts).

    Yields a function that returns the count so far. Blocks nest: a call counts in each. The
    scontrol backend's runner counts a client call; the pyslurm child's parent the RPCs the
    child reports (:mod:`slonkd.adapters.slurm.pyslurm_link`).
    """
    counter = [0]
    token = _COUNTERS.set((*_COUNTERS.get(), counter))
    try:
        yield lambda: counter[0]
    finally:
        _COUNTERS.reset(token)


@dataclass(slots=True)
class CommandRunner:
    """Runs one SLURM client per call; counts invocations for the benchmarks.

    ``calls`` counts every call on this runner, whichever task made it; a write's own count
    (``UpdateResult.calls``) comes from :meth:`counting`, so that the reads other tasks make
    on the same runner meanwhile (the change poll, the rollout's read) are not charged to it.
    """

    settings: SlurmSettings = field(default_factory=SlurmSettings)
    calls: int = 0

    def count(self) -> None:
        """One more SLURM client call: on this runner and in every open counting block."""
        self.calls += 1
        count_calls(1)

    def counting(self) -> contextlib.AbstractContextManager[Callable[[], int]]:
        """Count the calls made inside the block by this asyncio task (:func:`counting`)."""
        return counting()

    def argv(self, tool: str, *args: str) -> list[str]:
        """The full argv for ``tool args...`` with the configured prefix."""
        return [*self.settings.argv_prefix, tool, *args]

    async def run(self, tool: str, *args: str, retry: bool = True) -> str:
        """Run ``tool args...`` (a read) and return stdout; retries transient failures if ``retry``.

        Also for a write whose second sending does what the first did (``scontrol
        reconfigure``); any other write goes through :meth:`write`.
        """
        if not retry:
            return await self._once(tool, *args)
        async for attempt in retrying(self.settings, TransientError):
            with attempt:
                return await self._once(tool, *args)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    async def write(self, tool: str, *args: str, retry: bool = True) -> str:
        """Run the write ``tool args...``; sent again only if it never reached slurmctld.

        A failure after the request may have left raises :class:`OutcomeUnknownError` at
        once: slurmctld may have applied it, and a blind second sending could undo what
        someone did in between. ``retry``: whether a :class:`NotReachedError` is retried here
        (False: the caller re-reads before it sends again, see ``cas_apply.py``).
        """
        if not retry:
            return await self._once(tool, *args, write=True)
        async for attempt in retrying(self.settings, NotReachedError):
            with attempt:
                return await self._once(tool, *args, write=True)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    async def _once(self, tool: str, *args: str, write: bool = False) -> str:
        argv = self.argv(tool, *args)
        env = client_env(self.settings)
        self.count()
        # Output goes to unlinked temporary files, not pipes: a 5,000-node read is
        # megabytes, the event loop's pipe reads in small pieces double its cost, and pipe
        # transports add about a millisecond to every call.
        with tempfile.TemporaryFile() as sink, tempfile.TemporaryFile() as errors:
            proc: asyncio.subprocess.Process | Child
            if write:
                before_write()  # a leader's term: its lease, right before the request
            try:
                if _PIDFD:  # no waiter thread per call (see spawn.py)
                    proc = spawn(argv, env, sink.fileno(), errors.fileno())
                else:
                    proc = await asyncio.create_subprocess_exec(
                        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=errors, env=env
                    )
            except OSError as exc:
                raise TerminalError(f"cannot run {argv[0]}: {exc}") from exc
            try:
                # asyncio.timeout, never wait_for: 3.11's wait_for drops a cancellation that
                # lands as the child exits, and a cancelled term then never ends
                async with asyncio.timeout(self.settings.timeout_s):
                    await proc.wait()
            except TimeoutError as exc:
                await _kill(proc)
                what = f"{tool} {' '.join(args)[:200]} timed out after {self.settings.timeout_s} s"
                if write:  # it may have reached slurmctld, which may yet apply it
                    raise OutcomeUnknownError(f"{what}; it may have been applied") from exc
                raise TransientError(what) from exc
            except asyncio.CancelledError:
                await _kill(proc)
                raise
            sink.seek(0)
            out = sink.read().decode(errors="replace")
            errors.seek(0)
            err = errors.read(64 * 1024)
        if proc.returncode != 0:
            # scontrol prints some refusals ("Node x not found") on stdout, between the
            # nodes it did find: keep stdout's lines that are not node records.
            notes = [ln for ln in out.splitlines() if ln and not ln.startswith("NodeName=")]
            said = err.decode(errors="replace").strip() or "\n".join(notes)[-2000:]
            raise translate_failure(tool, args, proc.returncode, said, write=write)
        return out


async def _kill(proc: asyncio.subprocess.Process | Child) -> None:
    if isinstance(proc, Child):
        await proc.kill()
        return
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()


def retrying(settings: SlurmSettings, on: type[TransientError]) -> AsyncRetrying:
    """The settings' attempts and waits, retrying ``on`` (never an unknown write outcome)."""

    def worth_it(exc: BaseException) -> bool:
        return isinstance(exc, on) and not isinstance(exc, OutcomeUnknownError)

    return AsyncRetrying(
        retry=retry_if_exception(worth_it),
        stop=stop_after_attempt(max(1, settings.attempts))
        | stop_after_delay(settings.retry_total_s),
        wait=wait_exponential(min=settings.retry_wait_min_s, max=settings.retry_wait_max_s),
        reraise=True,
    )


def translate_failure(
    tool: str, args: tuple[str, ...], rc: int | None, stderr: str, *, write: bool = False
) -> Exception:
    """The slonkd error for a failed SLURM client call (stderr truncated).

    ``write``: a transient failure that may have followed the request's arrival is
    :class:`OutcomeUnknownError`, one that never reached slurmctld :class:`NotReachedError`
    (a controller name that does not resolve included: nothing left). A read keeps the old
    rule: a name that does not resolve is terminal (made transient for reads, the e2e
    ``test_slurmctlds_name_not_resolving...`` failed).
    """
    text = stderr.strip()[-STDERR_LIMIT:]
    what = f"{tool} {' '.join(args)[:200]} failed ({rc}): {text}"
    low = text.lower()
    if not write:  # a read: any transient marker; a name that does not resolve stays terminal
        if any(marker in low for marker in _TRANSIENT_MARKERS):
            return TransientError(what)
    else:
        rest = low
        for marker in _NOT_REACHED_MARKERS:
            rest = rest.replace(marker, "")
        if rest != low and not any(marker in rest for marker in _TRANSIENT_MARKERS):
            return NotReachedError(what)
        if rest != low or any(marker in low for marker in _TRANSIENT_MARKERS):
            return OutcomeUnknownError(what)
    if "invalid node name" in low or ("node " in low and "not found" in low):
        return NodeNotFoundError(what)
    if "invalid node state" in low:
        return InvalidNodeStateError(what)
    if ("access" in low and "denied" in low) or "permission denied" in low:
        return PermissionDeniedError(what)
    if rc is not None and rc < 0:  # killed by a signal: a read is worth another try
        return OutcomeUnknownError(what) if write else TransientError(what)
    return TerminalError(what)

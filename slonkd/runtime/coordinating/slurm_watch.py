"""How the coordinator learns of SLURM changes fast without loading slurmctld.

slurmctld has no watch API, and its triggers fire only every 15 s. So the coordinator reads
the node table every ``poll_s`` (one ``scontrol -o show node``; a line unchanged since the
last read is not parsed again), keeps it for the passes (:mod:`.node_table`), and hands the
nodes that carry a reason and changed as one typed :class:`SlurmChange` on the term's queue,
and wakes the term's loop (:mod:`.term`): the fast path (:mod:`.fast_path`) takes the change
and marks SLURM failures at once, and a full pass follows. Every
slurmctld read of the coordinator, polls and full reads alike, goes through one
:class:`ReadLimiter`, so the coordinator never sends slurmctld more than
``max_reads_per_s`` reads in any second, whatever happens.

With libslurm loaded (in a child: :mod:`slonkd.adapters.slurm.libslurm_child`), the poll
first asks slurmctld "node table changed since T?" every ``change_poll_s`` (an answer of a
few bytes, no table packed) and runs the scontrol read only when the answer is yes. A
library that cannot talk to this slurmctld is dropped (logged once) and the poll reads with
scontrol as before; a load that failed only for now (its child slow to start on a busy
node) is tried again after ``RELOAD_S``, then at doubling waits up to ``RELOAD_MAX_S``. Each
"no change" also confirms that the table its last read kept is still SLURM's
(:meth:`.node_table.NodeTable.confirm`), so passes take that table instead of reading it
again; a pass that finds it too old anyway asks once itself (:meth:`SlurmWatch.confirm_now`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from slonkd.adapters.slurm import libslurm_child
from slonkd.adapters.slurm.backend import SlurmReads
from slonkd.adapters.slurm.libslurm import ChangeProbe
from slonkd.core.errors import SlonkdError, TerminalError, TransientError
from slonkd.core.log_events import COORDINATOR_CHANGE_POLL_LOADED
from slonkd.core.slurm_node import SlurmNode
from slonkd.runtime.coordinating.node_table import NodeTable

if TYPE_CHECKING:
    from slonkd.runtime.coordinating.settings import CoordinatorSettings

log = structlog.get_logger("slonkd.coordinator")

Fingerprint = frozenset[tuple[str, str, str]]


@dataclass(frozen=True, slots=True)
class SlurmChange:
    """The nodes with a reason one poll's read found changed (state, reason, who and when)."""

    nodes: tuple[SlurmNode, ...]
    seen_at: float
    """When the poll handed them over (monotonic): a full read begun later has them."""


class ReadLimiter:
    """At most ``per_s`` slurmctld reads in any one-second window (shared by all readers).

    A window rather than an even spacing: the poll that sees a change and the full read it
    asks for may follow each other at once, as long as the second holds at most that many.
    """

    def __init__(
        self,
        per_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_read: Callable[[], None] | None = None,
    ) -> None:
        if per_s <= 0:
            raise ValueError("max_reads_per_s must be positive")
        self.per_window = max(1, int(per_s))
        self.window_s = self.per_window / per_s
        self._clock = clock
        self._sleep = sleep
        self._on_read = on_read
        self._recent: deque[float] = deque()
        self._lock = asyncio.Lock()
        self.reads = 0

    async def acquire(self) -> None:
        """Wait for this reader's turn."""
        asked = self._clock()
        async with self._lock:
            while True:
                now = self._clock()
                while self._recent and self._recent[0] <= now - self.window_s:
                    self._recent.popleft()
                if len(self._recent) < self.per_window:
                    break
                await self._sleep(self._recent[0] + self.window_s - now)
            self._recent.append(self._clock())
            waited_ms = (self._recent[-1] - asked) * 1000
            if waited_ms >= 1:  # a read that waited for the limit (issue 21's cordon tail)
                log.debug("coordinator.read_waited", waited_ms=round(waited_ms, 1))
            self.reads += 1
            if self._on_read is not None:
                self._on_read()


def change_probe(s: CoordinatorSettings) -> Callable[[], ChangeProbe | None] | None:
    """How to get libslurm for the change poll, or None (then the scontrol poll, as before).

    None when the setting is off or SLURM is behind an argv prefix (another release's
    clients, which the installed library may not speak). The loader blocks (it starts the
    child) and loads once per process and configuration: the watch runs it
    in a thread, off the event loop. A load that failed for now (TransientError) is not
    kept: the watch's next try loads again.
    """
    if not s.change_poll or s.slurm.argv_prefix:
        return None
    conf = s.slurm.env.get("SLURM_CONF")

    def loader() -> ChangeProbe | None:
        if conf not in _loaded:
            _loaded[conf] = libslurm_child.load(conf=conf)
        return _loaded[conf]

    return loader


_loaded: dict[str | None, ChangeProbe | None] = {}

RELOAD_S = 30.0
"""The wait before loading libslurm again after a load that failed for now (then doubled)."""
RELOAD_MAX_S = 300.0
_NOT_CONFIGURED = "no change poll: change_poll is false, or SLURM is behind an argv prefix"


def fingerprint(nodes: Sequence[SlurmNode]) -> Fingerprint:
    """What a reasons read shows (node, state, reason), comparable between reads."""
    return frozenset((str(n.name), str(n.state), n.reason) for n in nodes)


class SlurmWatch:
    """Polls the node table; puts a change on ``changes`` when its nodes with a reason differ."""

    def __init__(
        self,
        slurm: SlurmReads,
        limiter: ReadLimiter,
        changes: asyncio.Queue[SlurmChange],
        *,
        wake: asyncio.Event | None = None,
        poll_s: float,
        change_probe: ChangeProbe | None = None,
        probe_loader: Callable[[], ChangeProbe | None] | None = None,
        change_poll_s: float = 0.2,
        reload_s: float = RELOAD_S,
        table: NodeTable | None = None,
    ) -> None:
        self.slurm = slurm
        """The port with the term's table (:class:`~.node_table.KeptSlurm`): each read kept."""
        self.table = table if table is not None else NodeTable()
        self.limiter = limiter
        self.out = changes
        """Where each change goes (the fast path's, :mod:`.fast_path`)."""
        self.wake = wake
        """Set with each change: the term's pass loop (:attr:`.observing.Observer.dirty`)."""
        self.poll_s = poll_s
        self.probe = change_probe
        self._loader = probe_loader
        """Loads the probe in a thread while the scontrol poll runs (see :func:`change_probe`)."""
        self._reload_s = reload_s
        self._load_began = 0.0
        self._reload_at: float | None = None
        """When to try the loader again (monotonic) after a load that failed for now."""
        self.why = "" if change_probe is not None or probe_loader else _NOT_CONFIGURED
        """Why the poll is not the change poll ("" when it is): ``slonkd status`` shows it."""
        self.change_poll_s = change_poll_s
        self.since = 0
        """The time of the node table last read (sent with the next "changed since?")."""
        self.last: Fingerprint | None = None
        self.polls = 0
        self.probes = 0
        self.probe_failed = False
        """The last change poll failed (slurmctld unreachable?): scontrol's period meanwhile."""
        self.changes = 0
        self.read_began: float | None = None
        """When the read that ``since`` precedes began (monotonic; None: no read yet)."""
        self._asking = asyncio.Lock()
        """One "changed since?" at a time: the poll's and a pass's (:meth:`confirm_now`)."""

    @property
    def backend(self) -> str:
        """How the poll learns of changes: ``libslurm`` (change poll) or ``scontrol``."""
        return "libslurm" if self.probe is not None else "scontrol"

    async def _unchanged(self) -> tuple[bool, int]:
        """(no scontrol read needed, the time to keep after a read); reads when unsure."""
        if self.probe is None or self.last is None:
            return False, 0
        try:
            async with self._asking:
                stamp = await self.probe.changed_since(self.since, timeout_s=max(1.0, self.poll_s))
        except TerminalError as exc:
            self._drop(exc)
            return False, 0
        except SlonkdError as exc:
            log.debug("coordinator.change_poll_failed", error=str(exc)[:300])
            self.probe_failed = True
            return False, self.since
        self.probe_failed = False
        self.probes += 1
        if stamp.changed:
            log.debug("coordinator.change_seen", since=self.since, last_update=stamp.last_update)
        return not stamp.changed, stamp.last_update

    async def confirm_now(self) -> bool:
        """Ask "changed since?" now for a pass whose table aged past ``poll_s``: True = confirmed.

        At 5,000 nodes a pass decides for half a second without yielding, the poll's "no
        change" waits for it, and the next pass found the table too old and read it whole
        again (issue 38: a pass in ten at rest). One "no change" (a few bytes, about a
        millisecond of slurmctld) confirms the table instead. False (the pass reads on its
        own) without the change poll, before its first read, on a change (the poll reads it
        at its next turn) or on an error. One question at a time: a pass's waits for the
        poll's, and the other way round.
        """
        if self.probe is None or self.last is None or self.read_began is None:
            return False
        async with self._asking:  # after the poll's own question, if one is on its way
            probe, began = self.probe, time.monotonic()
            read_began, since = self.read_began, self.since
            if probe is None or read_began is None or self.probe_failed:
                return False
            try:
                stamp = await probe.changed_since(since, timeout_s=max(1.0, self.poll_s))
            except SlonkdError:
                return False  # slurmctld unreachable, say: the pass reads as before
        self.probes += 1
        if stamp.changed:
            return False
        self.table.confirm(read_began, began)
        return True

    async def run(self) -> None:
        """Poll until cancelled; a failed read is logged and retried at the next period."""
        loading = self._load(time.monotonic())
        if self._adopt_kept():  # the term's first read is the first baseline: poll after it
            await asyncio.sleep(self.change_poll_s if self.probe is not None else self.poll_s)
        while True:
            began = time.monotonic()
            loading = self._loaded(loading, began)
            unchanged, since = await self._unchanged()
            if unchanged:
                if self.read_began is not None:  # the table read since is still SLURM's
                    self.table.confirm(self.read_began, began)
                await asyncio.sleep(max(0.0, self.change_poll_s - (time.monotonic() - began)))
                continue
            if self.probe is not None and self.last is None:
                stamp = await self._first_stamp()
                since = stamp if stamp is not None else since
            await self.limiter.acquire()
            read_began = time.monotonic()
            try:
                nodes = [n for n in await self.slurm.read_nodes() if n.reason]
            except SlonkdError as exc:
                log.warning("coordinator.poll_failed", error=str(exc)[:300])
            else:
                self.polls += 1
                self.read_began = read_began
                seen = fingerprint(nodes)
                if self.last is not None and seen != self.last:
                    self.changes += 1
                    new = [n for n in nodes if fingerprint([n]) - self.last]
                    log.debug("coordinator.slurm_changed", nodes=len(seen), new=len(new))
                    self.out.put_nowait(SlurmChange(tuple(new), time.monotonic()))
                    if self.wake is not None:
                        self.wake.set()
                self.last = seen
                self.since = since
            fast = self.probe is not None and not self.probe_failed
            period = self.change_poll_s if fast else self.poll_s
            await asyncio.sleep(max(0.0, period - (time.monotonic() - began)))

    def _load(self, now: float) -> asyncio.Future[ChangeProbe | None] | None:
        """Start the loader in a thread, when there is one to run and it is time to."""
        if self._loader is None or self.probe is not None:
            return None
        if self._reload_at is not None and (self._reload_at < 0 or now < self._reload_at):
            return None  # a lasting verdict (-1), or a retry not due yet
        self.why = "libslurm loading"
        self._load_began = now
        return asyncio.ensure_future(asyncio.to_thread(self._loader))

    def _loaded(
        self, loading: asyncio.Future[ChangeProbe | None] | None, now: float
    ) -> asyncio.Future[ChangeProbe | None] | None:
        """Take a finished load's outcome; start the next try when one is due."""
        if loading is None:
            return self._load(now)
        if not loading.done():
            return loading
        try:
            self.probe = loading.result()
        except TransientError as exc:  # a child slow to start on a busy node: not a verdict
            self._reload_at = now + self._reload_s
            self.why = f"libslurm not loaded yet, next try in {self._reload_s:g} s: {exc}"[:300]
            log.warning(
                "coordinator.change_poll_unavailable", error=str(exc)[:300],
                retry_s=self._reload_s, load_s=round(now - self._load_began, 2),
            )  # fmt: skip
            self._reload_s = min(self._reload_s * 2, RELOAD_MAX_S)
            return None
        except SlonkdError as exc:
            self._drop(exc)
            return None
        if self.probe is None:
            self._reload_at = -1.0
            self.why = "libslurm unavailable (the log's slurm.libslurm_unavailable says why)"
        else:
            self.why = ""
            log.info(
                COORDINATOR_CHANGE_POLL_LOADED,
                library=self.probe.path, load_s=round(now - self._load_began, 2),
            )  # fmt: skip
        return None

    def _drop(self, exc: SlonkdError) -> None:
        """Drop a library that will never do for this slurmctld: the scontrol poll for good."""
        log.warning("coordinator.change_poll_dropped", error=str(exc)[:300])
        self.probe = None
        self._reload_at = -1.0
        self.why = f"libslurm dropped: {exc}"[:300]

    def _adopt_kept(self) -> bool:
        """Take the table a full read kept (the term's first pass's) as the first baseline.

        The poll reports what differs from its last read; a first read of its own would
        take one more of the term's first second of reads (``max_reads_per_s``) while the
        pass's read, the job-outcome read and the change poll's first answer want them too,
        and a failure in that second waited for the limit (issue 21: about one second). A
        baseline from the pass's own read also leaves no gap between the two reads. The
        change poll's first question then goes with ``since = 0`` (answered "changed"): its
        read gives the time to ask from.
        """
        kept = self.table.read()
        if kept is None or self.last is not None:
            return False
        self.read_began, nodes = kept
        self.last = fingerprint([n for n in nodes if n.reason])
        return True

    async def _first_stamp(self) -> int | None:
        """The table's time before the first scontrol read (so nothing after it is missed)."""
        if self.probe is None:
            return None
        try:
            stamp = await self.probe.changed_since(0, timeout_s=max(1.0, self.poll_s))
            return stamp.last_update
        except TerminalError as exc:
            self._drop(exc)
        except SlonkdError:
            pass
        return None

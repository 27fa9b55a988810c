"""The coordinator's append-only audit log: one JSON line per action it took or would take.

Every record names the node, the action, its cause, the fencing token of the leader that took
it, the state before and after, and the outcome; dry-run records say so. The file is opened
for appending only and each record is one ``write`` of one line, so concurrent writers (an old
leader and a new one on a shared volume) never interleave inside a line.

No write happens on the caller's thread (the coordinator's event loop): :meth:`AuditLog.record`
queues the line and one writer thread writes the lines in the order they were recorded, each
with its own ``write`` (unbuffered: in the kernel once written). A slow or stalled disk holds
that thread, never the passes, the lease's renewal or the API. :meth:`AuditLog.close` (or
:meth:`AuditLog.aclose`, which waits off the loop) returns once every queued line is written.
The queue is bounded (``queue_max`` lines): a disk stalled past it drops the newest records
from the file, counted (``dropped``) and logged once (``audit.dropped``); every record is in
the structured log (``audit.action``) regardless, written on the caller's thread. A failed
write (a full disk) loses that line, logged (``audit.write_failed``); the writer goes on.

The file is rotated by size (it lives on an emptyDir by default): a record that would take
it past ``max_bytes`` first renames it to ``<path>.1`` (``.1`` to ``.2`` and so on, ``keep``
old files at most), so the log never holds more than ``(keep + 1) * max_bytes`` and a
line. A file renamed by another writer is noticed and opened afresh.

In dry-run the same plan is decided again on every pass; :class:`DryRunSeen` lets the
coordinator audit a node's would-be action only when it is new for that node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from slonkd.core.fencing import last_lease_check

log = structlog.get_logger("slonkd.audit")
MAX_FIELD = 2000
MAX_BYTES = 64 * 2**20
"""Default size at which the file is rotated."""
KEEP = 3
"""Default number of rotated files kept."""
MIN_BYTES = 4096
QUEUE_MAX = 50_000
"""Default number of records queued for the writer thread at most (about 50 MB at worst)."""
CLOSE_TIMEOUT_S = 5.0
"""How long :meth:`AuditLog.close` waits for the writer to drain a stalled disk."""


def check_rotation(max_bytes: object, keep: object) -> None:
    """ValueError naming the setting unless ``audit_max_bytes`` and ``audit_keep`` are usable."""
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < MIN_BYTES:
        raise ValueError(f"audit_max_bytes must be a whole number of bytes, at least {MIN_BYTES}")
    if not isinstance(keep, int) or isinstance(keep, bool) or not 0 <= keep <= 100:
        raise ValueError("audit_keep must be a whole number from 0 to 100")


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return value[:MAX_FIELD]
    if isinstance(value, dict):
        return {str(k)[:200]: _bounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [_bounded(v) for v in items]
    return value


class AuditLog:
    """Appends audit records to a JSON-lines file (None: records go to the log only)."""

    def __init__(
        self,
        path: Path | None,
        *,
        identity: str,
        max_bytes: int = MAX_BYTES,
        keep: int = KEEP,
        queue_max: int = QUEUE_MAX,
    ) -> None:
        check_rotation(max_bytes, keep)
        self.path = path
        self.identity = identity
        self.max_bytes = max_bytes
        self.keep = keep
        self.records = 0
        """Records made (each in the structured log)."""
        self.written = 0
        """Lines the writer thread wrote to the file."""
        self.dropped = 0
        """Records not written to the file: the queue was full, or the log closed."""
        self.failed = 0
        """Lines whose write failed (e.g. a full disk)."""
        self.rotations = 0
        self._fd: int | None = None
        self._lines: queue.Queue[bytes | None] = queue.Queue(maxsize=queue_max)
        self._writer: threading.Thread | None = None
        self._closed = False
        self._dropping = False
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = self._open(path)  # here: a path that cannot be opened fails the start
            self._writer = threading.Thread(
                target=self._drain, name=f"audit-writer-{path.name}", daemon=True
            )
            self._writer.start()

    @staticmethod
    def _open(path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

    def _make_room(self, path: Path, fd: int, size: int) -> int:
        """The descriptor to write ``size`` bytes to, after a rotation if one is due."""
        mine = os.fstat(fd)
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current != mine.st_ino:  # another writer rotated it: follow
            os.close(fd)
            fd = self._fd = self._open(path)
            mine = os.fstat(fd)
        if mine.st_size == 0 or mine.st_size + size <= self.max_bytes:
            return fd
        os.close(fd)
        self._fd = None
        names = [path, *(path.with_name(f"{path.name}.{i}") for i in range(1, self.keep + 1))]
        for i in range(self.keep, 0, -1):  # .2 -> .3, .1 -> .2, the file -> .1
            if names[i - 1].exists():
                os.replace(names[i - 1], names[i])
        if self.keep == 0:
            path.unlink(missing_ok=True)
        fd = self._fd = self._open(path)
        self.rotations += 1
        log.info("audit.rotated", path=str(path), bytes=mine.st_size, keep=self.keep)
        return fd

    def record(
        self,
        *,
        action: str,
        node: str,
        cause: str,
        fencing_token: int,
        outcome: str,
        before: Any = None,
        after: Any = None,
        dry_run: bool = False,
        **extra: Any,
    ) -> None:
        """Append one record (and put it in the structured log too)."""
        entry = _bounded(
            {
                "ts": round(time.time(), 3),
                "coordinator": self.identity,
                "action": action,
                "node": node,
                "cause": cause,
                "fencing_token": fencing_token,
                "outcome": outcome,
                "before": before,
                "after": after,
                "dry_run": dry_run,
                **extra,
            }
        )
        checked = last_lease_check()
        if checked is not None:  # when the write was allowed (ts: when it returned)
            entry["lease_checked_at"] = round(checked, 3)
        self.records += 1
        if self._writer is not None:
            self._queue((json.dumps(entry, sort_keys=True, default=str) + "\n").encode())
        log.info("audit.action", **{k: v for k, v in entry.items() if k != "ts"})

    def _queue(self, line: bytes) -> None:
        """Hand ``line`` to the writer thread; never waits (full or closed: dropped)."""
        try:
            if self._closed:
                raise queue.Full
            self._lines.put_nowait(line)
        except queue.Full:
            self.dropped += 1
            if not self._dropping:  # once per stall, not once per record
                self._dropping = True
                log.error(
                    "audit.dropped",
                    path=str(self.path),
                    closed=self._closed,
                    queued=self._lines.qsize(),
                    detail="the audit file is behind (or closed): records in the log only",
                )
        else:
            self._dropping = False

    # -- the writer thread ------------------------------------------------------------------

    def _drain(self) -> None:
        """The writer thread: write queued lines in order until the closing ``None``."""
        while True:
            line = self._lines.get()
            try:
                if line is None:
                    return
                self._write(line)
            finally:
                self._lines.task_done()

    def _write(self, line: bytes) -> None:
        """One line, one ``write``; a failure loses the line (logged), never the writer."""
        assert self.path is not None  # noqa: S101 - no writer thread without a path
        try:
            fd = self._fd if self._fd is not None else self._reopen(self.path)
            os.write(self._make_room(self.path, fd, len(line)), line)
        except OSError as exc:
            self.failed += 1
            log.error("audit.write_failed", path=str(self.path), error=str(exc)[:200])
        else:
            self.written += 1

    def _reopen(self, path: Path) -> int:
        fd = self._fd = self._open(path)
        return fd

    # -- closing ------------------------------------------------------------------------------

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every line queued so far is written; False when ``timeout_s`` ran out."""
        done = self._lines.all_tasks_done
        with done:
            return done.wait_for(lambda: self._lines.unfinished_tasks == 0, timeout_s)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Write every queued line, then close the file (a record after this is log only).

        Blocks until the writer drained, at most ``timeout_s`` for a stalled disk: then the
        lines left are logged as lost (``audit.close_timeout``) and the file stays open for
        the writer, which may still finish. On the event loop, use :meth:`aclose`.
        """
        writer = self._writer
        if writer is None or self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(queue.Full):  # stalled and full: the join below says so
            self._lines.put(None, timeout=timeout_s)
        writer.join(max(0.0, deadline - time.monotonic()))
        if writer.is_alive():
            log.error(
                "audit.close_timeout",
                path=str(self.path),
                queued=self._lines.qsize(),
                waited_s=timeout_s,
                detail="the audit file did not take the last records in time",
            )
            return
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    async def aclose(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """:meth:`close` in a thread, so the event loop goes on while the writer drains.

        A cancellation does not stop the drain: the close goes on in its thread.
        """
        await asyncio.shield(asyncio.to_thread(self.close, timeout_s))


class DryRunSeen:
    """Which dry-run actions were audited per node, so an unchanged plan is audited once.

    An action counts as new for a node when its (action, cause, key) was not audited for
    that node, or the node's state before it changed since.
    """

    def __init__(self, *, max_nodes: int = 100_000) -> None:
        self._seen: dict[str, dict[tuple[str, ...], str | None]] = {}
        self._max_nodes = max_nodes

    def __len__(self) -> int:
        return len(self._seen)

    def is_new(self, node: str, action: tuple[str, ...], before: str | None) -> bool:
        """True (and remembered) if ``action`` in state ``before`` is new for ``node``."""
        actions = self._seen.get(node)
        if actions is None:
            if len(self._seen) >= self._max_nodes:
                self._seen.clear()  # gone nodes: start over rather than grow
            actions = self._seen[node] = {}
        if action in actions and actions[action] == before:
            return False
        actions[action] = before
        return True

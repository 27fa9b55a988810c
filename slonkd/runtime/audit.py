"""The coordinator's append-only audit log: one JSON line per action it took or would take.

Every record names the node, the action, its cause, the fencing token of the leader that took
it, the state before and after, and the outcome; dry-run records say so. The file is opened
for appending only and each record is one ``write`` of one line, so concurrent writers (an old
leader and a new one on a shared volume) never interleave inside a line.

The file is rotated by size (it lives on an emptyDir by default): a record that would take
it past ``max_bytes`` first renames it to ``<path>.1`` (``.1`` to ``.2`` and so on, ``keep``
old files at most), so the log never holds more than ``(keep + 1) * max_bytes`` and a
line. A file renamed by another writer is noticed and opened afresh.

In dry-run the same plan is decided again on every pass; :class:`DryRunSeen` lets the
coordinator audit a node's would-be action only when it is new for that node.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger("slonkd.audit")
MAX_FIELD = 2000
MAX_BYTES = 64 * 2**20
"""Default size at which the file is rotated."""
KEEP = 3
"""Default number of rotated files kept."""
MIN_BYTES = 4096


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
    ) -> None:
        check_rotation(max_bytes, keep)
        self.path = path
        self.identity = identity
        self.max_bytes = max_bytes
        self.keep = keep
        self.records = 0
        self.rotations = 0
        self._fd: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = self._open(path)

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
        self.records += 1
        if self._fd is not None and self.path is not None:
            line = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode()
            os.write(self._make_room(self.path, self._fd, len(line)), line)
        log.info("audit.action", **{k: v for k, v in entry.items() if k != "ts"})

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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

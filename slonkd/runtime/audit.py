"""The coordinator's append-only audit log: one JSON line per action it took or would take.

Every record names the node, the action, its cause, the fencing token of the leader that took
it, the state before and after, and the outcome; dry-run records say so. The file is opened
for appending only and each record is one ``write`` of one line, so concurrent writers (an old
leader and a new one on a shared volume) never interleave inside a line.
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

    def __init__(self, path: Path | None, *, identity: str) -> None:
        self.path = path
        self.identity = identity
        self.records = 0
        self._fd: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

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
        if self._fd is not None:
            line = json.dumps(entry, sort_keys=True, default=str) + "\n"
            os.write(self._fd, line.encode())
        log.info("audit.action", **{k: v for k, v in entry.items() if k != "ts"})

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

"""The audit log's writes leave the event loop: a writer thread, in order, drained on close.

Issue 37 item 8. :class:`~slonkd.runtime.coordinating.audit_log.AuditLog` wrote each record with
``os.write``
on the coordinator's event loop: a slow disk (a full or remote volume, a stalled emptyDir)
held every pass, the lease's renewal and the API with it. Records now go through a bounded
queue to one writer thread: written in the order recorded, one ``write`` a line as before,
and every record queued is written before ``close`` returns. A slow disk is simulated by
the ``os`` the audit module sees, whose ``write`` sleeps. Neighbours: ``test_audit.py``
(rotation, dry-run de-duplication), ``leading.py`` (the term closes its log).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from slonkd.runtime.coordinating import audit_log as audit_module
from slonkd.runtime.coordinating.audit_log import AuditLog

LOOP_BOUND_S = 0.2
"""The longest the loop may be held while records are made on a disk that takes 50 ms a line."""


class _SlowOs:
    """``os`` as the audit module uses it, with a ``write`` that takes ``delay_s``."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.writes = 0

    def write(self, fd: int, data: bytes) -> int:
        """A write to a slow disk."""
        time.sleep(self.delay_s)
        self.writes += 1
        return os.write(fd, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


def _record(audit: AuditLog, i: int) -> None:
    audit.record(action="drain", node=f"w-{i}", cause="k8s-cordoned", fencing_token=i, outcome="ok")


def _tokens(path: Path) -> list[int]:
    return [json.loads(line)["fencing_token"] for line in path.read_text().splitlines()]


async def _ticking(stop: asyncio.Event) -> float:
    """The longest the loop was held between two ticks of 5 ms, until ``stop``."""
    worst, last = 0.0, time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(0.005)
        now = time.monotonic()
        worst, last = max(worst, now - last), now
    return worst


async def test_a_slow_disk_never_holds_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 records on a disk of 50 ms a line: the loop goes on; after close, all 20 in order."""
    slow = _SlowOs(0.05)
    monkeypatch.setattr(audit_module, "os", slow)
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, identity="c-0")
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticking(stop))
    began = time.monotonic()
    for i in range(20):
        _record(audit, i)
        await asyncio.sleep(0)
    recording_s = time.monotonic() - began
    stop.set()
    held_s = await ticker
    assert recording_s < LOOP_BOUND_S, f"20 records took {recording_s:.2f} s on the loop"
    assert held_s < LOOP_BOUND_S, f"the loop was held {held_s:.2f} s"
    await audit.aclose()
    assert _tokens(path) == list(range(20))
    assert slow.writes == 20  # one write a line
    assert (audit.records, audit.written, audit.dropped) == (20, 20, 0)


async def test_closing_drains_every_record_and_the_loop_ticks_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 records queued at 2 ms a line: ``aclose`` waits for all of them off the loop."""
    monkeypatch.setattr(audit_module, "os", _SlowOs(0.002))
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, identity="c-0")
    for i in range(300):
        _record(audit, i)
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticking(stop))
    await audit.aclose()
    stop.set()
    assert await ticker < LOOP_BOUND_S
    assert _tokens(path) == list(range(300))


def test_close_drains_every_record_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The synchronous close (no loop) also returns once every record is written."""
    monkeypatch.setattr(audit_module, "os", _SlowOs(0.001))
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, identity="c-0", max_bytes=8192, keep=50)  # rotating meanwhile
    for i in range(200):
        _record(audit, i)
    audit.close()
    rotated = sorted(tmp_path.glob("audit.jsonl.*"), key=lambda p: -int(p.suffix[1:]))
    assert [t for f in [*rotated, path] for t in _tokens(f)] == list(range(200))  # oldest first
    assert audit.rotations >= 1


def test_a_record_after_close_goes_to_the_structured_log_only(tmp_path: Path) -> None:
    """Nothing is written once closed (the writer is gone); the log line still is, and counted."""
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, identity="c-0")
    _record(audit, 1)
    audit.close()
    with structlog.testing.capture_logs() as logs:
        _record(audit, 2)
    assert _tokens(path) == [1]
    assert audit.dropped == 1
    assert [e["fencing_token"] for e in logs if e["event"] == "audit.action"] == [2]


def test_a_full_queue_drops_and_says_so_never_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk stuck longer than the queue holds: records past it are dropped from the file.

    Counted and logged once (``audit.dropped``); each is still in the structured log.
    """
    monkeypatch.setattr(audit_module, "os", _SlowOs(0.1))
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, identity="c-0", queue_max=5)
    with structlog.testing.capture_logs() as logs:
        began = time.monotonic()
        for i in range(30):
            _record(audit, i)
        assert time.monotonic() - began < LOOP_BOUND_S
    audit.close()
    assert audit.dropped > 0
    assert audit.written + audit.dropped == 30
    assert len([e for e in logs if e["event"] == "audit.dropped"]) == 1
    assert len([e for e in logs if e["event"] == "audit.action"]) == 30
    written = _tokens(path)
    assert written == sorted(written)  # in order, whatever was kept


def test_a_failing_write_is_logged_and_the_writer_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk full for one line: that line is lost (logged), the next ones are written."""

    class _FullOnce(_SlowOs):
        def write(self, fd: int, data: bytes) -> int:
            self.writes += 1
            if self.writes == 2:
                raise OSError(28, "No space left on device")
            return os.write(fd, data)

    monkeypatch.setattr(audit_module, "os", _FullOnce(0.0))
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, identity="c-0")
    with structlog.testing.capture_logs() as logs:
        for i in range(4):
            _record(audit, i)
        audit.close()
    assert _tokens(path) == [0, 2, 3]
    assert audit.failed == 1
    assert [e["event"] for e in logs if e.get("log_level") == "error"] == ["audit.write_failed"]

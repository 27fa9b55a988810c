"""The audit log's size-based rotation and the dry-run de-duplication of plans.

Real files in a temporary directory; the coordinator's settings validate the rotation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slonkd.runtime.coordinating import CoordinatorSettings
from slonkd.runtime.coordinating.audit_log import AuditLog, DryRunSeen

CAUSE = "x" * 400  # about 700 bytes a record


def _write(audit: AuditLog, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        audit.record(action="drain", node=f"w-{i}", cause=CAUSE, fencing_token=i, outcome="ok")


def _tokens(path: Path) -> list[int]:
    return [json.loads(line)["fencing_token"] for line in path.read_text().splitlines()]


def test_the_audit_log_rotates_by_size_and_keeps_n_files(tmp_path: Path) -> None:
    """At 16 KiB the file moves to .1 (.1 to .2); with keep=2 no .3 ever exists.

    The disk holds at most three files of at most 16 KiB, the newest records all there in order.
    """
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, identity="c-0", max_bytes=16384, keep=2)
    try:
        _write(audit, 500)  # about 350 KiB in all
    finally:
        audit.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    assert all((tmp_path / f).stat().st_size <= 16384 for f in files)
    kept = _tokens(path.with_name("audit.jsonl.2")) + _tokens(path.with_name("audit.jsonl.1"))
    kept += _tokens(path)
    assert kept == list(range(500 - len(kept), 500))  # contiguous, oldest first, none lost
    assert audit.rotations >= 10


def test_keep_zero_keeps_only_the_current_file(tmp_path: Path) -> None:
    """With keep=0 a full file is replaced by a fresh one and no old file is left."""
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, identity="c-0", max_bytes=8192, keep=0)
    try:
        _write(audit, 100)
    finally:
        audit.close()
    assert [p.name for p in tmp_path.iterdir()] == ["audit.jsonl"]
    assert path.stat().st_size <= 8192
    assert _tokens(path)[-1] == 99


def test_a_second_writer_follows_a_rotation_it_did_not_do(tmp_path: Path) -> None:
    """Two leaders on one shared file: after one rotates, the other writes to the new file.

    Not on into the renamed one: .1 stays as it was and no record is lost.
    """
    path = tmp_path / "audit.jsonl"
    first = AuditLog(path, identity="c-0", max_bytes=8192, keep=5)
    second = AuditLog(path, identity="c-1", max_bytes=8192, keep=5)
    try:
        _write(first, 20)  # rotates at least once
        assert first.flush(timeout_s=5)  # written by its thread
        assert path.with_name("audit.jsonl.1").exists()
        rotated = path.with_name("audit.jsonl.1").read_text()
        _write(second, 1, start=1000)
    finally:
        first.close()
        second.close()
    assert path.with_name("audit.jsonl.1").read_text() == rotated
    assert _tokens(path)[-1] == 1000


def test_rotation_settings_are_validated_when_the_settings_are_made() -> None:
    """A size under 4 KiB, a negative or fractional keep, a boolean: ValueError naming the key."""
    for key, bad in (
        ("audit_max_bytes", 100),
        ("audit_max_bytes", 1.5e6),
        ("audit_keep", -1),
        ("audit_keep", True),
    ):
        with pytest.raises(ValueError, match=key):
            CoordinatorSettings(namespace="ns", identity="c-0", **{key: bad})  # type: ignore[arg-type]


def test_dry_run_seen_reports_a_plan_once_until_it_or_the_node_changes() -> None:
    """The same action on the same node in the same state is new once.

    A new cause, action or state before makes it new again, per node.
    """
    seen = DryRunSeen()
    assert seen.is_new("w-0", ("drain", "c1"), "idle")
    assert not seen.is_new("w-0", ("drain", "c1"), "idle")
    assert seen.is_new("w-1", ("drain", "c1"), "idle")
    assert seen.is_new("w-0", ("drain", "c2"), "idle")
    assert seen.is_new("w-0", ("drain", "c1"), "mixed")
    assert not seen.is_new("w-0", ("drain", "c1"), "mixed")


def test_dry_run_seen_stays_bounded() -> None:
    """Past its node bound the memory starts over instead of growing."""
    seen = DryRunSeen(max_nodes=10)
    for i in range(100):
        seen.is_new(f"w-{i}", ("drain", "c"), None)
    assert len(seen) <= 10

"""The pure parts of the libslurm binding: outcome mapping, loading fallback, one in flight."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from slonkd.adapters.slurm import libslurm, libslurm_child
from slonkd.adapters.slurm.libslurm import (
    SLURM_NO_CHANGE_IN_DATA,
    SLURM_PROTOCOL_VERSION_ERROR,
    NodeTableStamp,
    interpret,
)
from slonkd.core.errors import TerminalError, TransientError


def test_success_is_a_change_with_the_packed_time() -> None:
    """A table that came back means changed; its time is the one to send next."""
    assert interpret(0, 0, 100, 105) == NodeTableStamp(changed=True, last_update=105)


def test_no_change_keeps_the_time_sent() -> None:
    """SLURM_NO_CHANGE_IN_DATA: unchanged, and the caller keeps its time."""
    assert interpret(-1, SLURM_NO_CHANGE_IN_DATA, 100, None) == NodeTableStamp(
        changed=False, last_update=100
    )


def test_protocol_mismatch_is_terminal_other_errors_transient() -> None:
    """A library of another release can never talk to this slurmctld; anything else may pass."""
    with pytest.raises(TerminalError):
        interpret(-1, SLURM_PROTOCOL_VERSION_ERROR, 100, None)
    with pytest.raises(TransientError):
        interpret(-1, 1001, 100, None)  # SLURM_COMMUNICATIONS_CONNECTION_ERROR
    with pytest.raises(TransientError):
        interpret(0, 0, 100, None)  # success without a message: not trusted


def test_unloadable_library_gives_none() -> None:
    """A library that cannot be opened: None, the caller keeps the scontrol poll."""

    def refuse(path: str) -> Any:
        raise OSError(f"{path}: cannot open shared object file")

    assert libslurm_child.load("/nonexistent/libslurm.so", opener=refuse) is None


class _Fn:
    """A C function stand-in: callable, with ctypes' argtypes and restype attributes."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.argtypes: Any = None
        self.restype: Any = None

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


class _Blocking:
    """A stand-in for the C library whose slurm_load_node blocks until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.slurm_load_node = _Fn(self._load)
        self.slurm_free_node_info_msg = _Fn(lambda msg: None)
        self.slurm_strerror = _Fn(lambda errno: b"fake")
        self.slurm_init = _Fn(lambda conf: None)

    def _load(self, since: int, resp: Any, flags: int) -> int:
        self.calls += 1
        self.release.wait(10)
        return -1


async def test_timeout_is_transient_and_one_call_in_flight() -> None:
    """A call past its wait raises TransientError; until it returns, the next fails fast."""
    fake = _Blocking()
    lib = libslurm.LibSlurm(fake, "fake")
    with pytest.raises(TransientError, match="no answer"):
        await lib.changed_since(0, timeout_s=0.05)
    with pytest.raises(TransientError, match="in flight"):
        await lib.changed_since(0, timeout_s=0.05)
    assert fake.calls == 1
    fake.release.set()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if lib._busy.acquire(blocking=False):
            lib._busy.release()
            break
    with pytest.raises(TransientError):  # errno 0 after -1: transient
        await lib.changed_since(0, timeout_s=1.0)
    assert fake.calls == 2


def test_a_library_that_would_exit_slonkd_is_not_loaded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """libslurm's fatal() on a missing slurm.conf ends its child, before it is ready: None."""
    if not any(Path(p).exists() for p in libslurm.LIBRARY_PATHS if p.startswith("/")):
        pytest.skip("no libslurm installed")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing" / "slurm.conf"))
    monkeypatch.delenv("SLURM_LIBRARY", raising=False)
    assert libslurm_child.load() is None


def test_the_child_refuses_a_missing_slurm_conf_before_any_library_call(tmp_path: Path) -> None:
    """A slurm.conf that cannot be read: exit 2, one line naming the path, no library opened.

    libslurm itself would fall back to a configless DNS SRV lookup, which hangs where the
    resolver does not answer (issue 37 item 10: ``load()`` took 10.75 s and raised). The
    library path here does not exist either: only a child that never touched it says this.
    """
    missing = tmp_path / "missing" / "slurm.conf"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "slonkd.adapters.slurm.libslurm",
            "/nonexistent/lib.so",
            str(missing),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"libslurm child: cannot read slurm.conf {missing}: No such file or directory"
    ]


def test_a_missing_slurm_conf_is_refused_at_once_and_logged_with_its_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SLURM_CONF names a missing file: load() is None within seconds, the log names it."""
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "gone.conf"))
    monkeypatch.delenv("SLURM_LIBRARY", raising=False)
    began = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        assert libslurm_child.load("/nonexistent/lib.so") is None
    assert time.monotonic() - began < 5
    (said,) = [e for e in logs if e["event"] == "slurm.libslurm_unavailable"]
    assert f"cannot read slurm.conf {tmp_path / 'gone.conf'}" in said["tried"][0]


def test_a_child_that_outlives_its_start_is_a_retry_not_a_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child slow to start (a busy node) says nothing about the library.

    load() raises TransientError so that the caller tries again later; it used to give None,
    and the coordinator then kept the scontrol poll for the life of the process.
    """
    monkeypatch.setattr(libslurm_child, "CHILD_PREFIX", ("sh", "-c", 'sleep 5; exec "$@"', "slow"))
    monkeypatch.setattr(libslurm_child, "CHILD_START_S", 0.3)
    with pytest.raises(TransientError, match="not ready"):
        libslurm_child.load("libc.so.6")


FAKE_CHILD = """
import json, sys
print(json.dumps({"ready": "fake"}), flush=True)
for line in sys.stdin:
    if int(line) == 13:
        print("Name or service not known", file=sys.stderr, flush=True)
        sys.exit(40)
    print(json.dumps({"changed": True, "last_update": int(line) + 1}), flush=True)
"""


async def test_a_child_that_dies_on_a_question_is_an_error_and_is_started_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """libslurm's fatal() at a question ends its child, not slonkd.

    A transient error, then a new child once the restart wait is over (it ended the
    coordinator, exit 40, before).
    """
    fake = tmp_path / "child.py"
    fake.write_text(FAKE_CHILD)
    monkeypatch.setattr(libslurm_child, "CHILD_PREFIX", (sys.executable, str(fake)))
    monkeypatch.setattr(libslurm_child, "RESTART_S", 0.3)
    lib = libslurm_child.load("fake-libslurm.so")
    assert isinstance(lib, libslurm_child.ChildLibSlurm)
    try:
        assert (await lib.changed_since(5)).last_update == 6
        with pytest.raises(TransientError, match="exited 40: Name or service not known"):
            await lib.changed_since(13)
        with pytest.raises(TransientError, match="next start in"):
            await lib.changed_since(7)  # not at once: a child that keeps dying costs little
        await asyncio.sleep(0.35)
        assert (await lib.changed_since(7)).last_update == 8
        assert lib.starts == 2
    finally:
        lib.close()


def test_a_child_that_says_something_else_first_is_refused_not_waited_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A live child whose first line is not ``ready`` is ended and refused (it hung load)."""
    fake = tmp_path / "chatty.py"
    fake.write_text("import time\nprint('hello', flush=True)\ntime.sleep(60)\n")
    monkeypatch.setattr(libslurm_child, "CHILD_PREFIX", (sys.executable, str(fake)))
    began = time.monotonic()
    assert libslurm_child.load("fake-libslurm.so") is None
    assert time.monotonic() - began < 10

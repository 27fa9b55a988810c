"""``slonkd tls-reload``: SIGHUP to the named processes when their certificate and key change.

Real child processes stand in for mosquitto: each records every SIGHUP in a file of its own.
One is named by its ``comm`` (as mosquitto is), one by its ``argv[0]``, and a decoy by
another name; the test's names are unique to it, so nothing else on the machine can match.
The files are a Secret's mount (:mod:`tests.unit.test_tls_files`), swapped as the kubelet
does. A pair that does not load signals nobody; bad flags exit 2 with one line.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from structlog.testing import capture_logs

from slonkd.cli import main as cli
from slonkd.cli.tls_reload import Watcher, named
from tests.unit.test_tls_files import Pki, _swap, certs, pki

__all__ = ["certs", "pki"]  # the fixtures, shared with test_tls_files

CHILD = r"""
import signal, sys, time
name, record = sys.argv[1], sys.argv[2]
if name != "-":
    with open("/proc/self/comm", "w") as comm:
        comm.write(name)
def hup(signum, frame):
    with open(record, "a") as out:
        out.write("HUP\n")
signal.signal(signal.SIGHUP, hup)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""
NAME = f"tlsr-{os.getpid() % 1_000_000}"
"""The processes' name: this test's own (at most 15 characters, the kernel's ``comm``)."""


class Child:
    """A process that records each SIGHUP it gets in ``record``."""

    def __init__(self, record: Path, *, comm: str = "-", argv0: str | None = None) -> None:
        self.record = record
        record.touch()
        argv = [argv0 or sys.executable, "-c", CHILD, comm, str(record)]
        self.proc = subprocess.Popen(
            argv, executable=sys.executable, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "ready\n"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def hups(self, at_least: int = 0, timeout_s: float = 5.0) -> int:
        """SIGHUPs recorded (waiting up to ``timeout_s`` for ``at_least``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.record.read_text().count("HUP")
            if seen >= at_least or time.monotonic() > deadline:
                return seen
            time.sleep(0.02)


@pytest.fixture
def children(tmp_path: Path) -> Iterator[dict[str, Child]]:
    """Named by comm, named by argv[0], and a decoy named otherwise."""
    made: dict[str, Child] = {}
    try:
        made["comm"] = Child(tmp_path / "comm.log", comm=NAME)
        made["argv0"] = Child(tmp_path / "argv0.log", argv0=f"/usr/sbin/{NAME}")
        made["decoy"] = Child(tmp_path / "decoy.log", comm=f"{NAME}x")
        yield made
    finally:
        for child in made.values():
            child.proc.kill()
            child.proc.wait(timeout=10)


def _watcher(p: Pki) -> Watcher:
    return Watcher(str(p.mount / "tls.crt"), str(p.mount / "tls.key"), NAME, signal.SIGHUP)


def _rotate(p: Pki, version: str) -> None:
    _swap(p.mount, version, p.second.cert.read_bytes(), p.second.key.read_bytes())


def test_a_new_pair_signals_the_named_processes_only(pki: Pki, children: dict[str, Child]) -> None:
    """Nothing changed: nobody is signalled; after the swap both named processes, once."""
    watcher = _watcher(pki)
    assert named(NAME) == sorted([children["comm"].pid, children["argv0"].pid])
    assert watcher.check() == []
    _rotate(pki, "v2")
    assert watcher.check() == sorted([children["comm"].pid, children["argv0"].pid])
    assert watcher.check() == []
    assert children["comm"].hups(1) == 1
    assert children["argv0"].hups(1) == 1
    assert children["decoy"].hups() == 0


def test_a_pair_that_does_not_load_signals_nobody(pki: Pki, children: dict[str, Child]) -> None:
    """A key that is not the certificate's: one warning, no signal; the good pair then signals."""
    watcher = _watcher(pki)
    with capture_logs() as logs:
        _swap(pki.mount, "v2", pki.second.cert.read_bytes(), pki.first.key.read_bytes())
        assert watcher.check() == []
        assert watcher.check() == []
    assert [e["event"] for e in logs] == ["tls.reload_failed"]
    assert children["comm"].hups(timeout_s=0.3) == 0
    _rotate(pki, "v3")
    assert watcher.check() == sorted([children["comm"].pid, children["argv0"].pid])


def test_the_command_signals_when_the_files_change(pki: Pki, children: dict[str, Child]) -> None:
    """``slonkd tls-reload`` in a process of its own: the swap gets a SIGHUP; SIGTERM ends it."""
    argv = [
        sys.executable, "-m", "slonkd.cli.main", "tls-reload",
        "--cert", str(pki.mount / "tls.crt"), "--key", str(pki.mount / "tls.key"),
        "--process-name", NAME, "--period", "0.05",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        started = proc.stderr.readline()  # logged once the first stamp is taken
        assert '"event": "tls_reload.watching"' in started, started
        _rotate(pki, "v2")
        assert children["comm"].hups(1, timeout_s=10) == 1
        said = _line_with(proc.stderr, '"event": "tls.signalled"', timeout_s=10)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert said, err  # logged after the signal: read before SIGTERM, which may come first
    assert children["decoy"].hups() == 0


def _line_with(stream: IO[str], text: str, *, timeout_s: float) -> str:
    """The first line of ``stream`` holding ``text`` within ``timeout_s`` ("" if none came)."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([stream], [], [], left)
        if not ready:
            break
        line = stream.readline()
        if not line:
            break
        if text in line:
            return line
    return ""


BAD_FLAGS = [
    (["--signal", "NOPE"], "--signal NOPE: no such signal"),
    (["--period", "0"], "--period 0.0: give 0 to 3600 seconds"),
    (["--process-name", "/usr/sbin/mosquitto"], "a process name, no path"),
]
"""A wrong flag and what the one line says of it."""


@pytest.mark.parametrize(("flags", "says"), BAD_FLAGS)
def test_bad_flags_exit_2_with_one_line(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong flag is named on one line of stderr, exit 2, before anything is watched.

    structlog is left alone: configured in the test process it would print to pytest's
    captured stderr, closed once the test ends, and fail every later test of the worker.
    """
    monkeypatch.setattr("slonkd.cli.main.configure_logging", lambda **_: None)
    base = ["tls-reload", "--cert", "c", "--key", "k", "--process-name", "mosquitto"]
    assert cli.main([*base, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert says in err


def test_the_command_is_registered() -> None:
    """``slonkd tls-reload`` parses with its defaults: SIGHUP every 10 s."""
    parser, _ = cli._parser("tls-reload")
    args = parser.parse_args(["tls-reload", "--cert", "c", "--key", "k", "--process-name", "m"])
    assert isinstance(args, argparse.Namespace)
    assert (args.signal, args.period) == ("HUP", 10.0)


def test_no_process_of_the_name_is_a_warning(pki: Pki) -> None:
    """A new pair and nobody to signal (the broker restarting): one warning, no pid."""
    watcher = Watcher(
        str(pki.mount / "tls.crt"), str(pki.mount / "tls.key"), f"{NAME}-no", signal.SIGHUP
    )
    with capture_logs() as logs:
        _rotate(pki, "v2")
        assert watcher.check() == []
    (line,) = logs
    assert (line["event"], line["log_level"], line["pids"]) == ("tls.signalled", "warning", [])

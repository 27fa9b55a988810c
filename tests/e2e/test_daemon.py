"""The e2e process helper against a tiny Python child: start until an event, stop in order.

The child stands in for a slonkd role (it runs in place of ``slonkd.cli.main``): it logs
JSON lines, and either exits on SIGTERM or ignores it and prints a "task dump" on SIGUSR1.
No service is needed.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from slonkd_sandbox.daemon import Coordinators, Daemon
from slonkd_sandbox.procs import HarnessError

CHILD = """
import json, os, signal, sys, time
def say(event, **kw):
    print(json.dumps({"event": event, **kw}), flush=True)
def term(*_):
    say("child.term")
    if os.environ["CHILD_MODE"] == "polite":
        sys.exit(0)
signal.signal(signal.SIGTERM, term)
signal.signal(signal.SIGUSR1, lambda *_: say("child.dump"))
if os.environ["CHILD_MODE"] == "crash":
    print("Traceback: boom", flush=True)
    sys.exit(3)
say("child.ready", pid=os.getpid(), argv=sys.argv[1:], pod=os.environ.get("POD_NAME"),
    config=os.environ.get("SLONKD_CONFIG"))
while True:
    time.sleep(0.05)
"""


def _child(tmp_path: Path, mode: str) -> Daemon:
    """A daemon whose interpreter runs CHILD instead of the slonkd module (argv shifts)."""
    return Daemon(
        role="child",
        env={**os.environ, "CHILD_MODE": mode},
        log=tmp_path / "child.log",
        python_args=("-c", CHILD),
    )


def test_start_waits_for_the_event_and_a_polite_child_stops_on_sigterm(tmp_path: Path) -> None:
    """start(until=...) returns after the event; stop() sends SIGTERM only and reports True."""
    child = _child(tmp_path, "polite").start(until="child.ready", timeout_s=20)
    assert child.running
    assert child.events("child.ready")[0]["pid"] == child.pid
    assert child.stop(grace_s=10) is True
    assert not child.running
    assert [e["event"] for e in child.events()] == ["child.ready", "child.term"]
    assert child.proc is not None
    assert child.proc.returncode == 0


def test_a_child_that_ignores_sigterm_is_dumped_then_killed(tmp_path: Path) -> None:
    """SIGTERM, then past the grace SIGUSR1 (its dump reaches the log), then SIGKILL."""
    child = _child(tmp_path, "stubborn").start(until="child.ready", timeout_s=20)
    assert child.stop(grace_s=0.5, dump_s=0.5) is False
    assert [e["event"] for e in child.events()] == ["child.ready", "child.term", "child.dump"]
    assert child.proc is not None
    assert child.proc.returncode == -signal.SIGKILL


def test_a_restart_waits_for_the_event_anew_on_the_same_log(tmp_path: Path) -> None:
    """The first run's event in the shared log does not count for the second start."""
    child = _child(tmp_path, "polite").start(until="child.ready", timeout_s=20)
    first = child.pid
    child.stop()
    child.start(until="child.ready", timeout_s=20)
    assert [e["pid"] for e in child.events("child.ready")] == [first, child.pid]
    assert child.stop() is True


def test_an_exit_before_the_event_fails_at_once_with_the_log(tmp_path: Path) -> None:
    """A child that dies before its event fails start() with its status and log tail."""
    with pytest.raises(HarnessError, match=r"exited with 3(.|\n)*Traceback: boom"):
        _child(tmp_path, "crash").start(until="child.ready", timeout_s=20)


def test_the_coordinator_factory_starts_candidates_and_fails_on_one_that_ignores_sigterm(
    tmp_path: Path,
) -> None:
    """Coordinators: POD_NAME and a written config per candidate; stop() names a stuck one."""
    group = Coordinators(root=tmp_path, python_args=("-c", CHILD), grace_s=0.5)
    polite = group.start({**os.environ, "CHILD_MODE": "polite"}, config={"resync_s": 1},
                         until="child.ready")  # fmt: skip
    stubborn = group.start({**os.environ, "CHILD_MODE": "stubborn"}, identity="coordinator-1",
                           config=tmp_path / "mine.json", until="child.ready")  # fmt: skip
    (ready,) = polite.events("child.ready")
    assert ready["argv"] == ["-m", "slonkd.cli.main", "coordinator"]
    assert ready["pod"] == "coordinator-0"
    written = json.loads(Path(ready["config"]).read_text())
    # the settings given, and the API on a free loopback port (never 0.0.0.0:8081 in tests)
    assert written == {"resync_s": 1, "api_host": "127.0.0.1", "api_port": 0}
    assert stubborn.events("child.ready")[0]["config"] == str(tmp_path / "mine.json")
    assert polite.log != stubborn.log
    with pytest.raises(HarnessError, match=r"\['coordinator-1'\] ignored SIGTERM(.|\n)*child.dump"):
        group.stop()
    assert not polite.running
    assert not stubborn.running

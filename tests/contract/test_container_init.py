"""slonk-init, PID 1 of the SLURM images, run here as a plain process with Debian's munged.

It passes the command's exit status through, forwards signals, starts a real munged with
the key it is given (as the munge user) and stops it afterwards, and gives up (exit 1,
command stopped) when munged dies under a running daemon.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slonkd_sandbox.procs import wait_for

INIT = Path(__file__).resolve().parents[2] / "container" / "init" / "slonk-init"


@pytest.fixture
def munge_dirs() -> Iterator[dict[str, str]]:
    """Key and munged directories outside /etc and /run, reachable by the munge user."""
    root = Path(tempfile.mkdtemp(prefix="slonk-init-", dir="/tmp"))
    root.chmod(0o755)
    key = root / "key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    yield {
        "SLONK_INIT_MUNGE_DIR": str(root / "etc"),
        "SLONK_INIT_MUNGE_RUN": str(root / "run"),
        "KEY": str(key),
    }
    subprocess.run(["rm", "-rf", str(root)], check=False)


_started: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    """Whatever a test leaves running (it failed), its whole process group is killed."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _init(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(INIT), *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _started.append(proc)
    return proc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_exit_status_of_the_command_is_passed_through() -> None:
    """The command's status is slonk-init's; a signal death reads 128 + N like a shell."""
    assert _init("--", "sh", "-c", "exit 7").wait(timeout=30) == 7
    assert _init("sh", "-c", "kill -9 $$").wait(timeout=30) == 128 + 9


def test_nothing_to_run_is_a_usage_error() -> None:
    """Without a command and without helpers slonk-init refuses to start."""
    proc = _init()
    assert proc.wait(timeout=30) == 2
    assert proc.stderr is not None
    assert "nothing to run" in proc.stderr.read()


def test_sigterm_is_forwarded_to_the_command(tmp_path: Path) -> None:
    """A SIGTERM to slonk-init reaches the command, whose own exit status then comes back."""
    ready = tmp_path / "ready"
    script = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )
    proc = _init("--", sys.executable, "-c", script)
    wait_for("command ready", ready.exists, timeout_s=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 42


def test_munged_runs_with_the_given_key_and_stops_after_the_command(
    munge_dirs: dict[str, str],
) -> None:
    """munged answers with the installed key (0400, munge's) while the command runs, then stops."""
    run = Path(munge_dirs["SLONK_INIT_MUNGE_RUN"])
    sock = str(run / "munge.socket.2")
    check = f"munge -n -S {sock} | unmunge -S {sock} >/dev/null && cat {run / 'munged.pid'}"
    proc = _init("--munge-key", munge_dirs["KEY"], "--", "sh", "-c", check, env=munge_dirs)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    munged_pid = int(out.strip())
    wait_for("munged stopped", lambda: not _alive(munged_pid), timeout_s=15)
    key = Path(munge_dirs["SLONK_INIT_MUNGE_DIR"]) / "munge.key"
    assert key.read_bytes() == Path(munge_dirs["KEY"]).read_bytes()
    assert key.stat().st_mode & 0o777 == 0o400
    assert key.owner() == "munge"


def test_the_command_is_stopped_when_munged_dies(munge_dirs: dict[str, str]) -> None:
    """munged killed under a running daemon: the daemon gets SIGTERM and slonk-init exits 1."""
    pid_file = Path(munge_dirs["SLONK_INIT_MUNGE_RUN"]) / "munged.pid"
    proc = _init("--munge-key", munge_dirs["KEY"], "--", "sleep", "300", env=munge_dirs)
    wait_for(
        "munged pid file",
        lambda: pid_file.exists() and pid_file.read_text().strip() != "",
        timeout_s=30,
    )
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    begun = time.monotonic()
    assert proc.wait(timeout=30) == 1
    assert time.monotonic() - begun < 15
    sleeping = subprocess.run(
        ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False
    )
    assert not sleeping.stdout.strip()
    assert proc.stderr is not None
    assert "munged exited" in proc.stderr.read()

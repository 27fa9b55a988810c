"""``slonkd sandbox up`` shows the runner's log until the state says ready, and all of it.

CI saw ``up --real`` end without the lines that say where to look: the runner wrote ``ready``
and then printed them, and ``up`` read the log before the state, so a state that turned ready
between its two reads ended ``up`` with those lines unshown.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.sandbox import ctl as sandbox_ctl


class _Running:
    """A runner process that has not exited."""

    returncode = None

    def poll(self) -> int | None:
        return None


def test_the_lines_written_as_the_state_turns_ready_are_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runner prints where to look, then writes ready: ``up`` shows those lines."""
    log = tmp_path / "sandbox.log"
    log.write_text("[sandbox] helm install rel\n")
    reads = {"n": 0}

    def read_state(root: Path) -> dict[str, Any] | None:
        reads["n"] += 1
        if reads["n"] < 3:
            return {"ready": False}
        # the runner, between up's reads: the lines, then the ready state
        with log.open("a") as out:
            out.write("    source /sb/env.sh\n")
        (root / "state.json").write_text(json.dumps({"ready": True}))
        return {"ready": True}

    monkeypatch.setattr(sandbox_ctl, "read_state", read_state)
    monkeypatch.setattr("slonkd_sandbox.sandbox.ctl.time.sleep", lambda _s: None)
    proc: Any = _Running()
    ready = sandbox_ctl.follow(tmp_path, log, proc, deadline=time.monotonic() + 30)
    shown = capsys.readouterr().out
    assert ready
    assert "helm install rel" in shown
    assert "source /sb/env.sh" in shown


def test_a_runner_that_died_has_its_last_lines_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A runner that exits before ready: ``up`` shows what it wrote last, then says not ready."""
    log = tmp_path / "sandbox.log"
    proc = subprocess.Popen(
        ["sh", "-c", f"echo '[sandbox] cannot start slurmctld' >> {log}"],
    )
    proc.wait(timeout=10)
    ready = sandbox_ctl.follow(tmp_path, log, proc, deadline=time.monotonic() + 30)
    assert not ready
    assert "cannot start slurmctld" in capsys.readouterr().out

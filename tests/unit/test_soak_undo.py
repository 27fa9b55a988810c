"""The soak's operator undo (bench/soak.py ``Soak.do_workload``) judged from SLURM's own reads.

Neighbours: tests/unit/test_soak_schedule.py (the schedule), tests/unit/test_soak_check.py
(the invariants). The fleet is replaced by recorded answers: this is the executor's logic only.
"""

from __future__ import annotations

import queue
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

from bench.soak import Soak, Step
from bench.soak_check import Mark, Marks, Timeline

REASON = "ops: maintenance ticket 590"


def _soak(tmp_path: Path, reads: list[tuple[str, str]]) -> Soak:
    """A soak whose SLURM refuses every resume and answers ``reads`` in turn.

    Its checker last read the node before the operator's drain reached SLURM (idle, no
    reason), as when a drain queued through a slurmctld outage lands just before its undo.
    """
    soak = Soak.__new__(Soak)
    soak.marks = Marks()
    soak.marks.slurm["d-11"] = Mark(event=590, since=time.time(), reason=REASON)
    soak.checker = SimpleNamespace(last=SimpleNamespace(slurm={"d-11": ("idle", "", "")}))  # type: ignore[assignment]
    soak.timeline = Timeline(tmp_path / "timeline.jsonl", time.time())
    answers = iter(reads)
    soak.scontrol = lambda *args: False  # type: ignore[method-assign]
    soak.slurm_node = lambda node: next(answers)  # type: ignore[method-assign]
    return soak


def test_a_refused_resume_that_cleared_the_operators_drain_is_the_operators_undo(
    tmp_path: Path,
) -> None:
    """SLURM refuses a resume of UNKNOWN+DRAIN yet clears the drain: the undo is done.

    The mark leaves the soak's books (slonkd did not take it), although the checker's
    last read, older than the drain, never showed it (the false I1 of the 60-minute run,
    seed 2026).
    """
    soak = _soak(tmp_path, [("drained*", REASON), ("unknown*", "")])
    step = Step(id=591, at=1288.52, kind="op_undrain", target="d-11", undo_of=590)
    assert soak.do_workload(step) == "done"
    assert "d-11" not in soak.marks.slurm
    assert "resume_refused_but_applied" in (tmp_path / "timeline.jsonl").read_text()


def test_a_refused_resume_that_left_the_drain_keeps_the_mark(tmp_path: Path) -> None:
    """SLURM refuses the resume and the drain stays: the mark is kept for the final undo."""
    soak = _soak(tmp_path, [("drained*", REASON), ("drained*", REASON)])
    step = Step(id=591, at=1288.52, kind="op_undrain", target="d-11", undo_of=590)
    assert soak.do_workload(step) == "failed: scontrol failed, kept"
    assert soak.marks.slurm["d-11"].event == 590


def test_an_operators_command_that_times_out_is_recorded_and_the_next_one_runs(
    tmp_path: Path,
) -> None:
    """A ``slonkd pause`` that outlives its 60 s is a timed-out event; the queue goes on.

    It killed the ops thread of a soak on a machine at load 60 (2026-12-02), and with it every
    later pause, unpause and budget reset of the run.
    """
    soak = _soak(tmp_path, [])
    ran: list[tuple[str, ...]] = []

    def cli(*argv: str) -> int:
        ran.append(argv)
        if argv[0] == "pause":
            raise subprocess.TimeoutExpired(["slonkd", *argv], 60)
        return 0

    soak.slonkd_cli = cli  # type: ignore[method-assign]
    soak.workload = 0
    soak.ops = queue.Queue()
    soak.ops.put((Step(id=74, at=1.0, kind="pause", target=""), ["pause", "--reason", "soak-74"]))
    soak.ops.put((Step(id=75, at=2.0, kind="unpause", target=""), ["unpause"]))
    soak.ops.put(None)
    soak.run_ops()
    assert ran == [("pause", "--reason", "soak-74"), ("unpause",)]
    assert soak.workload == 1
    timeline = (tmp_path / "timeline.jsonl").read_text()
    assert "timed out" in timeline

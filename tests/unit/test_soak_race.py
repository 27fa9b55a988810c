"""The soak checker's placing of a lost operator write inside an agent's compare-and-set window.

SLURM has no conditional update: an operator's drain that reaches slurmctld between an
agent's read and its write is overwritten. The hour's soak (seed 2026, t = 2,476 s) had one;
the agent now logs its window (``read_at``, ``written_at``), and the checker counts a lost
mark as raced only when the operator's write overlaps that window. Everything else stays an
I1 violation: a write whose read came after the operator's write had returned, or a write
of the coordinator's or the preStop's (they log no window).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from bench.soak_check import Checker, Mark, Marks, Snapshot, Timeline
from bench.soak_fleet import SoakFleet

REASON = "ops: maintenance ticket 1129"
OURS = ("drained", "slonkd:pod-terminating pod is terminating")


BEGAN = time.time() - 10  # the operator's scontrol started; it returned 0.11 s later
SINCE = BEGAN + 0.11


def _checker(tmp_path: Path, agent_lines: list[dict[str, Any]]) -> tuple[Checker, Mark]:
    mark = Mark(event=1129, since=SINCE, reason=REASON, began=BEGAN)
    marks = Marks()
    marks.slurm["d-16"] = mark
    (tmp_path / "agent-d-16.log").write_text("".join(json.dumps(e) + "\n" for e in agent_lines))
    fleet = SimpleNamespace(logs=tmp_path, root=tmp_path)
    timeline = Timeline(tmp_path / "timeline.jsonl", time.time())
    return Checker(fleet=cast(SoakFleet, fleet), marks=marks, timeline=timeline), mark


def _drain(read_at: float, written_at: float, *, changed: bool = True) -> dict[str, Any]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(written_at + 0.05)) + "Z"
    return {
        "event": "agent.mirror_applied", "action": "drain", "cause": "pod-terminating",
        "changed": changed, "state_before": "IDLE", "state_after": "IDLE+DRAIN",
        "read_at": read_at, "written_at": written_at, "timestamp": stamp,
    }  # fmt: skip


def _judge(checker: Checker, mark: Mark) -> list[dict[str, Any]]:
    slurm = {"d-16": (OURS[0], OURS[1], "root")}
    snap = Snapshot(t=time.time(), slurm=slurm, knodes=None, pods=None, lease=None)
    checker._slurm_mark_changed(snap, "d-16", mark, list(OURS))
    checker.timeline.close()
    return [json.loads(line) for line in checker.timeline.path.read_text().splitlines()]


def test_an_operator_write_inside_the_agents_window_is_counted_raced(tmp_path: Path) -> None:
    """The agent read before the operator's write returned and wrote after it began."""
    checker, mark = _checker(tmp_path, [_drain(BEGAN + 0.05, BEGAN + 0.09)])
    lines = _judge(checker, mark)
    assert checker.foreign_raced == 1
    assert sum(checker.violations.values()) == 0
    (raced,) = [e for e in lines if e["kind"] == "foreign_mark_raced"]
    assert raced["operator_write"] == [mark.began, mark.since]
    assert "d-16" not in checker.marks.slurm


def test_a_write_read_after_the_operators_returned_is_a_violation(tmp_path: Path) -> None:
    """The agent's read came after the operator's drain had returned: it saw it, I1."""
    checker, mark = _checker(tmp_path, [_drain(SINCE + 0.02, SINCE + 0.04)])
    lines = _judge(checker, mark)
    assert checker.foreign_raced == 0
    assert checker.violations["I1"] == 1
    (violation,) = [e for e in lines if e["kind"] == "violation"]
    assert violation["slonkd_writes"][0]["read_at"] == SINCE + 0.02


def test_a_coordinator_write_in_the_same_window_is_a_violation(tmp_path: Path) -> None:
    """The coordinator's audit records carry no window: never counted raced."""
    checker, mark = _checker(tmp_path, [])
    checker.audit_recent.append(
        {"node": "d-16", "action": "drain", "ts": SINCE + 0.01, "cause": "k8s-cordoned"}
    )
    _judge(checker, mark)
    assert checker.foreign_raced == 0
    assert checker.violations["I1"] == 1


def test_a_skipped_agent_write_in_the_window_explains_nothing(tmp_path: Path) -> None:
    """The agent read the operator's drain and skipped: a later change is not a race, it is I1."""
    checker, mark = _checker(tmp_path, [_drain(BEGAN + 0.05, BEGAN + 0.09, changed=False)])
    _judge(checker, mark)
    assert checker.foreign_raced == 0
    assert checker.violations["I1"] == 1

"""The soak's operator undo (bench/soak.py ``Soak.do_workload``) judged from SLURM's own reads.

Neighbours: tests/unit/test_soak_schedule.py (the schedule), tests/unit/test_soak_check.py
(the invariants). The fleet is replaced by recorded answers: this is the executor's logic only.
"""

from __future__ import annotations

import http.client
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


class _Nodes:
    """The apiserver's node answers: a PATCH that lands and then loses its answer, then GETs."""

    def __init__(self, cordoned: bool, *, lands: bool) -> None:
        self.cordoned = cordoned
        self.lands = lands
        self.calls: list[str] = []

    def request(self, method: str, path: str, body: object = None, **_: object) -> object:
        self.calls.append(method)
        if method == "PATCH":
            if self.lands:
                self.cordoned = bool(body["spec"]["unschedulable"])  # type: ignore[index]
            raise http.client.RemoteDisconnected("Remote end closed connection without response")
        return {"metadata": {"name": "k4"}, "spec": {"unschedulable": self.cordoned}}


def _kube_soak(tmp_path: Path, api: _Nodes) -> Soak:
    soak = _soak(tmp_path, [])
    soak.fleet = SimpleNamespace(kube=SimpleNamespace(api=api))  # type: ignore[assignment]
    knodes = {"k4": {"spec": {"unschedulable": api.cordoned}}}
    soak.checker = SimpleNamespace(last=SimpleNamespace(knodes=knodes))  # type: ignore[assignment]
    return soak


def test_an_uncordon_that_landed_though_its_answer_was_lost_is_the_operators_undo(
    tmp_path: Path,
) -> None:
    """The apiserver was killed while it took the soak's uncordon (seed 9001, t = 213 s).

    The uncordon landed, its answer did not: the soak put its mark back and the checker then
    blamed someone for removing the operator's cordon (a false I1). The outcome is read.
    """
    api = _Nodes(cordoned=True, lands=True)
    soak = _kube_soak(tmp_path, api)
    soak.marks.cordons["k4"] = Mark(event=116, since=time.time())
    assert soak.uncordon("k4", 116).startswith("done")
    assert "k4" not in soak.marks.cordons
    assert api.calls == ["PATCH", "GET"]


def test_an_uncordon_that_did_not_land_keeps_the_mark(tmp_path: Path) -> None:
    """Lost on the way: the node still reads cordoned, so the mark stays for the final undo."""
    api = _Nodes(cordoned=True, lands=False)
    soak = _kube_soak(tmp_path, api)
    soak.marks.cordons["k4"] = Mark(event=116, since=time.time())
    assert soak.uncordon("k4", 116).startswith("failed")
    assert soak.marks.cordons["k4"].event == 116


def test_a_cordon_that_landed_though_its_answer_was_lost_is_the_operators(tmp_path: Path) -> None:
    """The operator's cordon landed without an answer: it is a mark of the soak's, as any."""
    api = _Nodes(cordoned=False, lands=True)
    soak = _kube_soak(tmp_path, api)
    step = Step(id=40, at=100.0, kind="op_cordon", target="k4")
    assert soak.do_workload(step) == "done"
    assert soak.marks.cordons["k4"].event == 40


class _Tainted(_Nodes):
    """A node whose taint PATCH lands and loses its answer."""

    def __init__(self) -> None:
        super().__init__(cordoned=False, lands=True)
        self.taints: list[dict[str, str]] = []

    def request(self, method: str, path: str, body: object = None, **_: object) -> object:
        self.calls.append(method)
        if method == "PATCH":
            self.taints.append(body[-1]["value"][0])  # type: ignore[index]
            raise http.client.RemoteDisconnected("Remote end closed connection without response")
        spec = {"taints": list(self.taints)}
        return {"metadata": {"name": "k4", "resourceVersion": "7"}, "spec": spec}


def test_a_taint_that_landed_though_its_answer_was_lost_is_the_operators(tmp_path: Path) -> None:
    """Unrecorded, the operator's taint would stay for good and the node never converge."""
    api = _Tainted()
    soak = _kube_soak(tmp_path, api)
    assert soak.taint("k4", 41) == "done"
    assert soak.marks.taints["k4"].event == 41

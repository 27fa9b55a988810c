"""An operator's drain across a slurmctld restart made the way the soak makes one.

The soak (``bench/soak.py``, fault ``slurmctld_stop``) stops slurmctld with
``SlurmCluster.stop_slurmctld()`` (SIGTERM, SIGKILL only after 10 s) and starts it again with
the same argv (``slurmctld -D -f slurm.conf``: no ``-c``, which would clear the saved state,
no ``-R``), as ``systemctl restart`` does. slurmctld saves its state on SIGTERM ("Saving all
slurm state") and recovers DOWN, DRAIN and FAIL with their reasons ("Recovered state of N
nodes"): the drain survives, on a node with a running job (``MIXED+DRAIN``) and on one
whose jobs ended before the stop (``UNKNOWN+DRAIN`` until its slurmd registers again).

On the latter an operator's ``state=resume`` before slurmd registers is refused ("Invalid
node state specified") yet clears DRAIN (22.05 the reason too): the drain the soak's checker once
counted as "lost to the restart" was taken away by the soak's own resume, which it had
recorded as failed.

slurmd is frozen (SIGSTOP) over the restart to hold the unregistered window open: in the
soak it lasts about a second (slurmd registers when slurmctld asks it to) and the operator's
resume, due during the outage, fell into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from bench.soak import Soak, Step
from bench.soak_check import Mark, Timeline
from bench.soak_fleet import SoakFleet
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import Cause, ReasonOwner, reason_owner
from slonkd.core.slurm_plan import SkipReason
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.cluster import SlurmCluster
from slonkd_sandbox.slurm.control import slurmd_host_pid
from tests.contract.conftest import conf_arg, settings_for

pytestmark = pytest.mark.slurm

NODE = "n1"
REASON = "ops: maintenance ticket 25"
CAUSE = Cause(name="health", detail="gpu-xid-79")


def _scontrol_state(cluster: SlurmCluster, node: str) -> str:
    """``State=`` of ``scontrol show node`` (e.g. ``MIXED+DRAIN``, ``UNKNOWN+DRAIN``)."""
    out = cluster.run("scontrol", "show", "node", node).stdout
    found = re.search(r"\bState=(\S+)", out)
    assert found is not None, out
    return found.group(1)


def _sinfo(cluster: SlurmCluster, node: str) -> tuple[str, str]:
    """(state, reason) as the soak's checker reads them (sinfo ``%T``, ``%E``)."""
    out = cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").stdout.strip()
    state, reason = out.splitlines()[0].split("|", 1)
    return state, "" if reason == "none" else reason


def _job_on(cluster: SlurmCluster, node: str, seconds: int) -> str:
    """A running job on ``node`` that ends by itself after ``seconds``, as the soak's do."""
    out = cluster.run(
        "sbatch", "--parsable", "-w", node, "-o", "/dev/null", "--wrap", f"sleep {seconds}"
    ).stdout
    job = out.strip().split(";")[0]

    def running() -> bool:
        got = cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
        return got == "RUNNING"

    wait_for(f"job {job} running", running, timeout_s=30)
    return job


def _drain_then_stop(
    cluster: SlurmCluster, *, job_ends: bool, backend: ScontrolBackend | None = None
) -> str:
    """A job on NODE, the operator's drain (DRAINING), then slurmctld stopped as the soak does.

    ``job_ends``: the job finishes before the stop (the node is DRAINED then). ``backend``:
    slonkd's drain through it (for :data:`CAUSE`) instead of the operator's. Returns the job;
    the caller starts slurmctld again (with NODE's slurmd frozen).
    """
    job = _job_on(cluster, NODE, 6 if job_ends else 600)
    if backend is None:
        cluster.run("scontrol", "update", f"nodename={NODE}", "state=drain", f"reason={REASON}")
    else:
        assert asyncio.run(backend.drain([NODE], CAUSE)).changed == (NODE,)
    reason = _sinfo(cluster, NODE)[1]
    assert _sinfo(cluster, NODE) == ("draining", reason)
    assert (reason == REASON) == (backend is None)
    if job_ends:
        wait_for("drained", lambda: _sinfo(cluster, NODE) == ("drained", reason), timeout_s=40)
    # What SlurmCluster.stop_slurmctld() (the soak's call) sends, to see how it ended.
    how = cluster.control({"op": "stop_slurmctld", "grace_s": 10.0})["how"]
    assert how == "terminated", "slurmctld needed a SIGKILL: it may not have saved its state"
    log = cluster.root / "log" / "slurmctld.log"
    assert "Saving all slurm state" in log.read_text()
    return job


@contextlib.contextmanager
def _slurmd_frozen(cluster: SlurmCluster, node: str) -> Iterator[None]:
    """``node``'s slurmd stopped with SIGSTOP (it cannot register) until the block ends."""
    pid = slurmd_host_pid(conf_arg(cluster), node)
    assert pid is not None, f"no slurmd of {node}"
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _registered(cluster: SlurmCluster, node: str) -> str:
    """Wait until ``node`` has registered again (its base state is no longer UNKNOWN)."""
    states: list[str] = []

    def known() -> bool:
        states.append(_scontrol_state(cluster, node))
        return not states[-1].startswith("UNKNOWN")

    wait_for(f"{node} registered", known, timeout_s=30, interval_s=0.2)
    return states[-1]


def test_slurmctld_stopped_like_the_soak_keeps_an_operators_drain(cluster: SlurmCluster) -> None:
    """A DRAINING node with its job: DRAIN and the reason are there after the restart.

    Right after it (slurmd not registered yet) ``MIXED+DRAIN`` from the recovered job, the
    reason kept; once slurmd answers, DRAINING as before, the job still running.
    """
    job = _drain_then_stop(cluster, job_ends=False)
    with _slurmd_frozen(cluster, NODE):
        cluster.start_slurmctld()
        assert "DRAIN" in _scontrol_state(cluster, NODE).split("+")
        state, reason = _sinfo(cluster, NODE)
        assert reason == REASON
        assert "drain" in state
    wait_for("draining", lambda: _sinfo(cluster, NODE) == ("draining", REASON), timeout_s=30)
    assert cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING"


def test_a_drained_node_keeps_its_drain_until_slurmd_registers(cluster: SlurmCluster) -> None:
    """The job ended before the stop: UNKNOWN+DRAIN (sinfo drained) after it, then DRAINED."""
    _drain_then_stop(cluster, job_ends=True)
    with _slurmd_frozen(cluster, NODE):
        cluster.start_slurmctld()
        assert _scontrol_state(cluster, NODE).split("+")[:2] == ["UNKNOWN", "DRAIN"]
        assert _sinfo(cluster, NODE) == ("drained", REASON)
    assert "DRAIN" in _registered(cluster, NODE).split("+")
    assert _sinfo(cluster, NODE) == ("drained", REASON)


def test_a_resume_before_the_node_registers_is_refused_and_clears_the_drain(
    cluster: SlurmCluster, slurm_release: str
) -> None:
    """``state=resume`` on the recovered UNKNOWN+DRAIN node: an error, and the drain is gone.

    slurmctld clears DRAIN, then finds no state to set from UNKNOWN and answers "Invalid node
    state specified" (22.05's log: "Invalid node state specified 0"). Once slurmd registers
    the node is idle: on 22.05 with no reason, on 24.11 with the operator's reason left on
    it (a stale reason). The operator who read the error as "nothing changed" is wrong.
    """
    _drain_then_stop(cluster, job_ends=True)
    with _slurmd_frozen(cluster, NODE):
        cluster.start_slurmctld()
        assert _sinfo(cluster, NODE) == ("drained", REASON)
        resume = cluster.run("scontrol", "update", f"nodename={NODE}", "state=resume", check=False)
        assert resume.returncode != 0
        assert "Invalid node state specified" in resume.stderr
        assert "DRAIN" not in _scontrol_state(cluster, NODE).split("+")
        assert "drain" not in _sinfo(cluster, NODE)[0]
    assert "DRAIN" not in _registered(cluster, NODE).split("+")
    assert _sinfo(cluster, NODE) == ("idle", "" if slurm_release == "22.05" else REASON)


def test_the_soaks_undrain_counts_a_refused_resume_that_slurm_applied(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The soak's operator undrain in that window: done, its mark gone, the time-line says why.

    Before the fix it answered "failed: scontrol failed, kept" and kept the mark of a drain
    SLURM no longer had; the checker then counted the agent's next drain of the node as
    slonkd changing the operator's drain (I1).
    """
    fleet = cast(SoakFleet, SimpleNamespace(slurm=cluster))
    timeline = Timeline(tmp_path / "timeline.jsonl", time.time())
    soak = Soak(fleet, timeline, seed=0, steps=[])
    _drain_then_stop(cluster, job_ends=True)
    soak.marks.slurm[NODE] = Mark(event=25, since=time.time(), reason=REASON)
    with _slurmd_frozen(cluster, NODE):
        cluster.start_slurmctld()
        outcome = soak.do_workload(Step(id=26, at=0, kind="op_undrain", target=NODE, undo_of=25))
    timeline.close()
    assert outcome == "done"
    assert NODE not in soak.marks.slurm
    assert '"kind": "resume_refused_but_applied"' in (tmp_path / "timeline.jsonl").read_text()


def test_slonkds_own_release_in_that_window_is_done_and_holds_nothing_after(
    cluster: SlurmCluster,
) -> None:
    """slonkd releasing its own drain before the node registers: reported done, rightly.

    The adapter's resume meets the same refusal ("Invalid node state specified") that clears
    DRAIN; it reads the node again and judges by what it shows: ``changed``, not a failure
    to retry or an audit record that says "failed" for a release SLURM made. Once slurmd
    registers the node is idle and slonkd's read finds no hold (24.11 leaves the reason
    text on the idle node: it holds nothing and belongs to nobody).
    """
    backend = ScontrolBackend(settings_for(cluster))
    _drain_then_stop(cluster, job_ends=True, backend=backend)
    with _slurmd_frozen(cluster, NODE):
        cluster.start_slurmctld()
        assert _scontrol_state(cluster, NODE).split("+")[:2] == ["UNKNOWN", "DRAIN"]
        result = asyncio.run(backend.resume([NODE], CAUSE))
        assert result.changed == (NODE,), result
        assert result.skipped == ()
        assert "DRAIN" not in _scontrol_state(cluster, NODE).split("+")
    assert "DRAIN" not in _registered(cluster, NODE).split("+")
    assert _sinfo(cluster, NODE)[0] == "idle"
    node = asyncio.run(backend.read_node(NODE))
    assert node is not None
    assert node.live_reason == ""
    assert reason_owner(node.live_reason) is ReasonOwner.NONE
    again = asyncio.run(backend.resume([NODE], CAUSE))
    assert again.changed == ()
    assert [s.why for s in again.skipped] == [SkipReason.NOT_HELD]

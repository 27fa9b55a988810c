"""slonkd prestop against the real SLURM alone: foreign drains, finished jobs, dead slurmctld.

And an agent that does not take the signal-to-requeue report.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from slonkd.runtime.requeue_report import report_url
from slonkd.testing.procs import free_ports, wait_for
from slonkd.testing.slurm import SlurmCluster

pytestmark = pytest.mark.slurm


def _prestop(
    slurm: SlurmCluster, node: str, grace: float, margin: float = 2.0
) -> tuple[int, float, str]:
    began = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "slonkd.cli.main",
            "prestop",
            "--node",
            node,
            "--grace",
            str(grace),
            "--margin",
            str(margin),
            "--poll",
            "0.2",
        ],
        env=slurm.env,
        capture_output=True,
        text=True,
        timeout=grace + 30,
        check=False,
    )
    return proc.returncode, time.monotonic() - began, proc.stderr


def test_idle_node_is_drained_then_down_with_slonkds_reason(slurm: SlurmCluster) -> None:
    """No jobs: prestop drains and downs the node at once, under slonkd:pod-terminating."""
    rc, took, _ = _prestop(slurm, "n1", grace=10)
    assert rc == 0
    assert took < 5
    node = slurm.run("scontrol", "-o", "show", "node", "n1").stdout
    assert "State=DOWN" in node
    assert "Reason=slonkd:pod-terminating" in node


def test_operator_drained_node_is_left_alone(slurm: SlurmCluster) -> None:
    """An operator's drain keeps its reason and user; prestop neither re-drains nor downs it."""
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", "reason=bad DIMM, ticket 42")
    rc, _, log = _prestop(slurm, "n2", grace=10)
    assert rc == 0
    node = slurm.run("scontrol", "-o", "show", "node", "n2").stdout
    assert "Reason=bad DIMM, ticket 42 [root@" in node
    assert "State=IDLE+DRAIN" in node
    assert "prestop.left_alone" in log


def test_a_job_that_finishes_in_time_is_not_requeued(slurm: SlurmCluster) -> None:
    """A job ending within the grace period finishes normally; then the node goes DOWN."""
    job = slurm.run(
        "sbatch", "--parsable", "-w", "n3", "-o", "/dev/null", "--wrap", "sleep 2"
    ).stdout.strip()
    wait_for(
        "job running",
        lambda: "RUNNING" in slurm.run("squeue", "-h", "-j", job, "-o", "%T").stdout,
        timeout_s=30,
    )
    rc, took, log = _prestop(slurm, "n3", grace=20)
    assert rc == 0
    assert took < 15
    assert "slurm.jobs_requeued" not in log
    assert "State=DOWN" in slurm.run("scontrol", "-o", "show", "node", "n3").stdout


def test_prestop_exits_in_time_when_slurmctld_is_down(slurm: SlurmCluster) -> None:
    """With slurmctld gone, prestop still exits 0 within the grace and logs what failed."""
    slurm.kill_slurmctld()
    rc, took, log = _prestop(slurm, "n4", grace=6)
    assert rc == 0
    assert took < 6
    assert "prestop.step_failed" in log


def test_the_grace_counts_from_the_hooks_start_not_from_pythons_imports(
    slurm: SlurmCluster,
) -> None:
    """A slow start (a loaded node: interpreter and imports) is taken off the grace.

    The kubelet counts the grace from the hook's exec. Here the hook's process spends 2 s
    before Python even starts (``sh`` sleeps, then execs it: the same process): with
    slurmctld gone every step waits its timeout, and prestop must still exit within the
    grace counted from the exec, not from when its clock was first read.
    """
    slurm.kill_slurmctld()
    argv = [sys.executable, "-m", "slonkd.cli.main", "prestop", "--node", "n4",
            "--grace", "6", "--margin", "2", "--poll", "0.2"]  # fmt: skip
    began = time.monotonic()
    proc = subprocess.run(
        ["sh", "-c", 'sleep 2; exec "$@"', "prestop", *argv],
        env=slurm.env,
        capture_output=True,
        text=True,
        timeout=40,
        check=False,
    )
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert took < 6, f"took {took:.2f} s of a 6 s grace"


def test_a_report_nobody_takes_neither_delays_nor_stops_the_requeue_and_down(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """No agent answers the report: signal, requeue and DOWN happen in time all the same.

    Nothing listens on the report URL: the trapping job is still signalled, requeued and the
    node set DOWN within the grace; the failed report is only logged.
    """
    tmp_path.chmod(0o777)  # slurmd writes the job's files here
    marker = tmp_path / "checkpointed"
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"trap 'echo checkpoint >> {marker}' USR1\n"
        f"touch {tmp_path}/started\n"
        "while true; do sleep 0.1 & wait $!; done\n"
    )
    script.chmod(0o755)
    job = slurm.run(
        "sbatch", "--parsable", "--requeue", "-w", "n3", "-o", "/dev/null", str(script)
    ).stdout.strip()
    wait_for("trap installed", lambda: (tmp_path / "started").exists(), timeout_s=30)
    (closed,) = free_ports(1)
    pid = slurm.slurmd_host_pid("n3")
    assert pid is not None
    argv = [
        "nsenter", f"--target={pid}", "--pid", "--mount", "--",
        sys.executable, "-m", "slonkd.cli.main", "prestop", "--node", "n3",
        "--grace", "8", "--margin", "3", "--poll", "0.2",
        "--checkpoint-signal", "B:USR1", "--checkpoint-window", "2",
        "--report-url", report_url(closed),
    ]  # fmt: skip
    began = time.monotonic()
    proc = subprocess.run(
        argv, env=slurm.env, capture_output=True, text=True, timeout=40, check=False
    )
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert took < 8, took
    assert marker.exists()  # signalled: it wrote its checkpoint
    shown = slurm.run("scontrol", "-o", "show", "job", job).stdout
    assert "Restarts=1" in shown, shown
    node = slurm.run("scontrol", "-o", "show", "node", "n3").stdout
    assert "State=DOWN" in node, node
    assert "prestop.report_failed" in proc.stdout + proc.stderr
    slurm.run("scancel", job)

"""slonkd prestop against the real SLURM alone: foreign drains, finished jobs, dead slurmctld."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from slonkd.testing.procs import wait_for
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

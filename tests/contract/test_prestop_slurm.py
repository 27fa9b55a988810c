"""slonkd prestop against the real SLURM alone: foreign drains, finished jobs, dead slurmctld.

And the checkpoint signal, on SLURM 22.05 and 24.11 (``cluster_factory`` of
:mod:`tests.contract.conftest`): an agent that does not take the signal-to-requeue report,
and a job that cannot be requeued, which is neither signalled nor killed. The hook runs in the
node's slurmd PID and mount namespaces, as in a slurmd pod; for 24.11 it calls the root's
clients (:meth:`~slonkd_sandbox.slurm.chroot.ChrootSlurmCluster.client_shims`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import slonkd
from slonkd.runtime.agent.requeue_report import report_url
from slonkd_sandbox.procs import free_ports, wait_for
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster
from slonkd_sandbox.slurm.control import slurmd_host_pid
from tests.contract.conftest import conf_arg

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


@pytest.mark.alone  # a bound in seconds, kept beside parallel workers
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


@pytest.mark.alone  # a bound in seconds: the 4-worker phase on a busy machine broke it
def test_prestop_exits_in_time_when_slurmctld_is_down(slurm: SlurmCluster) -> None:
    """With slurmctld gone, prestop still exits 0 within the grace and logs what failed."""
    slurm.kill_slurmctld()
    rc, took, log = _prestop(slurm, "n4", grace=6)
    assert rc == 0
    assert took < 6
    assert "prestop.step_failed" in log


@pytest.mark.alone  # a bound in seconds, kept beside parallel workers
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


def _job_dir(cluster: SlurmCluster) -> tuple[Path, Callable[[Path], str]]:
    """A directory the cluster's jobs may write, and how a job names a path in it."""
    work = cluster.root / "jobs"
    work.mkdir()
    work.chmod(0o777)  # slurmd writes the job's files here
    if isinstance(cluster, ChrootSlurmCluster):
        return work, cluster.inner
    return work, str


def _trapping_script(work: Path, inner: Callable[[Path], str], name: str) -> Path:
    """A batch script that appends to ``<name>.checkpointed`` on USR1 and runs until ended."""
    script = work / f"{name}.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"trap 'echo checkpoint >> {inner(work / name)}.checkpointed' USR1\n"
        f"touch {inner(work / name)}.started\n"
        "while true; do sleep 0.1 & wait $!; done\n"
    )
    script.chmod(0o755)
    return script


def _hook_in_container(
    cluster: SlurmCluster, node: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """``slonkd prestop --node NODE ARGS`` in the node's slurmd namespaces, as the kubelet runs it.

    This tree's slonkd (``PYTHONPATH``), with the cluster's own clients: 22.05 through
    ``SLURM_CONF``, 24.11 through shims that run the root's clients.
    """
    pid = slurmd_host_pid(conf_arg(cluster), node)
    assert pid is not None, f"no slurmd of {node} found"
    tree = str(Path(slonkd.__file__).resolve().parents[1])
    env = {**cluster.env, "PYTHONPATH": tree}
    if isinstance(cluster, ChrootSlurmCluster):
        shims = cluster.client_shims(cluster.root / "shims")
        env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
    argv = [
        "nsenter", f"--target={pid}", "--pid", "--mount", "--",
        sys.executable, "-m", "slonkd.cli.main", "prestop", "--node", node, *args,
    ]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=40, check=False)


def _state(cluster: SlurmCluster, job: str) -> str:
    out = cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
    return out or "GONE"


@pytest.mark.alone  # a bound in seconds: the 4-worker phase on a busy machine broke it
def test_a_report_nobody_takes_neither_delays_nor_stops_the_requeue_and_down(
    cluster_factory: Callable[..., SlurmCluster],
) -> None:
    """No agent answers the report: signal, requeue and DOWN happen in time all the same.

    Nothing listens on the report URL: the trapping job is still signalled, requeued and the
    node set DOWN within the grace; the failed report is only logged.
    """
    cluster = cluster_factory()
    work, inner = _job_dir(cluster)
    script = _trapping_script(work, inner, "train")
    job = cluster.run(
        "sbatch", "--parsable", "--requeue", "-w", "n3", "-o", "/dev/null", inner(script)
    ).stdout.strip()
    wait_for("trap installed", (work / "train.started").exists, timeout_s=30)
    (closed,) = free_ports(1)
    began = time.monotonic()
    proc = _hook_in_container(
        cluster, "n3", "--grace", "8", "--margin", "3", "--poll", "0.2",
        "--checkpoint-signal", "B:USR1", "--checkpoint-window", "2",
        "--report-url", report_url(closed),
    )  # fmt: skip
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert took < 8, took
    assert (work / "train.checkpointed").exists(), proc.stderr[-2000:]  # signalled
    shown = cluster.run("scontrol", "-o", "show", "job", job).stdout
    assert "Restarts=1" in shown, shown
    node = cluster.run("scontrol", "-o", "show", "node", "n3").stdout
    assert "State=DOWN" in node, node
    assert "prestop.report_failed" in proc.stdout + proc.stderr
    cluster.run("scancel", job)


def test_a_job_that_cannot_be_requeued_is_neither_signalled_nor_killed(
    cluster_factory: Callable[..., SlurmCluster],
) -> None:
    """With a checkpoint signal on, a ``--no-requeue`` job is not signalled and keeps running.

    Two jobs on one node, both trapping USR1: the requeueable one gets the signal and is
    requeued; the ``--no-requeue`` one never gets it (a checkpoint it cannot resume from would
    only disturb it), still runs after the hook, and the hook reports it
    (``prestop.jobs_not_requeueable``) and leaves the node drained, not DOWN.
    """
    cluster = cluster_factory()
    work, inner = _job_dir(cluster)
    sbatch = ("sbatch", "--parsable", "-w", "n2", "-n", "1", "-o", "/dev/null")
    keep = cluster.run(*sbatch, "--no-requeue", inner(_trapping_script(work, inner, "keep")))
    move = cluster.run(*sbatch, "--requeue", inner(_trapping_script(work, inner, "move")))
    kept, moved = keep.stdout.strip(), move.stdout.strip()
    for name in ("keep", "move"):
        wait_for(f"{name}'s trap installed", (work / f"{name}.started").exists, timeout_s=30)
    # no timing asserted: a grace that leaves the signal room on a loaded machine (one drain
    # took 8.2 s of an 8 s grace while a soak benchmark ran, and nothing was signalled)
    proc = _hook_in_container(
        cluster, "n2", "--grace", "20", "--margin", "3", "--poll", "0.2",
        "--checkpoint-signal", "B:USR1", "--checkpoint-window", "4",
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-2000:]
    assert (work / "move.checkpointed").exists(), log[-2000:]  # the signal was on, and sent
    assert not (work / "keep.checkpointed").exists(), f"job {kept} was signalled:\n{log[-2000:]}"
    assert "prestop.jobs_not_requeueable" in log, log[-2000:]
    assert kept in log.split("prestop.jobs_not_requeueable", 1)[1].splitlines()[0]
    time.sleep(2)  # a signal that killed it would have ended it by now
    assert _state(cluster, kept) == "RUNNING"
    assert "Restarts=0" in cluster.run("scontrol", "-o", "show", "job", kept).stdout
    assert "Restarts=1" in cluster.run("scontrol", "-o", "show", "job", moved).stdout
    node = cluster.run("scontrol", "-o", "show", "node", "n2").stdout
    assert "DOWN" not in node.split("State=", 1)[1].split()[0], node
    assert "DRAIN" in node, node
    cluster.run("scancel", kept, moved)

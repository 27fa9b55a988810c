"""Checkpoint signal to requeue, measured on real SLURM through ``slonkd prestop`` (for bench/jobs).

One real slurmctld and slurmd (SLURM 22.05 of the host, :class:`SlurmCluster`). Each round
submits a requeueable batch job whose shell traps USR1 and writes a checkpoint, waits until
it runs and its trap is installed, then runs the preStop hook as the kubelet stand-in does
("in the container": slurmd's PID and mount namespaces) with ``--checkpoint-signal B:USR1``
and the window asked for. The hook's own ``slurm.jobs_requeued`` line gives the time from
the signal to the requeue (what the agent's histogram gets); the round counts only when the
job's checkpoint line was written and SLURM shows the job requeued. The job is then
cancelled and the node resumed for the next round.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout

NODE = "b-0"
JOB = """#!/bin/bash
dir={dir}
step=0
trap 'echo "checkpoint $step" >> "$dir/log"' USR1
echo "start" >> "$dir/log"
while true; do step=$((step + 1)); sleep 0.1 & wait $!; done
"""


def _wait(what: str, check: Any, timeout_s: float) -> None:
    until = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > until:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _round(
    cluster: SlurmCluster, work: Path, *, grace_s: float, margin_s: float, window_s: float
) -> float | None:
    """One deletion's signal-to-requeue seconds, None when the round did not count."""
    work.mkdir()
    work.chmod(0o777)
    script = work / "job.sh"
    script.write_text(JOB.format(dir=work))
    script.chmod(0o755)
    job = cluster.run(
        "sbatch", "--parsable", "--requeue", "-w", NODE, "-o", "/dev/null", str(script)
    ).stdout.strip()
    try:
        _wait("job running", lambda: cluster.job_state(job)[0] == "RUNNING", 30)
        _wait("trap installed", lambda: (work / "log").exists(), 15)
        pid = cluster.slurmd_host_pid(NODE)
        argv = [
            sys.executable, "-m", "slonkd.cli.main", "prestop", "--node", NODE,
            "--grace", str(grace_s), "--margin", str(margin_s), "--poll", "0.5",
            "--checkpoint-signal", "B:USR1", "--checkpoint-window", str(window_s),
        ]  # fmt: skip
        if pid is not None:
            argv = ["nsenter", f"--target={pid}", "--pid", "--mount", "--", *argv]
        hook = subprocess.run(
            argv,
            env={**cluster.env, "SLURM_CONF": str(cluster.conf)},
            capture_output=True,
            text=True,
            timeout=grace_s + 15,
            check=False,
        )
        took = None
        for line in (hook.stdout + hook.stderr).splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "slurm.jobs_requeued":
                took = event.get("signal_to_requeue_s")
        state, restarts = cluster.job_state(job)
        checkpointed = "checkpoint" in (work / "log").read_text()
        if took is None or restarts < 1 or not checkpointed:
            print(f"round not counted: {state=} {restarts=} {checkpointed=} {took=}")
            return None
        return float(took)
    finally:
        cluster.run("scancel", job, check=False)
        cluster.run("scontrol", "update", f"nodename={NODE}", "state=resume", check=False)
        cluster.wait_idle([NODE], timeout_s=60)


def measure(
    deletions: int, *, grace_s: float = 8.0, margin_s: float = 3.0, window_s: float = 3.0
) -> list[float]:
    """``deletions`` rounds on a fresh cluster: the signal-to-requeue seconds that counted."""
    if deletions <= 0:
        return []
    root = Path(tempfile.mkdtemp(prefix="slonkd-bench-ckpt-", dir="/tmp"))
    took: list[float] = []
    with SlurmCluster(root, SlurmLayout(nodes=(NODE,))) as cluster:
        cluster.wait_idle([NODE], timeout_s=60)
        for i in range(deletions):
            one = _round(
                cluster, root / f"round-{i}", grace_s=grace_s, margin_s=margin_s, window_s=window_s
            )
            if one is not None:
                took.append(one)
    return took

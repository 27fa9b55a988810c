"""Checkpoint signals against a real slurmd: the batch shell is found, and only a handler gets one.

``scontrol listpids`` and the port's ``signal_batch`` (the scontrol backend: ``scancel --batch
--signal``) of SLURM 22.05 and 24.11 (the ``cluster_factory`` fixture of
:mod:`tests.contract.conftest`). The harness runs each slurmd in
a PID namespace of its own (as a container would); the signaller reads the job's ``/proc``
through that namespace's root, as the preStop hook inside the container reads its own. A
24.11 job runs in the cluster's root: its files live there, named by their inner paths.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from slonkd.adapters.slurm.job_signal import JobSignaller, SignalOutcome
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.checkpoint import SignalSpec
from slonkd.core.slurm_job import JobId
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from slonkd_sandbox.slurm.control import slurmd_host_pid
from tests.contract.conftest import conf_arg, settings_for

pytestmark = pytest.mark.slurm

USR1 = SignalSpec.parse("B:USR1")


def _namespace_proc(cluster: SlurmCluster, node: str) -> Path:
    """``/proc`` as the node's slurmd (and its jobs) see it, through its mount namespace."""
    pid = slurmd_host_pid(conf_arg(cluster), node)
    assert pid is not None, f"no slurmd of {node} found"
    return Path("/proc") / str(pid) / "root" / "proc"


def _state(cluster: SlurmCluster, job: str) -> str:
    out = cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
    return out or "GONE"


def _job_dir(cluster: SlurmCluster) -> tuple[Path, Callable[[Path], str]]:
    """A directory the cluster's jobs may write, and how a job names a path in it."""
    work = cluster.root / "jobs"
    work.mkdir()
    os.chmod(work, 0o777)  # noqa: S103 - slurmd writes the job's output here
    if isinstance(cluster, ChrootSlurmCluster):
        return work, cluster.inner
    return work, str


def _submit(cluster: SlurmCluster, *args: str) -> str:
    out = cluster.run("sbatch", "--parsable", "--requeue", "-w", "n1", *args).stdout
    return out.strip().split(";")[0]


async def test_a_trapping_shell_gets_the_signal_and_a_plain_one_is_left_alone(
    cluster_factory: Callable[..., SlurmCluster],
) -> None:
    """A job that traps USR1 is signalled and keeps running; one that does not is not signalled.

    The last step shows why the rule exists: the same USR1 sent to the plain job's shell by
    hand ends the job. Without the SigCgt check slonkd would have killed it.
    """
    cluster = cluster_factory(SlurmLayout(nodes=("n1",)))
    work, inner = _job_dir(cluster)
    marker = work / "checkpointed"
    script = work / "train.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"trap 'echo checkpoint >> {inner(marker)}' USR1\n"
        "while true; do sleep 1 & wait $!; done\n"
    )
    script.chmod(0o755)
    trapping = _submit(cluster, "-o", inner(work / "t.out"), inner(script))
    plain = _submit(cluster, "-o", inner(work / "p.out"), "--wrap", "sleep 300")
    deadline = time.monotonic() + 30
    while {_state(cluster, trapping), _state(cluster, plain)} != {"RUNNING"}:
        assert time.monotonic() < deadline, "jobs did not start"
        await asyncio.sleep(0.5)
    await asyncio.sleep(1)  # the shell has installed its trap
    backend = ScontrolBackend(settings_for(cluster, timeout_s=20.0))
    signaller = JobSignaller(
        runner=backend.runner, slurm=backend, node="n1", proc=_namespace_proc(cluster, "n1")
    )

    assert await signaller.signal(JobId(int(trapping)), USR1) is SignalOutcome.SENT
    deadline = time.monotonic() + 15
    while not marker.exists():
        assert time.monotonic() < deadline, "the trap never ran"
        await asyncio.sleep(0.2)
    assert await signaller.signal(JobId(int(plain)), USR1) is SignalOutcome.NOT_CAUGHT
    await asyncio.sleep(2)
    assert _state(cluster, trapping) == "RUNNING"
    assert _state(cluster, plain) == "RUNNING"

    cluster.run("scancel", "--batch", "--signal=USR1", plain)  # what the rule prevents
    deadline = time.monotonic() + 15
    while _state(cluster, plain) == "RUNNING":
        assert time.monotonic() < deadline, "USR1 did not end the plain job"
        await asyncio.sleep(0.5)

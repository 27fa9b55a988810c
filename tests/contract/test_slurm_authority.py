"""What a job step can and cannot do to SLURM, against real SLURM 22.05 and 24.11 (issue 16 item 1).

The agent needs SLURM admin rights (SLURM has no per-node authorisation: draining its own node
takes the same right as draining any node), so the boundary that keeps a job from that power
is the uid: a job runs as its user, munge vouches for that uid only, and slurmctld refuses
node updates, other users' cancels and requeues from it. These tests run the clients as an
unprivileged uid (``nobody``, a researcher's stand-in), directly and from inside a batch job,
and the same commands as SlurmUser (the agent's identity) to show the boundary is where the
test looks: the privileged run changes the node, the unprivileged ones change nothing.
See docs/threat-model.md.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

import pytest

from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster

pytestmark = pytest.mark.slurm

JOB_TMP = "/tmp"  # noqa: S108 - the world-writable /tmp a job of nobody writes its output to
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


@pytest.fixture
def cluster(cluster: SlurmCluster) -> SlurmCluster:
    """The cluster, its slurm.conf and munge socket reachable by any uid, as on a real host.

    The harness keeps its directories private (0700); a login node's users can read
    slurm.conf and talk to munged. Only search (x) and read of slurm.conf are opened.
    """
    stop = {Path("/"), Path(tempfile.gettempdir())}
    if isinstance(cluster, ChrootSlurmCluster):
        stop.add(cluster.fsroot)
    for d in (cluster.root, *cluster.root.parents):
        if d in stop:
            break
        d.chmod(d.stat().st_mode | 0o001)
    for d in (cluster.conf.parent, cluster.root / "munge"):
        d.chmod(d.stat().st_mode | 0o005)
    for f in cluster.conf.parent.iterdir():
        f.chmod(f.stat().st_mode | 0o004)
    return cluster


def _as_nobody(cluster: SlurmCluster, *argv: str) -> tuple[int, str]:
    proc = cluster.run(*NOBODY, *argv, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _refused(out: str) -> bool:
    """SLURM's answers to a uid without the right: ESLURM_USER_ID, ESLURM_ACCESS_DENIED."""
    return any(t in out.lower() for t in ("invalid user id", "access/permission denied"))


def _reason(cluster: SlurmCluster, node: str) -> str:
    out = cluster.run("scontrol", "show", "node", node).stdout
    return out.split("Reason=", 1)[1].split("\n", 1)[0] if "Reason=" in out else ""


def _host_tmp(cluster: SlurmCluster) -> Path:
    """Where the cluster's ``/tmp`` is seen from the test."""
    inside = Path(JOB_TMP)
    if isinstance(cluster, ChrootSlurmCluster):
        return cluster.fsroot / inside.relative_to("/")
    return inside


def test_an_unprivileged_user_cannot_drain_cancel_or_requeue(cluster: SlurmCluster) -> None:
    """As ``nobody``: drain, resume, DOWN, scancel and requeue of root's job are all refused.

    The same drain as SlurmUser (root in this harness; the agent's uid in the chart) works,
    so the refusal comes from the identity, not from a bad command.
    """
    job = cluster.run(
        "sbatch", "--parsable", "--requeue", "-w", "n2", "-o", "/dev/null", "--wrap", "sleep 120"
    ).stdout.strip()
    wait_for(
        "root's job running",
        lambda: cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING",
        timeout_s=30,
    )
    for argv in (
        ("scontrol", "update", "nodename=n1", "state=drain", "reason=job-says-so"),
        ("scontrol", "update", "nodename=n1", "state=down", "reason=job-says-so"),
        ("scontrol", "update", "nodename=n2", "state=resume"),
        ("scontrol", "requeue", job),
        ("scancel", job),
    ):
        rc, out = _as_nobody(cluster, *argv)
        assert rc != 0, f"{argv} as nobody succeeded: {out}"
        assert _refused(out), out
    assert _reason(cluster, "n1") == ""
    assert cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING"
    cluster.run("scontrol", "update", "nodename=n1", "state=drain", "reason=slurmuser-can")
    assert _reason(cluster, "n1").startswith("slurmuser-can")  # the privileged uid can
    cluster.run("scontrol", "update", "nodename=n1", "state=resume")
    cluster.run("scancel", job)


def test_a_job_step_cannot_drain_its_node(cluster: SlurmCluster) -> None:
    """A batch job of ``nobody`` runs ``scontrol update`` on its own node: refused, node unchanged.

    Its output proves the step ran (it prints its uid) and what SLURM answered it.
    """
    name = f"authority-{uuid.uuid4().hex[:8]}.out"
    script = (
        "id -u; scontrol update nodename=$SLURMD_NODENAME state=drain reason=from-a-job; echo rc=$?"
    )
    job = cluster.run(
        *NOBODY, "sbatch", "--parsable", "-w", "n3", f"--chdir={JOB_TMP}",
        "-o", f"{JOB_TMP}/{name}", "--wrap", script,
    ).stdout.strip()  # fmt: skip
    out = _host_tmp(cluster) / name
    try:
        wait_for(
            "the job's output",
            lambda: out.exists() and "rc=" in out.read_text(),
            timeout_s=60,
        )
        time.sleep(0.5)  # the step's stderr lands in the same file
        text = out.read_text()
        assert text.splitlines()[0] == "65534", text
        assert "rc=0" not in text, text
        assert _refused(text), text
        assert _reason(cluster, "n3") == ""
        assert job
    finally:
        out.unlink(missing_ok=True)

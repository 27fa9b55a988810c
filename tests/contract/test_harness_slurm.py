"""The SLURM harness is real: node updates round-trip, jobs run, nothing outlives it."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from slonkd_sandbox import procs
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import PortTakenError, SlurmCluster, SlurmLayout

pytestmark = pytest.mark.slurm


def test_drain_round_trips_through_show_node_and_sinfo_json(slurm: SlurmCluster) -> None:
    """A drain with a reason shows in ``scontrol -o show node`` and in ``sinfo --json``."""
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", "reason=slonkd:test round trip")
    text = slurm.run("scontrol", "-o", "show", "node", "n2").stdout
    assert "State=IDLE+DRAIN " in text
    assert "Reason=slonkd:test round trip [root@" in text
    nodes = json.loads(slurm.run("sinfo", "--json").stdout)["nodes"]
    (n2,) = [n for n in nodes if n["name"] == "n2"]
    assert n2["state"] == "idle"
    assert "DRAIN" in n2["state_flags"]
    assert n2["reason"] == "slonkd:test round trip"
    others = [n for n in nodes if n["name"] != "n2"]
    assert all("DRAIN" not in n["state_flags"] for n in others)
    slurm.run("scontrol", "update", "nodename=n2", "state=resume")
    wait_for("n2 idle again", lambda: slurm.node_states()["n2"] == "idle", timeout_s=30)


def test_sbatch_job_runs_on_a_slurmd(slurm: SlurmCluster, tmp_path: Path) -> None:
    """A batch job submitted with sbatch runs on one of the cluster's slurmd and completes."""
    out = tmp_path / "job.out"
    submitted = slurm.run(
        "sbatch", "--parsable", "-o", str(out), "--wrap", "echo ran on $SLURMD_NODENAME"
    )
    job_id = submitted.stdout.strip().split(";")[0]
    wait_for("job output", lambda: out.exists() and "ran on n" in out.read_text(), timeout_s=60)
    wait_for(
        "job gone from squeue",
        lambda: job_id not in slurm.run("squeue", "-h", "-o", "%i").stdout,
        timeout_s=30,
    )
    assert out.read_text().strip() in {f"ran on n{i}" for i in range(1, 5)}


def test_declared_nodes_without_slurmd_accept_updates(
    slurm_factory: Callable[..., SlurmCluster],
) -> None:
    """Scale layouts declare nodes with no slurmd; they stay unknown but take scontrol updates."""
    cluster = slurm_factory(SlurmLayout(nodes=("n1",), extra_nodes=500))
    states = cluster.node_states()
    assert len(states) == 501
    assert states["x500"].startswith("unknown")
    cluster.run("scontrol", "update", "nodename=x[10-20]", "state=drain", "reason=scale")
    assert cluster.node_states()["x15"].startswith("drain")


def test_stopping_a_slurmd_kills_its_job_steps(slurm_factory: Callable[..., SlurmCluster]) -> None:
    """Stopping a node's slurmd (as a kubelet stops a container) takes its jobs' processes too."""
    cluster = slurm_factory(SlurmLayout(nodes=("n1",)))
    cluster.run("sbatch", "-o", "/dev/null", "--wrap", "sleep 4141")
    wait_for("job step running", lambda: bool(_procs_matching("sleep 4141")), timeout_s=30)
    assert cluster.stop_slurmd("n1", grace_s=3) in {"terminated", "killed"}
    wait_for("job step gone", lambda: not _procs_matching("sleep 4141"), timeout_s=10)
    assert not cluster.slurmd_running("n1")
    cluster.start_slurmd("n1")
    assert cluster.slurmd_running("n1")


def test_slurmctld_restart_keeps_drain_state(slurm: SlurmCluster) -> None:
    """slurmctld stopped and started again keeps drains (state lives in StateSaveLocation)."""
    slurm.run("scontrol", "update", "nodename=n3", "state=drain", "reason=kept")
    slurm.stop_slurmctld()
    assert slurm.run("scontrol", "ping", check=False).returncode != 0
    slurm.start_slurmctld()
    wait_for(
        "n3 drained after restart", lambda: slurm.node_states().get("n3") == "drained", timeout_s=30
    )


def _procs_matching(text: str) -> list[str]:
    out = subprocess.run(
        ["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if line.strip() == text]


def test_stopping_the_cluster_leaves_no_process(slurm_factory: Callable[..., SlurmCluster]) -> None:
    """stop() ends munged, slurmctld, every slurmd and every job step: nothing is left."""
    cluster = slurm_factory()
    cluster.run("sbatch", "-o", "/dev/null", "--wrap", "sleep 4242")
    wait_for("job step running", lambda: bool(_procs_matching("sleep 4242")), timeout_s=30)
    root = str(cluster.root)
    out = subprocess.run(
        ["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True
    ).stdout
    assert sum(root in line for line in out.splitlines()) >= 6  # munged, ctld, 4 slurmd
    began = time.monotonic()
    cluster.stop()
    took = time.monotonic() - began
    out = subprocess.run(
        ["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True
    ).stdout
    assert [line for line in out.splitlines() if root in line] == []
    assert not _procs_matching("sleep 4242")
    assert took < 10


def test_a_job_sees_its_own_slurmd_pid_namespace_in_proc(
    cluster_factory: Callable[..., SlurmCluster],
) -> None:
    """A job's /proc is its slurmd's PID namespace, on 22.05 and 24.11 alike.

    Each slurmd runs in a PID namespace of its own, as in a container; slurmstepd's process
    tracking (proctrack/linuxproc) walks /proc from its own pid to find the step's processes
    and SIGKILLs them before it reports a batch job complete. With another namespace's /proc
    it signals numbers that, in its own namespace, belong to other processes.
    """
    cluster = cluster_factory(SlurmLayout(nodes=("n1",)))
    out = cluster.root / "pids.out"
    path = cluster.inner(out) if isinstance(cluster, ChrootSlurmCluster) else str(out)
    script = 'read -r own rest < /proc/self/stat; echo "$$ $own"'
    cluster.run("sbatch", "-o", path, "--wrap", script)
    wait_for("job output", lambda: out.exists() and bool(out.read_text().strip()), timeout_s=60)
    shell_pid, proc_pid = out.read_text().split()
    assert proc_pid == shell_pid, f"/proc/self says {proc_pid}, the shell is {shell_pid}"


def test_a_taken_slurmctld_port_is_chosen_again_or_named_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurmctld finding its port bound by another process fails fast, not after 60 s.

    A port probed free is bound by slurmctld only later, and another process can take it in
    between; slurmctld then exits ("fatal: ... Address already in use") while its supervisor
    lives, and the harness waited the whole 60 s for a bare "not ready" (measured with a
    port held by a listener: "slurmctld: not ready after 15 s" at 20 s with a 15 s bound).
    Ports the harness chose are chosen again; a port the caller set is named in the error.
    """
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    real_free_ports = procs.free_ports
    offered: list[int] = []

    def first_the_taken_one(count: int) -> list[int]:
        ports = [port] if not offered and count == 1 else real_free_ports(count)
        offered.extend(ports)
        return ports

    monkeypatch.setattr(procs, "free_ports", first_the_taken_one)
    with taken:
        cluster = SlurmCluster(tmp_path / "chosen", SlurmLayout(nodes=("n1",)))
        try:
            cluster.start()
            assert offered[0] == port
            assert cluster.ctld_port not in {0, port}
            assert cluster.node_states() == {"n1": "idle"}
        finally:
            cluster.stop()
        fixed = SlurmCluster(tmp_path / "fixed", SlurmLayout(nodes=("n1",)), ctld_port=port)
        began = time.monotonic()
        try:
            with pytest.raises(PortTakenError, match=f"port {port}: .*Address already in use"):
                fixed.start()
        finally:
            fixed.stop()
        assert time.monotonic() - began < 20

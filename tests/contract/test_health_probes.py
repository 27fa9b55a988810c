"""Health probe runners for real on this machine: deadlines, hung mounts, slurmd, ping, kmsg."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from slonkd.adapters.health import probes
from slonkd.adapters.health.checks import build_checks
from slonkd.adapters.health.settings import HealthSettings
from slonkd.core.health import Verdict
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.cli import slonkd


@pytest.mark.alone  # a bound in seconds, kept beside parallel workers
async def test_a_late_command_is_killed_and_reported() -> None:
    """A probe past its deadline comes back timed out at once and its process is gone."""
    guard = probes.ProbeGuard()
    began = time.monotonic()
    out = await probes.run_command("sleepy", ["sleep", "31337"], timeout_s=0.3, guard=guard)
    assert out.timed_out
    assert time.monotonic() - began < 2
    ps = subprocess.run(  # noqa: ASYNC221 - a quick look at the process table
        ["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True
    ).stdout
    assert "sleep 31337" not in ps
    assert guard.stuck_total == 0


async def test_a_missing_tool_is_missing_not_ok() -> None:
    """A tool that is not installed is reported as missing."""
    out = await probes.run_command(
        "x", ["nvidia-smi-does-not-exist"], timeout_s=1, guard=probes.ProbeGuard()
    )
    assert out.missing
    assert out.rc is None


async def test_a_stuck_probe_is_never_started_again_on_top_of_itself() -> None:
    """While an earlier child of a probe is alive, the probe is not run again."""
    guard = probes.ProbeGuard()
    survivor = await asyncio.create_subprocess_exec("sleep", "31338")
    guard.running["nvidia-smi"] = survivor  # stands in for a child stuck in D state
    try:
        out = await probes.run_command("nvidia-smi", ["true"], timeout_s=1, guard=guard)
        assert out.stuck
        assert out.timed_out
        assert guard.stuck_now == ["nvidia-smi"]
    finally:
        survivor.kill()
        await survivor.wait()
    assert guard.stuck_now == []
    assert (await probes.run_command("nvidia-smi", ["true"], timeout_s=1, guard=guard)).rc == 0


@pytest.mark.alone  # a bound in seconds, kept beside parallel workers
async def test_a_hung_mount_gives_unknown_within_its_deadline(tmp_path: Path) -> None:
    """A mount whose read blocks answers unknown, timed out, within its deadline.

    A FIFO without a writer blocks the probe's read like a hung NFS server would.
    """
    fifo = tmp_path / "hung"
    os.mkfifo(fifo)
    settings = HealthSettings(disk_paths=(), mounts=(str(fifo),), mount_timeout_s=0.5)
    (check,) = build_checks(settings, probes.ProbeGuard())
    began = time.monotonic()
    result = await check.run()
    took = time.monotonic() - began
    assert (result.verdict, result.cause, result.timed_out) == (Verdict.UNKNOWN, "nfs-hung", True)
    assert took < 2.0


async def test_a_responsive_mount_and_a_plain_directory(tmp_path: Path) -> None:
    """/proc is a responsive mount point; a plain directory answers but is not a mount."""
    guard = probes.ProbeGuard()
    proc = await probes.probe_path("/proc", timeout_s=5, guard=guard)
    assert (proc.responded, proc.is_mount) == (True, True)
    plain = await probes.probe_path(str(tmp_path), timeout_s=5, guard=guard)
    assert (plain.responded, plain.is_mount) == (True, False)
    gone = await probes.probe_path(str(tmp_path / "nope"), timeout_s=5, guard=guard)
    assert gone.responded
    assert "No such file" in gone.error


@pytest.mark.slurm
async def test_slurmd_alive_then_dead(slurm: SlurmCluster) -> None:
    """The slurmd check passes against a running slurmd and fails once it is stopped."""
    port = slurm.slurmd_port  # n1's port
    (check,) = build_checks(HealthSettings(disk_paths=(), slurmd_port=port), probes.ProbeGuard())
    assert (await check.run()).verdict is Verdict.OK
    await asyncio.to_thread(slurm.stop_slurmd, "n1", grace_s=2)
    result = await check.run()
    assert (result.verdict, result.cause) == (Verdict.FAIL, "slurmd-dead")


async def test_ping_loopback_and_refuse_option_injection() -> None:
    """Loopback answers; a peer that looks like an option is refused before anything runs."""
    guard = probes.ProbeGuard()
    assert await probes.ping("127.0.0.1", timeout_s=2, guard=guard)
    with pytest.raises(ValueError, match="host name"):
        await probes.ping("-f", timeout_s=2, guard=guard)


def test_kmsg_reader_reads_new_records_only() -> None:
    """The kernel log reader returns the ring buffer once, then only what is new."""
    reader = probes.KmsgReader()
    try:
        first = reader.read_new()
        assert all(isinstance(r, str) for r in first)
        assert len(reader.read_new()) < max(len(first), 1) or not first
    finally:
        reader.close()


def test_slonkd_check_json_runs_as_a_command(tmp_path: Path) -> None:
    """`slonkd check -o json` prints one JSON document; a fail exits 1, unknown alone exits 0."""
    fifo = tmp_path / "hung"
    os.mkfifo(fifo)
    argv = ("check", "-o", "json", "--disk", "/", "--expected-gpus", "8")
    proc = slonkd(*argv)
    doc = json.loads(proc.stdout)
    verdicts = {r["check"]: r["verdict"] for r in doc["results"]}
    assert verdicts["nvidia-smi"] == "unknown"  # no GPU tool here: unknown, never ok
    assert verdicts["disk:/"] == "ok"
    assert proc.returncode == 0
    proc = slonkd(*argv, "--mount", str(tmp_path), "--prolog")
    assert proc.returncode == 1  # a plain directory is not a mount point: fail

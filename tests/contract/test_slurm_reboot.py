"""A reboot slonkd asks for completes in the harness, as on a real node (issue 15 item 9).

The harness's RebootProgram (what slurmd runs for ``scontrol reboot``) has the supervisor
restart that node's slurmd in a time namespace whose boot time is now, so slurmctld sees the
reboot it asked for complete instead of timing out ("reboot timed out" after ResumeTimeout).
What this shows about SLURM (22.05, the host's release; the 24.11 root's RebootProgram only
logs): with ``scontrol reboot ASAP`` and no ``nextstate``, the rebooted node returns to
service and its reason, slonkd's included, is cleared: the health check on the new boot
decides whether it goes out again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import Cause
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from slonkd_sandbox.slurm.control import control

pytestmark = pytest.mark.slurm

HEALTH = Cause.parse("health:gpu-xid-79")


def _slurmd_pid(cluster: SlurmCluster, node: str) -> int:
    return int(control(cluster.socket_path, {"op": "status"})["running"][f"slurmd-{node}"])


async def test_a_reboot_slonkd_requested_completes_and_returns_the_node(
    slurm_factory: Callable[..., SlurmCluster],
) -> None:
    """slonkd drains n1 and asks a reboot: the program runs once, slurmd comes back, n1 is idle."""
    cluster = slurm_factory(SlurmLayout(nodes=("n1", "n2")))
    backend = ScontrolBackend(SlurmSettings(env={"SLURM_CONF": str(cluster.conf)}, timeout_s=30.0))
    before = _slurmd_pid(cluster, "n1")
    await backend.drain(["n1"], HEALTH, "xid 79")
    result = await backend.request_reboot(["n1"], HEALTH, "by slonkd")
    assert result.changed == ("n1",), result
    begun = time.monotonic()

    def show() -> str:
        return cluster.run("scontrol", "-o", "show", "node", "n1").stdout

    wait_for("n1 rebooted and idle", lambda: "State=IDLE " in show(), timeout_s=45)
    took = time.monotonic() - begun
    assert took < 30, f"the reboot took {took:.0f} s (ResumeTimeout is 60 s)"
    assert _slurmd_pid(cluster, "n1") != before  # its slurmd was restarted
    assert "Reason=" not in show()  # SLURM returned it to service: no reason left
    assert "returned to service" in (cluster.root / "log" / "slurmctld.log").read_text()
    runs = (cluster.root / "log" / "reboot.log").read_text().count("reboot requested")
    assert runs == 1
    assert "State=IDLE " in cluster.run("scontrol", "-o", "show", "node", "n2").stdout


async def test_a_release_while_the_reboot_waits_for_a_job_keeps_the_reboot(
    slurm_factory: Callable[..., SlurmCluster],
) -> None:
    """slonkd's release never cancels a reboot: it happens once the job ends, then n1 is idle.

    n1 runs a job; slonkd drains it and asks a reboot ASAP, which waits for the job. The
    check passes meanwhile and slonkd releases its cause: the release is skipped
    (``reboot-pending``) and the reboot stays requested. (A resume clears SLURM 22.05's
    REBOOT_REQUESTED: the reboot would never happen while the ladder counts it as tried, and
    the next failure would go to manual repair with no reboot done.) When the job ends, the
    RebootProgram runs and SLURM returns n1 to service, slonkd's reason cleared with it.
    """
    cluster = slurm_factory(SlurmLayout(nodes=("n1", "n2")))
    backend = ScontrolBackend(SlurmSettings(env={"SLURM_CONF": str(cluster.conf)}, timeout_s=30.0))
    job = cluster.run(
        "sbatch", "--parsable", "-w", "n1", "-o", "/dev/null", "--wrap", "sleep 8"
    ).stdout.strip()  # fmt: skip

    def show() -> str:
        return cluster.run("scontrol", "-o", "show", "node", "n1").stdout

    def job_state() -> str:
        return cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()

    wait_for("job running", lambda: job_state() == "RUNNING", timeout_s=30)
    await backend.drain(["n1"], HEALTH, "xid 79")
    assert (await backend.request_reboot(["n1"], HEALTH, "by slonkd")).changed == ("n1",)
    assert "REBOOT_REQUESTED" in show()
    released = await backend.resume(["n1"], HEALTH)
    assert released.changed == (), released
    assert [s.why.value for s in released.skipped] == ["reboot-pending"]
    assert "REBOOT_REQUESTED" in show()
    assert job_state() == "RUNNING"  # ASAP: the job is never hit
    log = cluster.root / "log" / "reboot.log"
    wait_for("the reboot ran", lambda: log.exists(), timeout_s=45)
    wait_for("n1 rebooted and idle", lambda: "State=IDLE " in show(), timeout_s=45)
    assert "Reason=" not in show()
    assert log.read_text().count("reboot requested") == 1

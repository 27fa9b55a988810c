"""Controller faults: slurmctld down or killed mid-call gives a transient error, then success."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import pytest

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.errors import TransientError
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import DrainStatus
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.contract.conftest import settings_for, slurmctld_pid

pytestmark = pytest.mark.slurm

POD = Cause.parse("pod-terminating")


async def test_controller_down_is_transient_then_works_after_restart(cluster: SlurmCluster) -> None:
    """With slurmctld stopped, reads and drains raise TransientError; after a start they work.

    Each client call gives up after about MessageTimeout - 1 s (9 s here) by itself.
    """
    backend = ScontrolBackend(settings_for(cluster, attempts=1))
    cluster.stop_slurmctld()
    with pytest.raises(TransientError):
        await backend.read_nodes()
    with pytest.raises(TransientError):
        await backend.drain(["n1"], POD)
    cluster.start_slurmctld()
    result = await backend.drain(["n1"], POD)
    assert result.changed == ("n1",)
    node = await backend.read_node("n1")
    assert node is not None
    assert node.state.drain is DrainStatus.DRAINED


async def test_killed_mid_call_then_retries_succeed(cluster: SlurmCluster) -> None:
    """slurmctld frozen and SIGKILLed while a call waits: TransientError; retries then succeed."""
    quick = ScontrolBackend(settings_for(cluster, attempts=1, timeout_s=2.0))
    pid = slurmctld_pid(cluster)
    os.kill(pid, signal.SIGSTOP)
    try:
        call = asyncio.create_task(quick.drain(["n2"], POD))
        await asyncio.sleep(0.5)
        assert not call.done()  # the call is in flight against a frozen controller
        cluster.kill_slurmctld()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    with pytest.raises(TransientError):
        await call
    patient = ScontrolBackend(
        settings_for(
            cluster, attempts=200, timeout_s=1.0, retry_wait_min_s=0.1, retry_wait_max_s=0.1
        )
    )
    pending = asyncio.create_task(patient.drain(["n2"], POD))
    await asyncio.sleep(2.5)
    assert not pending.done()  # still retrying: the controller is gone
    await asyncio.to_thread(cluster.start_slurmctld)
    result = await asyncio.wait_for(pending, 60)
    assert result.changed == ("n2",)
    assert result.calls > 2  # attempts timed out while the controller was gone
    node = await patient.read_node("n2")
    assert node is not None
    assert node.reason == "slonkd:pod-terminating"


async def test_timeout_kills_the_client_and_is_transient(cluster: SlurmCluster) -> None:
    """A call that outlives its timeout is killed and reported as transient, not hung."""
    backend = ScontrolBackend(settings_for(cluster, attempts=1, timeout_s=1.0))
    pid = slurmctld_pid(cluster)
    os.kill(pid, signal.SIGSTOP)
    try:
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(TransientError, match="timed out"):
            await backend.read_nodes()
        assert loop.time() - began < 5
    finally:
        os.kill(pid, signal.SIGCONT)
    assert len(await backend.read_nodes()) == 4

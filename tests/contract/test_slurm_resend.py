"""A write slurmctld answers late is never sent again blind (issue 37 item 2), on 22.05 and 24.11.

slonkd releases a node it drained. Its resume leaves while slurmctld is stopped (SIGSTOP):
the kernel queues the connection, the client gives up, and slurmctld, continued, applies the
resume late. An operator then drains the node with a reason of their own. The runner used to
send the resume again after its retry wait (3 attempts of 20 s in production, up to a minute
after the compare-and-set read) and cleared that drain. A write whose outcome is unknown is
now raised to the caller, and the next compare-and-set reads the operator's drain and leaves
it. The same race with fake clients, for both write paths:
``tests/unit/test_slurm_write_resend.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from typing import Any

import pytest

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.errors import OutcomeUnknownError
from slonkd.core.reasons import Cause
from slonkd.core.slurm_plan import SkipReason
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.contract.conftest import settings_for, slurmctld_pid

pytestmark = pytest.mark.slurm

POD = Cause.parse("pod-terminating")
TIMEOUT_S = 1.5
"""slonkd's client timeout here (20 s in production)."""
STOPPED_S = 3 * TIMEOUT_S + 0.5
"""How long slurmctld stays stopped once the update left: past every client that could wait
on it (the primed write's timeout and its close, the first argv attempt of the old code)."""
RETRY_WAIT_S = 8.0
"""The runner's wait between attempts (0.5-5 s in production): the operator acts in it."""
OPERATOR_REASON = "operator maintenance ticket 42"


async def _until_idle(cluster: SlurmCluster, node: str, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (state := (await asyncio.to_thread(cluster.node_states)).get(node)) != "idle":
        assert loop.time() < deadline, f"the late resume never landed: {node} is {state}"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("primed", [True, False], ids=["primed", "argv"])
async def test_a_resume_answered_late_does_not_clear_the_operators_drain_made_after_it(
    cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, primed: bool
) -> None:
    """Resume sent, slurmctld stopped, client timed out, continued, operator drains: it stays.

    Through the primed scontrol (the default) and by argv (a new process per write).
    """
    drained = await ScontrolBackend(settings_for(cluster)).drain(["n1"], POD, "pod is terminating")
    assert drained.changed == ("n1",), drained
    pid = slurmctld_pid(cluster)
    stopped = asyncio.Event()
    real_read = ScontrolBackend.read_for_update

    async def read_then_stop(self: ScontrolBackend, names: Sequence[str], **kw: Any) -> Any:
        """The compare-and-set read, then slurmctld stopped: the update leaves into silence."""
        got = await real_read(self, names, **kw)
        if not stopped.is_set():
            os.kill(pid, signal.SIGSTOP)
            stopped.set()
        return got

    monkeypatch.setattr(ScontrolBackend, "read_for_update", read_then_stop)
    slonkd = ScontrolBackend(
        settings_for(
            cluster,
            timeout_s=TIMEOUT_S,
            attempts=3,
            retry_wait_min_s=RETRY_WAIT_S,
            retry_wait_max_s=RETRY_WAIT_S,
            retry_total_s=60.0,
            primed_writes=primed,
        )
    )
    release = asyncio.create_task(slonkd.resume(["n1"], POD))
    try:
        await asyncio.wait_for(stopped.wait(), 30)
        await asyncio.sleep(STOPPED_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    await _until_idle(cluster, "n1", 15)  # applied, answered to nobody
    await asyncio.to_thread(
        cluster.run, "scontrol", "update", "nodename=n1", "state=drain", f"reason={OPERATOR_REASON}"
    )
    (outcome,) = await asyncio.wait_for(
        asyncio.gather(release, return_exceptions=True), 3 * RETRY_WAIT_S
    )
    again = await slonkd.resume(["n1"], POD)  # the next pass: a fresh read, a new plan
    shown = cluster.run("scontrol", "-o", "show", "node", "n1").stdout
    assert f"Reason={OPERATOR_REASON} [" in shown, (outcome, shown)
    assert "DRAIN" in shown, shown
    assert again.skipped_for(SkipReason.FOREIGN_REASON) == {"n1"}, again
    assert isinstance(outcome, OutcomeUnknownError), outcome  # raised after one sending

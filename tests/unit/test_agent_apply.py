"""The agent's write and its record: a write that reached SLURM is never left unlogged.

Found by the hour's soak (seed 2026, t = 2,476 s): an agent drained its node, was stopped
(its pod gone) during the read that follows the write, and the drain stood in SLURM with no
``agent.mirror_applied`` line, no metric, nothing for an operator or the checker to see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import MutableMapping, Sequence
from typing import Any

import pytest
import structlog

from slonkd.adapters.slurm.results import UpdateResult
from slonkd.core.errors import OutcomeUnknownError, TransientError
from slonkd.core.plan import Action, Kind, Writer
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.runtime.agent.apply import apply_action
from slonkd.runtime.kit.metrics import Metrics

READ_AT = 1_796_248_939.5  # the compare-and-set read's epoch time, as the backend reports it
DRAIN = Action(kind=Kind.DRAIN, writer=Writer.AGENT, cause=Cause(name="pod-terminating"))


def _node(state: str) -> SlurmNode:
    base, *flags = state.split("+")
    return SlurmNode(name=NodeName("n1"), state=NodeState.from_tokens(base, flags), reason="")


class Backend:
    """A SLURM backend of one node whose write or follow-up read can be made to hang."""

    def __init__(self, *, write_hangs: bool = False, read_hangs: bool = False) -> None:
        self.write_hangs = write_hangs
        self.read_hangs = read_hangs
        self.wrote = asyncio.Event()
        self.reading = asyncio.Event()

    async def drain(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """The drain: lands at once, or hangs in flight."""
        if self.write_hangs:
            await asyncio.Event().wait()
        self.wrote.set()
        return UpdateResult(changed=tuple(NodeName(n) for n in names), read_at=READ_AT)

    async def resume(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """Not used here."""
        raise AssertionError("no resume expected")

    async def read_node(self, name: str) -> SlurmNode | None:
        """The read after the write: answers DRAIN, or hangs."""
        self.reading.set()
        if self.read_hangs:
            await asyncio.Event().wait()
        return _node("IDLE+DRAIN")


async def _drain(backend: Backend) -> bool:
    """The agent's drain of n1 (IDLE as read) through ``backend``."""
    return await apply_action(
        backend,  # type: ignore[arg-type]
        Metrics(role="agent"),
        "n1",
        DRAIN,
        _node("IDLE"),
    )


async def _cancel_when(event: asyncio.Event, backend: Backend) -> list[MutableMapping[str, Any]]:
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(_drain(backend))
        await asyncio.wait_for(event.wait(), 5)
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return logs


async def test_a_write_is_logged_with_the_state_before_and_after() -> None:
    """The ordinary case: one mirror_applied line, IDLE before, IDLE+DRAIN after."""
    with structlog.testing.capture_logs() as logs:
        done = await apply_action(
            Backend(),  # type: ignore[arg-type]
            Metrics(role="agent"),
            "n1",
            DRAIN,
            _node("IDLE"),
        )
    assert done is True
    (line,) = [e for e in logs if e["event"] == "agent.mirror_applied"]
    assert (line["action"], line["changed"]) == ("drain", True)
    assert (line["state_before"], line["state_after"]) == ("IDLE", "IDLE+DRAIN")
    # the compare-and-set window, for placing an operator's write that SLURM let us overwrite
    assert line["read_at"] == READ_AT
    assert READ_AT < line["written_at"] <= time.time() + 0.001  # logged to the millisecond


async def test_a_write_that_landed_is_logged_when_the_agent_stops_before_its_read() -> None:
    """Stopped during the read after the write: the line is still written, state_after None."""
    backend = Backend(read_hangs=True)
    logs = await _cancel_when(backend.reading, backend)
    lines = [e for e in logs if e["event"] == "agent.mirror_applied"]
    assert len(lines) == 1, logs
    assert lines[0]["action"] == "drain"
    assert lines[0]["cause"] == "pod-terminating"
    assert lines[0]["changed"] is True
    assert lines[0]["state_after"] is None


async def test_a_write_cancelled_in_flight_says_it_may_have_landed() -> None:
    """Stopped while the write is in flight: mirror_interrupted names the action and cause."""
    backend = Backend(write_hangs=True)
    started = asyncio.Event()
    original = backend.drain

    async def drain(names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        started.set()
        return await original(names, cause, text)

    backend.drain = drain  # type: ignore[method-assign]
    logs = await _cancel_when(started, backend)
    (line,) = [e for e in logs if e["event"] == "agent.mirror_interrupted"]
    assert (line["action"], line["cause"]) == ("drain", "pod-terminating")
    assert not [e for e in logs if e["event"] == "agent.mirror_applied"]


async def test_a_write_of_unknown_outcome_is_logged_and_left_to_the_reconcile_retry() -> None:
    """No answer after the write left (issue 37 item 2): mirror_outcome_unknown, then raised.

    The error is transient: the reconcile loop retries with a fresh read and a new decision
    (``reconcile.py``), never the same write blind; an operator's drain meanwhile is theirs.
    """
    backend = Backend()

    async def answered_late(names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        raise OutcomeUnknownError(
            "scontrol update timed out after 20.0 s; it may have been applied"
        )

    backend.drain = answered_late  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logs, pytest.raises(TransientError):
        await _drain(backend)
    (line,) = [e for e in logs if e["event"] == "agent.mirror_outcome_unknown"]
    assert (line["action"], line["cause"], line["state_before"]) == (
        "drain",
        "pod-terminating",
        "IDLE",
    )
    assert "may have been applied" in line["error"]
    assert not [e for e in logs if e["event"] == "agent.mirror_applied"]

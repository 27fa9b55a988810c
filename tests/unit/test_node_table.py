"""The coordinator's node table through :class:`~slonkd.runtime.coordinating.node_table.KeptSlurm`.

Every node write of the SLURM port drops the table (a table read before slonkd's own write
would have the next pass plan the same write again); a whole read feeds it; a named read, a
read with job counts, ``reconfigure`` (the configuration, not the node table) and
``signal_batch`` (a job signal, not a node write) leave it as it is. Neighbours:
``test_slurm_recent_table`` (the interleavings over the scontrol backend),
``tests/contract/test_slurm_recent_table.py`` (real SLURM).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from slonkd.adapters.slurm.backend import SlurmWrites
from slonkd.adapters.slurm.results import RequeueResult, UpdateResult
from slonkd.core.checkpoint import SignalSpec
from slonkd.core.reasons import Cause
from slonkd.core.slurm_job import JobId
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.runtime.coordinating.node_table import KeptSlurm, NodeTable

NODE = SlurmNode(name=NodeName("n1"), state=NodeState.from_tokens("IDLE", []))
CAUSE = Cause.parse("pod-terminating")
USR1 = SignalSpec.parse("B:USR1")
NOT_NODE_WRITES = ("reconfigure", "signal_batch")
"""Writes of the port that change no node: the configuration, a job's batch shell."""
WRITES = sorted(name for name, _ in inspect.getmembers(SlurmWrites, inspect.iscoroutinefunction))


class _Port:
    """Answers every call of the port; records what the table held during each."""

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self.during: dict[str, object] = {}

    async def read_nodes(self, names: Any = (), *, with_jobs: bool = False) -> list[SlurmNode]:
        return [NODE]

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> object:
            self.during[name] = self.table.table
            return RequeueResult() if name == "requeue_jobs" else UpdateResult()

        return call


def _args(name: str) -> tuple[Any, ...]:
    """Arguments each write accepts."""
    if name == "requeue_jobs":
        return ("n1",)
    if name == "set_comment":
        return (["n1"], "c")
    if name == "reconfigure":
        return ()
    if name == "signal_batch":
        return (JobId(7), USR1)
    return (["n1"], CAUSE)


def test_the_port_has_the_writes_this_test_knows() -> None:
    """A new write of the port must be added here (and to KeptSlurm, mypy says)."""
    assert WRITES == [
        "down", "drain", "fail", "reconfigure", "request_reboot", "requeue_jobs",
        "resume", "set_comment", "signal_batch", "undrain",
    ]  # fmt: skip


@pytest.mark.parametrize("name", [w for w in WRITES if w not in NOT_NODE_WRITES])
async def test_every_write_drops_the_table_before_and_after_it(name: str) -> None:
    """Kept before; none while the write runs, none after it."""
    table = NodeTable()
    port = _Port(table)
    slurm = KeptSlurm(port, table)
    assert await slurm.read_nodes() == [NODE]
    assert table.recent(60) == [NODE]
    await getattr(slurm, name)(*_args(name))
    assert port.during[name] is None, f"{name} ran with the table kept"
    assert table.recent(60) is None


async def test_reconfigure_and_the_reads_that_are_not_the_table_keep_it() -> None:
    """``reconfigure`` changes the configuration; a named or job-counting read is no table."""
    table = NodeTable()
    slurm = KeptSlurm(_Port(table), table)
    await slurm.read_nodes(["n1"])
    await slurm.read_nodes(with_jobs=True)
    assert table.table is None
    await slurm.read_nodes()
    kept = table.table
    await slurm.reconfigure()
    await slurm.read_node("n1")
    assert table.table is kept


async def test_a_batch_shell_signal_is_passed_through_and_keeps_the_table() -> None:
    """``signal_batch`` signals a job's batch shell: no node changes, so the table stays kept."""
    table = NodeTable()
    port = _Port(table)
    slurm = KeptSlurm(port, table)
    await slurm.read_nodes()
    kept = table.table
    await slurm.signal_batch(JobId(7), USR1)
    assert port.during["signal_batch"] is kept
    assert table.table is kept

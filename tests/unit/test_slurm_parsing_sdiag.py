"""The ``sdiag`` parser against recorded output of SLURM 22.05 and 24.11, and what it refuses."""

from __future__ import annotations

import pytest

from slonkd.adapters.slurm.parsing_sdiag import RpcStats, parse_sdiag, stats_from_fields
from slonkd.core.errors import ParseError
from tests.unit.recorded import recorded


@pytest.mark.parametrize(
    ("release", "threads", "pending", "node_info"),
    [
        ("22.05", 3, 0, RpcStats(count=14, total_us=3976)),
        ("24.11", 1, 4, RpcStats(count=2, total_us=298)),
    ],
)
def test_recorded_sdiag_reads_threads_queue_jobs_and_rpcs(
    release: str, threads: int, pending: int, node_info: RpcStats
) -> None:
    """Both releases: thread count, agent queue, job counters and snapshot, RPCs by type only.

    The recording's setup submitted 4 jobs and started 3; the RPCs by user (root) are not
    taken for an RPC type.
    """
    stats = parse_sdiag(recorded(release, "sdiag.txt"))
    assert stats.server_threads == threads
    assert stats.agent_queue == 0
    assert stats.dbd_agent_queue == 0
    assert stats.jobs == {"submitted": 4, "started": 3, "completed": 0, "canceled": 0, "failed": 0}
    assert stats.jobs_now == {"pending": pending, "running": 0}
    assert stats.rpcs["REQUEST_NODE_INFO"] == node_info
    assert stats.rpcs["REQUEST_UPDATE_NODE"].count == 10
    assert "root" not in stats.rpcs
    assert all(name.isupper() for name in stats.rpcs)


def test_main_scheduler_cycle_is_not_the_backfill_cycle() -> None:
    """``Last cycle`` appears under both schedulers: the main scheduler's is taken."""
    text = (
        "Server thread count:  7\nAgent queue size:     12\n\n"
        "Main schedule statistics (microseconds):\n\tLast cycle:   1500\n\tMax cycle:    9000\n\n"
        "Backfilling stats\n\tLast cycle: 777777\n"
    )
    stats = parse_sdiag(text)
    assert (stats.server_threads, stats.agent_queue, stats.main_cycle_last_us) == (7, 12, 1500)
    assert stats.rpcs == {}
    assert stats.jobs["submitted"] == 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sdiag: error: Unable to contact slurm controller (connect failure)\n",
        "Agent queue size: 1\n",
    ],
)
def test_output_without_the_server_thread_count_is_refused(text: str) -> None:
    """Not sdiag's output (empty, an error, cut off): a ParseError, never zeros."""
    with pytest.raises(ParseError):
        parse_sdiag(text)


FIELDS = {
    "server_thread_count": 3,
    "agent_queue_size": 1,
    "agent_count": 2,
    "dbd_agent_queue_size": 0,
    "jobs_submitted": 4,
    "jobs_started": 3,
    "jobs_pending": 1,
    "jobs_running": 2,
    "schedule_cycle_last": 57,
    "rpcs": {"REQUEST_NODE_INFO": [14, 3976]},
}


def test_the_pyslurm_childs_fields_build_the_same_statistics() -> None:
    """The child's ``diag`` fields (sdiag's names): missing counters are 0."""
    stats = stats_from_fields(FIELDS)
    assert (stats.server_threads, stats.agent_queue, stats.agent_count) == (3, 1, 2)
    assert stats.jobs == {"submitted": 4, "started": 3, "completed": 0, "canceled": 0, "failed": 0}
    assert stats.jobs_now == {"pending": 1, "running": 2}
    assert stats.main_cycle_last_us == 57
    assert stats.rpcs == {"REQUEST_NODE_INFO": RpcStats(count=14, total_us=3976)}


@pytest.mark.parametrize(
    "said",
    [
        None,
        [],
        {k: v for k, v in FIELDS.items() if k != "rpcs"},
        {k: v for k, v in FIELDS.items() if k != "server_thread_count"},
        {**FIELDS, "agent_queue_size": -1},
        {**FIELDS, "jobs_running": "2"},
        {**FIELDS, "agent_count": True},
        {**FIELDS, "rpcs": {"REQUEST_PING": [1]}},
        {**FIELDS, "rpcs": {"REQUEST_PING": [1, -5]}},
    ],
)
def test_fields_of_the_wrong_shape_are_refused(said: object) -> None:
    """Nothing guessed: a missing thread count or a bad count is a ParseError."""
    with pytest.raises(ParseError):
        stats_from_fields(said)

"""Rows the pyslurm child answered on real clusters, built into slonkd's types (parsing_pyslurm).

The rows are recorded from both harness releases by ``tests/data/pyslurm/record_rows.py``
(the states of ``tests/data/slurm/record.py``'s set-up: the same nodes as the scontrol
recordings), so what is asserted here is what pyslurm 22.5 and 24.11 really give.
"""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.slurm.parsing import reason_groups
from slonkd.adapters.slurm.parsing_pyslurm import (
    JOB_FIELDS,
    NODE_FIELDS,
    NodeRows,
    error_for,
    error_kind,
    finished_jobs,
    jobs_on,
    parse_node_row,
    parse_nodes,
    running_counts,
)
from slonkd.adapters.slurm.runner import (
    InvalidNodeStateError,
    NodeNotFoundError,
    NotReachedError,
    PermissionDeniedError,
)
from slonkd.core.errors import OutcomeUnknownError, ParseError, TerminalError, TransientError
from slonkd.core.slurm_job import JobState, Presence
from slonkd.core.slurm_node import BaseState, DrainStatus, NodeFlag

DATA = Path(__file__).resolve().parent.parent / "data" / "pyslurm"
RELEASES = ("22.05", "24.11")


def _load(release: str, name: str) -> Any:
    return json.loads((DATA / release / name).read_text())


@pytest.fixture(params=RELEASES)
def release(request: pytest.FixtureRequest) -> str:
    """A release whose rows were recorded."""
    return str(request.param)


def test_the_node_table_reads_every_field_exactly(release: str) -> None:
    """Comments, extras, drains, down, fail, reboot, hostile reasons: exact, no suffix."""
    said = _load(release, "nodes.json")
    nodes = {str(n.name): n for n in parse_nodes(said["nodes"], said["jobs"])}
    assert set(nodes) == {f"n{i}" for i in range(1, 6)} | {f"x{i}" for i in range(1, 9)}
    n1, n2, n3, n4, n5 = (nodes[f"n{i}"] for i in range(1, 6))
    assert (n1.comment, n1.extra, n1.held) == ("hello world", '{"rack":"r1"}', False)
    assert n2.state.drain is DrainStatus.DRAINED
    assert (n2.reason, n2.reason_user) == ("slonkd:pod-terminating bye", "root")
    assert n2.extra == '{"slonkd":["pod-terminating"]}'
    assert n2.reason_time is not None
    assert n2.reason_time.tzinfo is UTC
    assert (n3.state.drain, n3.reason, n3.running_jobs) == (DrainStatus.DRAINING, "admin maint", 1)
    assert (n4.state.base, n4.reason) == (BaseState.DOWN, "down it")
    assert n5.state.reboot_pending
    assert n5.running_jobs == 2
    assert n1.running_jobs == 0
    assert NodeFlag.FAIL in nodes["x1"].state.flags
    assert nodes["x2"].reason == 'line1\nline2 Comment=x "q'
    assert nodes["x3"].reason == "Kill task failed"
    assert nodes["x4"].extra == '{"slonkd":["health:gpu-xid-79","k8s-cordoned"]}'
    assert all(n.cpus > 0 and n.partitions for n in (n1, n2, n3, n4, n5))
    assert n3.alloc_cpus > 0
    assert all(n.fully_recognised for n in (s.state for s in nodes.values()))


def test_one_node_named_nodes_and_an_unknown_node(release: str) -> None:
    """node{n2} is the table's n2 (no job count); an unknown name is null; names filter."""
    table = {str(n.name): n for n in parse_nodes(_load(release, "nodes.json")["nodes"])}
    assert parse_node_row(_load(release, "node_n2.json")) == table["n2"]
    assert _load(release, "node_missing.json") is None
    named = _load(release, "nodes_named.json")
    assert named["jobs"] is None
    assert [n.name for n in parse_nodes(named["nodes"])] == ["n2", "x2"]


def test_reasons_are_one_group_a_held_node(release: str) -> None:
    """Every node a reason holds, with its setter and time; slonkd's state spelling."""
    groups = {
        tuple(map(str, g.nodes)): g
        for g in reason_groups(parse_nodes(_load(release, "reasons.json")))
    }
    held = {("n2",), ("n3",), ("n4",), ("n5",), ("x1",), ("x2",), ("x3",), ("x4",)}
    assert held <= set(groups)
    assert groups[("n2",)].reason == "slonkd:pod-terminating bye"
    assert groups[("n2",)].user == "root"
    assert groups[("n2",)].state == "idle+drain"
    assert groups[("x2",)].reason == 'line1\nline2 Comment=x "q'


def test_jobs_on_a_node_with_their_requeue_flags(release: str) -> None:
    """n5's two running batch jobs, one --no-requeue; one state word each."""
    jobs = sorted(jobs_on(_load(release, "jobs_on_n5.json"), "n5"), key=lambda j: j.job_id)
    assert [j.presence for j in jobs] == [Presence.LIVE, Presence.LIVE]
    assert [j.states for j in jobs] == [("RUNNING",), ("RUNNING",)]
    assert [j.requeue for j in jobs] == [True, False]
    assert all(j.batch and j.nodes == ("n5",) for j in jobs)
    assert jobs_on(_load(release, "jobs_on_n5.json"), "n1") == []


def test_finished_jobs_with_exit_code_nodes_times_and_user(release: str) -> None:
    """'exit 3' FAILED and 'true' COMPLETED on n1; still-running jobs are not listed."""
    jobs = finished_jobs(_load(release, "finished.json"))
    by_state = {j.state: j for j in jobs if j.nodes == ("n1",)}
    assert by_state[JobState.FAILED].exit_code == 3
    assert by_state[JobState.COMPLETED].exit_code == 0
    for job in by_state.values():
        assert job.start is not None
        assert job.end is not None
        assert job.start <= job.end
        assert job.user is not None


def test_versions_name_the_release(release: str) -> None:
    """pyslurm, its library and slurmctld are of the recorded release (22.05 is 22.5 there)."""
    said = _load(release, "versions.json")
    want = tuple(int(x) for x in release.split("."))
    for key in ("pyslurm", "slurmctld"):
        assert tuple(int(x) for x in said[key].split(".")[:2]) == want, said
    assert "libslurm" in said["library"]
    assert said["api"].split(".")[0].isdigit()  # the library's ABI number, not its release


def test_running_counts_take_only_jobs_on_their_nodes() -> None:
    """Pending and ended jobs hold nothing; a job on two nodes counts on both."""
    row: dict[str, object] = dict.fromkeys(JOB_FIELDS)

    def job(job_id: int, state: str, nodes: str | None) -> list[object]:
        return list({**row, "id": job_id, "state": state, "allocated_nodes": nodes}.values())

    rows = [
        job(1, "RUNNING", "n[1-2]"),
        job(2, "COMPLETING", "n2"),
        job(3, "PENDING", None),
        job(4, "FAILED", "n3"),
    ]
    assert running_counts(rows) == {"n1": 1, "n2": 2}


@pytest.mark.parametrize(
    ("index", "value"),
    [
        (0, "bad name!"),
        (1, ""),
        (1, 7),
        (4, "yesterday"),
        (7, "a,b"),
        (9, -1),
        (3, 0),
    ],
)
def test_a_row_of_the_wrong_shape_is_refused(index: int, value: object) -> None:
    """Nothing is guessed: a bad name, state, time, list or count is a ParseError."""
    row: list[object] = ["n1", "IDLE", None, None, None, None, None, [], [], 4, 0, ["p"]]
    assert parse_node_row(row).name == "n1"
    row[index] = value
    with pytest.raises(ParseError):
        parse_node_row(row)
    with pytest.raises(ParseError):
        parse_node_row(row[: len(NODE_FIELDS) - 1])


@pytest.mark.parametrize(
    ("errno", "write", "kind", "error"),
    [
        (1800, False, "not-reached", NotReachedError),
        (2027, True, "not-reached", NotReachedError),
        (2131, False, "not-reached", NotReachedError),
        (1802, False, "transient", TransientError),
        (1802, True, "outcome-unknown", OutcomeUnknownError),
        (5004, True, "outcome-unknown", OutcomeUnknownError),
        (1001, False, "transient", TransientError),
        (2018, False, "not-found", NodeNotFoundError),
        (2028, True, "refused", InvalidNodeStateError),
        (2002, True, "denied", PermissionDeniedError),
        (1005, False, "terminal", TerminalError),
        (9999, False, "transient", TransientError),
        (None, False, "terminal", TerminalError),
    ],
)
def test_errors_are_mapped_by_errno(
    errno: int | None, write: bool, kind: str, error: type[Exception]
) -> None:
    """The plan's table: the child's word, then slonkd's error of that word, exactly."""
    assert error_kind(errno, write=write) == kind
    got = error_for(kind, "detail")
    assert type(got) is error
    assert str(got) == "detail"


def test_rows_unchanged_since_the_last_read_are_not_parsed_again(release: str) -> None:
    """The parent's parse of 5,000 rows was 120-140 ms a read; a row the last read had is not.

    The scontrol backend skips its unchanged lines alike. A changed row is parsed (its new
    value read), a row of the wrong shape is refused as before and never kept, and the
    result is the uncached parse's.
    """
    said = _load(release, "nodes.json")
    rows = NodeRows()
    first = rows.parse(said["nodes"])
    assert first == parse_nodes(said["nodes"])
    again = rows.parse(json.loads(json.dumps(said["nodes"])))  # the next read: new lists
    assert all(a is b for a, b in zip(first, again, strict=True))
    changed = json.loads(json.dumps(said["nodes"]))
    changed[0][NODE_FIELDS.index("comment")] = "changed"
    third = rows.parse(changed)
    assert third[0].comment == "changed"
    assert third[0] is not first[0]
    assert all(a is b for a, b in zip(first[1:], third[1:], strict=True))
    bad = json.loads(json.dumps(said["nodes"]))
    bad[1][NODE_FIELDS.index("total_cpus")] = "many"
    with pytest.raises(ParseError, match="cpus"):
        rows.parse(bad)
    with pytest.raises(ParseError, match="cpus"):
        rows.parse(bad)  # not kept by the failed read
    with pytest.raises(ParseError, match="twice"):
        rows.parse([*said["nodes"], said["nodes"][0]])  # unique names, as parse_nodes

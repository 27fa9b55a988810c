"""Parsers of recorded SLURM 22.05 output: exact states, and typed errors on bad input.

The files under ``tests/data/slurm/22.05`` were recorded from the harness's real daemons by
``tests/data/slurm/record.py`` (``sources.json`` names each command and the version).
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slonkd.adapters.slurm.parsing import (
    AmbiguousOutput,
    ReasonGroup,
    parse_sinfo_json,
    parse_sinfo_reasons,
    parse_squeue_json,
)
from slonkd.adapters.slurm.parsing_show_node import (
    NodeLines,
    parse_show_node,
    parse_show_node_line,
)
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import SlurmJob
from slonkd.core.slurm_node import DrainStatus, SlurmNode
from tests.unit.recorded import recorded

SHOW = recorded("22.05", "scontrol_show_node.txt")
SINFO = recorded("22.05", "sinfo.json")
SHOW_LINES = [line for line in SHOW.splitlines() if "NodeName=x2 " not in line]

# node: (state as SLURM prints it, drain status, reason, extra)
EXPECTED = {
    "n1": ("IDLE", DrainStatus.NONE, "", '{"rack":"r1"}'),
    "n2": (
        "IDLE+DRAIN",
        DrainStatus.DRAINED,
        "slonkd:pod-terminating bye",
        '{"slonkd":["pod-terminating"]}',
    ),
    "n3": ("MIXED+DRAIN", DrainStatus.DRAINING, "admin maint", ""),
    "n4": ("DOWN", DrainStatus.NONE, "down it", ""),
    "n5": (
        "ALLOCATED+DRAIN+REBOOT_REQUESTED",
        DrainStatus.DRAINING,
        "slonkd:health:gpu-xid-79 reboot",
        "",
    ),
    "x1": ("IDLE+FAIL", DrainStatus.NONE, "fail it", ""),
    "x3": ("IDLE+DRAIN", DrainStatus.DRAINED, "Kill task failed", ""),
    "x4": (
        "IDLE+DRAIN",
        DrainStatus.DRAINED,
        "slonkd:health:gpu-xid-79 xid",
        '{"slonkd":["health:gpu-xid-79","k8s-cordoned"]}',
    ),
    "x5": ("IDLE", DrainStatus.NONE, "", ""),
}


def _check(node: SlurmNode) -> None:
    state, drain, reason, extra = EXPECTED[node.name]
    assert str(node.state) == state
    assert node.state.drain is drain
    assert node.reason == reason
    assert node.extra == extra


def test_show_node_lines_parse_to_the_recorded_states() -> None:
    """Each line of ``scontrol -o show node`` gives the state, reason and extra SLURM holds."""
    nodes: dict[str, SlurmNode] = {n.name: n for n in map(parse_show_node_line, SHOW_LINES)}
    for name in EXPECTED:
        _check(nodes[name])
    assert nodes["n1"].comment == "hello world"
    assert nodes["n1"].features == ("f_a", "f_b")
    assert nodes["n3"].alloc_cpus == 1
    assert nodes["n3"].reason_user == "root"
    assert nodes["x5"].reason_time is None


def test_sinfo_json_parses_to_the_recorded_states() -> None:
    """``sinfo --json`` gives the same states, including the node with a newline reason."""
    nodes: dict[str, SlurmNode] = {n.name: n for n in parse_sinfo_json(SINFO)}
    assert len(nodes) == 13
    for name in EXPECTED:
        _check(nodes[name])
    assert nodes["x2"].reason == 'line1\nline2 Comment=x "q'
    assert nodes["x2"].comment == ""
    when = nodes["n2"].reason_time
    assert when is not None
    assert when.tzinfo is UTC
    assert when > datetime(2024, 1, 1, tzinfo=UTC)


def test_text_and_json_agree_on_every_unambiguous_node() -> None:
    """Both reads of the same moment agree field by field."""
    by_json: dict[str, SlurmNode] = {n.name: n for n in parse_sinfo_json(SINFO)}
    for node in map(parse_show_node_line, SHOW_LINES):
        assert node == by_json[node.name]


def test_reason_with_newline_makes_the_text_read_ambiguous() -> None:
    """A reason with a newline (x2) cannot be split in text: AmbiguousOutput, not a guess."""
    with pytest.raises(AmbiguousOutput):
        parse_show_node(SHOW)


SPOOFS = [
    # A comment that fakes a reason on a node with no reason.
    "Comment=x Reason=fake [root@2026-01-01T00:00:00]",
    # A reason that fakes a comment after its suffix.
    "Reason=a [root@2026-01-01T00:00:00] b Comment=c",
    # A reason that hides a field inside it.
    "Reason=a Extra=b [root@2026-01-01T00:00:00]",
    # A reason whose text fakes the suffix, then a comment.
    "Reason=x [root@2026-01-01T00:00:00] Comment=y [root@2026-01-01T00:00:00]",
    "Reason=a Reason=b [root@2026-01-01T00:00:00]",
]


@pytest.mark.parametrize("tail", SPOOFS)
def test_free_text_that_fakes_fields_is_ambiguous(tail: str) -> None:
    """Free text containing ``Key=`` fields or a fake suffix is refused, never misread."""
    head = SHOW_LINES[0].split(" Comment=")[0]
    with pytest.raises(AmbiguousOutput):
        parse_show_node_line(f"{head} {tail}")


def test_sinfo_reasons_groups() -> None:
    """``sinfo -R`` gives each reason with its nodes; the newline reason is ambiguous."""
    text = recorded("22.05", "sinfo_reasons.txt")
    with pytest.raises(AmbiguousOutput):
        parse_sinfo_reasons(text)
    groups = parse_sinfo_reasons(text.replace("line1\nline2", "line1 line2"))
    by_node: dict[str, ReasonGroup] = {n: g for g in groups for n in g.nodes}
    assert by_node["n3"].reason == "admin maint"
    assert by_node["n3"].state == "draining"
    assert by_node["n5"].state == "draining@"
    assert by_node["x1"].state == "fail"
    assert set(by_node) == {"n2", "n3", "n4", "n5", "x1", "x2", "x3", "x4"}
    grouped = parse_sinfo_reasons("x[1-3,7]|drained|2026-11-30T03:58:30|root(0)|a|b\n")
    assert grouped[0].nodes == ("x1", "x2", "x3", "x7")
    assert grouped[0].reason == "a|b"


def test_squeue_json_jobs_and_requeueability() -> None:
    """Jobs carry their nodes; a --no-requeue job and a pending job are not requeueable."""
    jobs: dict[int, SlurmJob] = {
        j.job_id: j for j in parse_squeue_json(recorded("22.05", "squeue.json"))
    }
    assert jobs[1].nodes == ("n3",)
    assert jobs[1].requeueable
    assert jobs[2].requeueable
    assert not jobs[3].requeueable
    assert jobs[3].on_node
    assert jobs[4].nodes == ()
    assert not jobs[4].on_node
    assert not jobs[4].requeueable


PARSERS = [parse_show_node, parse_sinfo_json, parse_sinfo_reasons, parse_squeue_json]


@pytest.mark.parametrize("parser", PARSERS)
@given(data=st.text(max_size=2000) | st.binary(max_size=2000).map(lambda b: b.decode("latin-1")))
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_garbage_gives_parse_error_or_nothing(parser: object, data: str) -> None:
    """Random input never crashes a parser: it parses or raises ParseError."""
    assert callable(parser)
    with contextlib.suppress(ParseError):
        parser(data)


@given(cut=st.integers(min_value=0, max_value=len(SINFO.rstrip()) - 1))
def test_truncated_json_never_parses(cut: int) -> None:
    """A cut-off ``sinfo --json`` is a ParseError, never a partial node list."""
    with pytest.raises(ParseError):
        parse_sinfo_json(SINFO[:cut])


UNAMBIGUOUS = "\n".join(SHOW_LINES) + "\n"
FULL: dict[str, SlurmNode] = {n.name: n for n in parse_show_node(UNAMBIGUOUS)}


@given(cut=st.integers(min_value=1, max_value=len(UNAMBIGUOUS) - 1))
def test_truncated_text_never_gives_a_wrong_node(cut: int) -> None:
    """A cut-off text read raises, or yields only nodes identical to the full read."""
    try:
        nodes = parse_show_node(UNAMBIGUOUS[:cut])
    except ParseError:
        return
    for node in nodes:
        assert node == FULL[node.name]


@given(
    pos=st.integers(min_value=0, max_value=len(UNAMBIGUOUS) - 1),
    junk=st.text(alphabet=" =+[]@\n|{}\"'A-Za-z0-9", min_size=1, max_size=40),
)
@settings(max_examples=300)
def test_hostile_insertions_never_claim_a_foreign_node(pos: int, junk: str) -> None:
    """Junk spliced into the text never turns a foreign-held node into a slonkd-held one."""
    text = UNAMBIGUOUS[:pos] + junk + UNAMBIGUOUS[pos:]
    try:
        nodes = parse_show_node(text)
    except ParseError:
        return
    for node in nodes:
        if node.name in FULL and node.reason.startswith("slonkd:"):
            assert FULL[node.name].reason.startswith("slonkd:") or "slonkd:" in junk


def test_huge_json_is_refused_cleanly() -> None:
    """Deeply nested or oversized JSON is a ParseError, not a RecursionError."""
    with pytest.raises(ParseError):
        parse_sinfo_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ParseError):
        parse_sinfo_json(json.dumps({"nodes": [{"name": "n1"}]}))
    with pytest.raises(ParseError):
        parse_sinfo_json(json.dumps({"nodes": [], "errors": [{"error": "x"}]}))


def test_a_full_read_parses_only_the_lines_that_changed() -> None:
    """The last read's lines (issue 21): an unchanged line gives the same node, unparsed.

    A changed line is parsed again; a read that raises leaves the lines of the read before.
    """
    known = NodeLines()
    first = parse_show_node(UNAMBIGUOUS, known)
    assert parse_show_node(UNAMBIGUOUS, known) == first
    again = parse_show_node(UNAMBIGUOUS, known)
    assert all(a is b for a, b in zip(again, first, strict=True))  # the same objects
    line = SHOW_LINES[0]
    assert "State=IDLE " in line
    changed = UNAMBIGUOUS.replace(line, line.replace("State=IDLE ", "State=IDLE+DRAIN "), 1)
    nodes = parse_show_node(changed, known)
    assert nodes[0].state.drain is DrainStatus.DRAINED
    assert all(a is b for a, b in zip(nodes[1:], first[1:], strict=True))
    with pytest.raises(ParseError):
        parse_show_node(changed + changed, known)  # every node twice
    assert parse_show_node(changed, known)[0] is nodes[0]

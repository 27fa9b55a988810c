"""The coordinator's poll read: the nodes of ``scontrol -o show node`` that carry a reason."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.adapters.slurm.parsing_show_node import (
    parse_reason_nodes,
    parse_show_node,
    parse_show_node_line,
)
from slonkd.core.errors import ParseError
from tests.unit.recorded import RELEASES, recorded


@pytest.mark.parametrize("version", RELEASES)
def test_same_nodes_as_the_full_parse_filtered_by_reason(version: str) -> None:
    """On the recorded real output: exactly the full parse's nodes that have a reason."""
    lines = recorded(version, "scontrol_show_node.txt").splitlines()
    clear = [line for line in lines if _parses(line)]  # the recording also holds hostile
    assert len(clear) >= 2  # reasons that make -o output ambiguous on purpose
    text = "\n".join(clear) + "\n"
    full = parse_show_node(text)
    assert any(n.reason for n in full), "the recording should hold a node with a reason"
    assert parse_reason_nodes(text) == [n for n in full if n.reason]
    assert any(not n.reason for n in full)  # and nodes without one, left out


def test_the_hostile_recording_is_ambiguous_for_the_poll_too() -> None:
    """The recorded hostile reason (fields that do not split) is refused, not misread."""
    text = recorded("22.05", "scontrol_show_node.txt")
    with pytest.raises(ParseError):
        parse_reason_nodes(text)


def _parses(line: str) -> bool:
    try:
        parse_show_node_line(line)
    except ParseError:
        return False
    return True


def test_a_reason_with_a_newline_is_ambiguous_not_guessed() -> None:
    """A line that is no node record (a reason split by a newline) raises, never guesses."""
    text = recorded("22.05", "scontrol_show_node.txt")
    first = text.splitlines()[0]
    broken = first.replace("NodeName=", "NodeName=", 1) + "\ncontinued reason text\n"
    with pytest.raises(ParseError):
        parse_reason_nodes(broken)


def test_cut_off_output_raises() -> None:
    """Output without its final newline was cut off: an error, not fewer nodes."""
    text = recorded("22.05", "scontrol_show_node.txt")
    with pytest.raises(ParseError):
        parse_reason_nodes(text.rstrip("\n"))


@given(st.text(max_size=400))
def test_garbage_gives_a_typed_error_or_nodes_never_a_crash(junk: str) -> None:
    """Any text: a ParseError or a list, nothing else."""
    try:
        nodes = parse_reason_nodes(junk)
    except ParseError:
        return
    assert all(n.reason for n in nodes)

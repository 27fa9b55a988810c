"""Parsing ``strigger --get`` (recorded from 22.05) and building trigger program lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.adapters.slurm.triggers import TriggerEvent, parse_strigger_get, program_line
from slonkd.core.errors import ParseError

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm" / "22.05" / "strigger_get.txt"


def test_recorded_triggers_parse_with_and_without_flags() -> None:
    """Both rows parse; the PERM flag is read and a blank FLAGS column does not shift fields."""
    first, second = parse_strigger_get(DATA.read_text())
    assert (first.trig_id, first.res_type, first.res_id, first.event) == (1, "node", "*", "drained")
    assert first.permanent
    assert first.program == "/bin/true drained"
    assert (second.event, second.permanent, second.program) == ("down", False, "/bin/true down")


def test_no_triggers_is_an_empty_list() -> None:
    """Empty output (or only the header) means no triggers."""
    assert parse_strigger_get("") == []
    assert parse_strigger_get(DATA.read_text().splitlines()[0] + "\n") == []


@given(st.text(max_size=300))
def test_garbage_is_a_parse_error_or_nothing(text: str) -> None:
    """Random text never crashes the parser."""
    try:
        parse_strigger_get(text)
    except ParseError:
        return


def test_program_line_refuses_spaces() -> None:
    """The program must be one path: slurmctld splits the line on spaces."""
    assert program_line("/usr/bin/slonkd-nudge", TriggerEvent.DOWN) == "/usr/bin/slonkd-nudge down"
    with pytest.raises(ValueError, match="without spaces"):
        program_line("/usr/bin/slonkd nudge", TriggerEvent.DOWN)

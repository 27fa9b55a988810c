"""Parsing ``strigger --get`` (recorded from 22.05), trigger program lines and their owner tag."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.adapters.slurm.triggers import (
    Trigger,
    TriggerEvent,
    owned,
    parse_strigger_get,
    program_line,
)
from slonkd.core.errors import ParseError
from tests.unit.recorded import recorded

RECORDED = recorded("22.05", "strigger_get.txt")


def test_recorded_triggers_parse_with_and_without_flags() -> None:
    """Both rows parse; the PERM flag is read and a blank FLAGS column does not shift fields."""
    first, second = parse_strigger_get(RECORDED)
    assert (first.trig_id, first.res_type, first.res_id, first.event) == (1, "node", "*", "drained")
    assert first.permanent
    assert first.program == "/bin/true drained"
    assert (second.event, second.permanent, second.program) == ("down", False, "/bin/true down")


def test_no_triggers_is_an_empty_list() -> None:
    """Empty output (or only the header) means no triggers."""
    assert parse_strigger_get("") == []
    assert parse_strigger_get(RECORDED.splitlines()[0] + "\n") == []


@given(st.text(max_size=300))
def test_garbage_is_a_parse_error_or_nothing(text: str) -> None:
    """Random text never crashes the parser."""
    try:
        parse_strigger_get(text)
    except ParseError:
        return


def test_program_line_refuses_spaces() -> None:
    """The program must be one path: slurmctld splits the line on spaces."""
    line = program_line("/usr/bin/slonkd-nudge", TriggerEvent.DOWN)
    assert line == "/usr/bin/slonkd-nudge --by=slonkd-coordinator down"
    with pytest.raises(ValueError, match="without spaces"):
        program_line("/usr/bin/slonkd nudge", TriggerEvent.DOWN)
    with pytest.raises(ValueError, match="plain name"):
        program_line("/usr/bin/slonkd-nudge", TriggerEvent.DOWN, owner="me --and")


def _trigger(program: str, res_type: str = "node") -> Trigger:
    return Trigger(
        trig_id=1, res_type=res_type, res_id="*", event="down", user="root", permanent=True,
        program=program,
    )  # fmt: skip


def test_only_the_owner_tag_makes_a_trigger_slonkds() -> None:
    """The tag as first argument says whose a trigger is, not the program's path.

    An operator's trigger of slonkd-nudge without the tag, another owner's tag, the tag
    further along or a job trigger are not the coordinator's; its tag with an old program
    path is.
    """
    assert owned(_trigger("/usr/bin/slonkd-nudge --by=slonkd-coordinator down"))
    assert owned(_trigger("/old/bin/slonkd-nudge --by=slonkd-coordinator up"))
    assert not owned(_trigger("/usr/bin/slonkd-nudge down"))
    assert not owned(_trigger("/usr/bin/slonkd-nudge --by=site-ops down"))
    assert not owned(_trigger("/bin/true down --by=slonkd-coordinator"))
    assert not owned(_trigger("/usr/bin/slonkd-nudge --by=slonkd-coordinator down", "job"))
    assert owned(_trigger("/x --by=site-ops down"), owner="site-ops")

"""Parsers of recorded SLURM 24.11 output (data_parser v0.0.42): exact states, typed errors.

Recorded by ``tests/data/slurm/record.py 24.11`` from a real 24.11.5 cluster running in a
debootstrapped trixie root; the node states are the same as for 22.05 (see the README).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.adapters.slurm.parsing import (
    AmbiguousOutput,
    ReasonGroup,
    parse_sinfo_reasons,
)
from slonkd.adapters.slurm.parsing_show_node import parse_show_node, parse_show_node_line
from slonkd.adapters.slurm.parsing_v42 import parse_scontrol_json, parse_squeue_json_v42
from slonkd.adapters.slurm.triggers import parse_strigger_get
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import SlurmJob
from slonkd.core.slurm_node import DrainStatus, SlurmNode
from tests.unit.recorded import recorded
from tests.unit.test_slurm_parsing import EXPECTED as EXPECTED_22_05

SHOW_JSON = recorded("24.11", "scontrol_show_node.json")
SHOW_TEXT = recorded("24.11", "scontrol_show_node.txt")

# 22.05's states, but for the x nodes, whose base state 24.11 reports as UNKNOWN, and x2,
# whose reason (a newline in it) the JSON read carries.
EXPECTED = {
    **EXPECTED_22_05,
    "x1": ("UNKNOWN+FAIL", DrainStatus.NONE, "fail it", ""),
    "x2": ("UNKNOWN+DRAIN", DrainStatus.DRAINED, 'line1\nline2 Comment=x "q', ""),
    "x3": ("UNKNOWN+DRAIN", DrainStatus.DRAINED, "Kill task failed", ""),
    "x4": ("UNKNOWN+DRAIN", *EXPECTED_22_05["x4"][1:]),
    "x5": ("UNKNOWN", DrainStatus.NONE, "", ""),
}


def _by_name(nodes: list[SlurmNode]) -> dict[str, SlurmNode]:
    return {n.name: n for n in nodes}


def test_scontrol_json_parses_to_the_recorded_states() -> None:
    """``scontrol show node --json`` of 24.11 gives exact states, reasons and extra."""
    nodes = _by_name(parse_scontrol_json(SHOW_JSON))
    assert len(nodes) == 13
    for name, (state, drain, reason, extra) in EXPECTED.items():
        node = nodes[name]
        assert (str(node.state), node.state.drain, node.reason, node.extra) == (
            state,
            drain,
            reason,
            extra,
        )
    assert nodes["n1"].comment == "hello world"
    assert nodes["n1"].features == ("f_a", "f_b")
    assert nodes["n3"].alloc_cpus == 1
    assert nodes["n1"].reason_user is None


def test_text_and_json_agree_on_24_11() -> None:
    """24.11's text format (extra ResumeAfterTime field) parses like its JSON."""
    by_json = _by_name(parse_scontrol_json(SHOW_JSON))
    lines = [ln for ln in SHOW_TEXT.splitlines() if "NodeName=x2 " not in ln]
    for node in map(parse_show_node_line, lines):
        assert node == by_json[node.name]
    with pytest.raises(AmbiguousOutput):
        parse_show_node(SHOW_TEXT)


def test_squeue_and_reasons_and_triggers_of_24_11() -> None:
    """squeue's list-valued job_state, sinfo -R and strigger --get parse on 24.11."""
    jobs: dict[int, SlurmJob] = {
        j.job_id: j for j in parse_squeue_json_v42(recorded("24.11", "squeue.json"))
    }
    assert [jobs[i].requeueable for i in (1, 2, 3, 4)] == [True, True, False, False]
    assert jobs[3].nodes == ("n5",)
    reasons = recorded("24.11", "sinfo_reasons.txt").replace("line1\nline2", "l1 l2")
    by_node: dict[str, ReasonGroup] = {n: g for g in parse_sinfo_reasons(reasons) for n in g.nodes}
    assert by_node["n5"].state == "draining@"
    assert [t.permanent for t in parse_strigger_get(recorded("24.11", "strigger_get.txt"))] == [
        True,
        False,
    ]


@given(cut=st.integers(min_value=0, max_value=len(SHOW_JSON.rstrip()) - 1))
def test_truncated_json_never_parses(cut: int) -> None:
    """A cut-off 24.11 JSON read is a ParseError."""
    with pytest.raises(ParseError):
        parse_scontrol_json(SHOW_JSON[:cut])


MUTATIONS = [
    ("state", []),
    ("state", "IDLE"),
    ("reason_changed_at", 5),
    ("reason_changed_at", {"set": "yes", "infinite": False, "number": 1}),
    ("features", "f_a,f_b"),
    ("name", "bad name"),
    ("cpus", None),
]


@pytest.mark.parametrize(("key", "value"), MUTATIONS)
def test_wrong_shapes_are_parse_errors(key: str, value: object) -> None:
    """A field of the wrong shape is refused, never defaulted."""
    doc = json.loads(SHOW_JSON)
    doc["nodes"][0][key] = value
    with pytest.raises(ParseError):
        parse_scontrol_json(json.dumps(doc))


def test_unknown_state_token_is_kept() -> None:
    """A new 24.11 state word is kept as unrecognised: neither drained nor available."""
    doc = json.loads(SHOW_JSON)
    doc["nodes"][1]["state"] = ["IDLE", "DRAIN", "BRAND_NEW"]
    node = parse_scontrol_json(json.dumps(doc))[1]
    assert node.state.drain is DrainStatus.UNKNOWN
    assert node.state.unrecognised == ("BRAND_NEW",)
    assert not node.state.available

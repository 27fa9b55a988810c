"""The compare-and-set read (``sinfo -N -O``) on recorded 22.05 and 24.11 output, and fuzzed.

``sinfo_cas.txt`` was recorded by ``tests/data/slurm/record.py`` with the node states the
other recordings have. What matters: every decision slonkd takes on this partial read is the
one it takes on the full ``scontrol`` read, and whatever sinfo cannot print exactly is left
to that full read instead of being guessed.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slonkd.adapters.slurm.parsing import AmbiguousOutput
from slonkd.adapters.slurm.parsing_cas import CAS_FORMAT, parse_cas_read
from slonkd.adapters.slurm.parsing_show_node import parse_show_node
from slonkd.core.errors import ParseError
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import SlurmNode
from slonkd.core.slurm_plan import (
    HoldState,
    ReleaseState,
    Skip,
    Update,
    plan_hold,
    plan_release,
)
from tests.unit.recorded import RELEASES, recorded, recorded_source

RECORDED = {v: recorded(v, "sinfo_cas.txt") for v in RELEASES}
CAUSES = [Cause.parse(c) for c in ("pod-terminating", "k8s-cordoned", "health:gpu-xid-79")]


def _without_x2(text: str) -> str:
    """The recording without x2, whose reason holds a newline."""
    lines = text.split("\n")
    i = next(i for i, ln in enumerate(lines) if ln.startswith("x2|"))
    return "\n".join(lines[:i] + lines[i + 2 :])


@pytest.mark.parametrize("version", RELEASES)
def test_recorded_output_and_its_command(version: str) -> None:
    """x2's newline makes the whole output ambiguous; without it every node parses exactly."""
    assert recorded_source(version, "sinfo_cas.txt")["command"][-1] == f"--Format={CAS_FORMAT}"
    names = [f"n{i}" for i in range(1, 6)] + [f"x{i}" for i in range(1, 9)]
    with pytest.raises(AmbiguousOutput):
        parse_cas_read(RECORDED[version], names)
    read = parse_cas_read(_without_x2(RECORDED[version]), names)
    assert read.unsure == {"x2"}  # not shown: read exactly
    assert read.null_extra == {"n5"}  # slonkd holds it; extra printed as (null)
    n = read.nodes
    assert str(n["n2"].state) == "IDLE+DRAIN"
    assert n["n2"].reason == "slonkd:pod-terminating bye"
    assert n["n2"].extra == '{"slonkd":["pod-terminating"]}'
    assert n["n2"].reason_user == "root"
    assert n["n2"].reason_time is not None
    assert n["n1"].reason == ""
    assert n["n1"].reason_time is None
    assert n["n1"].extra == '{"rack":"r1"}'
    assert str(n["n5"].state) == "ALLOCATED+DRAIN+REBOOT_REQUESTED"
    assert n["n5"].extra == ""
    assert str(n["x1"].state) == "IDLE+FAIL"
    assert n["x3"].reason == "Kill task failed"
    assert n["x4"].extra == '{"slonkd":["health:gpu-xid-79","k8s-cordoned"]}'
    assert str(n["x5"].state) == "IDLE"
    assert n["x5"].extra == ""


@pytest.mark.parametrize("version", RELEASES)
def test_every_decision_matches_the_full_read(version: str) -> None:
    """Drain/down/fail/resume/undrain of every cause plan alike on both reads of each node."""
    lines = recorded(version, "scontrol_show_node.txt").splitlines()
    text = "\n".join(ln for ln in lines if "NodeName=x2 " not in ln) + "\n"
    full: dict[str, SlurmNode] = {n.name: n for n in parse_show_node(text)}
    read = parse_cas_read(_without_x2(RECORDED[version]), full)
    assert set(read.nodes) == set(full)
    for name, partial in read.nodes.items():
        exact = full[name]
        for cause in CAUSES:
            for how in HoldState:
                assert _same(plan_hold(partial, how, cause, "t"), plan_hold(exact, how, cause, "t"))
            for rel in ReleaseState:
                assert _same(plan_release(partial, rel, cause), plan_release(exact, rel, cause))


def _same(a: Update | Skip, b: Update | Skip) -> bool:
    """Same decision; a skip's detail (the state as printed) may differ, not its reason.

    The two files were recorded minutes apart: a node without slurmd may read UNKNOWN in one
    and IDLE in the other, and sinfo prints ALLOCATED where scontrol derives MIXED.
    """
    if isinstance(a, Skip) and isinstance(b, Skip):
        return (a.node, a.why) == (b.node, b.why)
    return a == b


LINE = "n1|idle+drain|2026-11-30T06:31:56|root|{extra}|{reason}\n"


@pytest.mark.parametrize(
    ("text", "sure"),
    [
        (LINE.format(extra="(null)", reason="admin maint"), True),
        (LINE.format(extra="(null)", reason="slonkd:k8s-cordoned x"), True),  # see null_extra
        (LINE.format(extra='{"a":1}', reason="slonkd:k8s-cordoned x"), True),
        (LINE.format(extra="e|f", reason="admin"), False),  # where does extra end?
        (LINE.format(extra="(null)", reason="a|b"), False),
        (LINE.format(extra="(null)", reason="none"), False),  # a reason "none", or none?
        ("n1|idle|Unknown|Unknown|(null)|none\n", True),
        ("n1|idle|Unknown|root|(null)|some reason\n", False),  # reason without its time
        ("n1|idle|Unknown|Unknown|(null)|none\n" * 2, True),  # two partitions, same node
        ("n1|idle|Unknown|Unknown|(null)|none\nn1|idle+drain|Unknown|Unknown|(null)|none\n", False),
        ("", False),  # not shown at all (in no partition)
    ],
)
def test_what_sinfo_cannot_say_exactly_is_left_to_the_exact_read(text: str, sure: bool) -> None:
    """Ambiguous free text, sinfo's placeholders and missing or doubled nodes are unsure."""
    read = parse_cas_read(text, ["n1"])
    assert (set(read.nodes), set(read.unsure)) == (({"n1"}, set()) if sure else (set(), {"n1"}))


def test_null_extra_of_slonkd_held_nodes_is_flagged() -> None:
    """Before adding a cause, the caller must know a slonkd-held node's extra exactly."""
    text = (
        LINE.format(extra="(null)", reason="slonkd:k8s-cordoned x")
        + LINE.replace("n1", "n2").format(extra="(null)", reason="admin")
        + LINE.replace("n1", "n3").format(extra='{"slonkd":["a","b"]}', reason="slonkd:a x")
    )
    read = parse_cas_read(text, ["n1", "n2", "n3"])
    assert read.null_extra == {"n1"}
    assert set(read.nodes) == {"n1", "n2", "n3"}
    resumed = "n1|idle|2026-11-30T06:31:56|root|(null)|slonkd:k8s-cordoned x\n"  # 24.11
    assert not parse_cas_read(resumed, ["n1"]).null_extra


def test_sinfo_placeholders_mean_empty() -> None:
    """``none`` without a time is no reason; ``(null)`` beside a foreign reason is no extra."""
    read = parse_cas_read(LINE.format(extra="(null)", reason="admin maint"), ["n1"])
    assert read.nodes["n1"].extra == ""
    idle = parse_cas_read("n1|idle|Unknown|Unknown|(null)|none\n", ["n1"]).nodes["n1"]
    assert (idle.reason, idle.reason_user, idle.reason_time) == ("", None, None)


@pytest.mark.parametrize(
    "text",
    [
        "n1|idle|Unknown|Unknown|(null)|none",  # cut off
        "n1|idle|Unknown|Unknown\n",
        "n1|IDLE|Unknown|Unknown|(null)|none\n",
        "n1|idle*|Unknown|Unknown|(null)|none\n",
        "n1|idle|yesterday|Unknown|(null)|none\n",
        "n;1|idle|Unknown|Unknown|(null)|none\n",
        "line2 of a reason\n",
    ],
)
def test_malformed_output_is_a_parse_error(text: str) -> None:
    """Lines of another shape make the whole read fail (the caller then reads exactly)."""
    with pytest.raises(ParseError):
        parse_cas_read(text, ["n1"])


def test_unrecognised_state_is_kept_not_guessed() -> None:
    """A flag slonkd does not know stays unrecognised: plans skip such a node."""
    read = parse_cas_read("n1|idle+drain+new_flag|Unknown|Unknown|(null)|none\n", ["n1"])
    assert read.nodes["n1"].state.unrecognised == ("new_flag",)


def test_nodes_not_asked_for_are_dropped() -> None:
    """Only the named nodes come back, even when sinfo shows more."""
    text = "n1|idle|Unknown|Unknown|(null)|none\nn2|idle|Unknown|Unknown|(null)|none\n"
    read = parse_cas_read(text, ["n2"])
    assert set(read.nodes) == {"n2"}
    assert not read.unsure


ALL = [f"n{i}" for i in range(1, 6)] + [f"x{i}" for i in range(1, 9)]
CLEAN = _without_x2(RECORDED["22.05"])
CLEAN_READ = parse_cas_read(CLEAN, ALL)


@given(data=st.text(max_size=2000) | st.binary(max_size=2000).map(lambda b: b.decode("latin-1")))
@settings(max_examples=300)
def test_garbage_gives_parse_error_or_a_read(data: str) -> None:
    """Random input never crashes the parser and yields no node that was not asked for."""
    with contextlib.suppress(ParseError):
        read = parse_cas_read(data, ALL)
        assert set(read.nodes) <= set(ALL)
        assert not set(read.nodes) & read.unsure


@given(cut=st.integers(min_value=1, max_value=len(CLEAN) - 1))
def test_truncated_output_never_gives_a_wrong_node(cut: int) -> None:
    """A cut-off read raises, or every node it shows equals the full read's."""
    try:
        read = parse_cas_read(CLEAN[:cut], ALL)
    except ParseError:
        return
    for name, node in read.nodes.items():
        assert node == CLEAN_READ.nodes[name]


@given(
    pos=st.integers(min_value=0, max_value=len(CLEAN) - 1),
    junk=st.text(alphabet="|+\n{}\"':_ a-z0-9()", min_size=1, max_size=40),
)
@settings(max_examples=400)
def test_hostile_insertions_never_claim_a_foreign_node(pos: int, junk: str) -> None:
    """Junk spliced in never turns a node held by someone else into one slonkd holds."""
    try:
        read = parse_cas_read(CLEAN[:pos] + junk + CLEAN[pos:], ALL)
    except ParseError:
        return
    for name, node in read.nodes.items():
        if node.reason.startswith("slonkd:"):
            before = CLEAN_READ.nodes.get(name)
            ours = before is not None and before.reason.startswith("slonkd:")
            assert ours or "slonkd:" in junk

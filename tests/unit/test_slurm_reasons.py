"""Reason grammar, ownership, suffix parsing, sanitising and the cause set in ``extra``."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.core.errors import ParseError
from slonkd.core.reasons import (
    MAX_REASON_CHARS,
    Cause,
    ReasonOwner,
    decode_causes,
    encode_causes,
    format_reason,
    highest,
    parse_reason,
    reason_owner,
    sanitise_text,
    split_text_suffix,
)

OWNERS = [
    ("", ReasonOwner.NONE),
    ("   ", ReasonOwner.NONE),
    ("slonkd:pod-terminating", ReasonOwner.SLONKD),
    ("slonkd:health:gpu-xid-79 GPU fell off the bus", ReasonOwner.SLONKD),
    ("slonkd:k8s-cordoned node cordoned", ReasonOwner.SLONKD),
    ("slonkd: spaced", ReasonOwner.FOREIGN),
    ("slonkd:BAD_CAUSE x", ReasonOwner.FOREIGN),
    ("slonkd:", ReasonOwner.FOREIGN),
    ("SLONKD:pod-terminating", ReasonOwner.FOREIGN),
    ("admin maint", ReasonOwner.FOREIGN),
    ("replacing GPU, ticket 42", ReasonOwner.FOREIGN),
    ("Not responding", ReasonOwner.SLURM),
    ("Kill task failed", ReasonOwner.SLURM),
    ("Prolog error", ReasonOwner.SLURM),
    ("Epilog error", ReasonOwner.SLURM),
    ("batch job complete failure", ReasonOwner.SLURM),
    ("reboot timed out", ReasonOwner.SLURM),
    ("Node unexpectedly rebooted boot_time=1", ReasonOwner.SLURM),
    ("Low RealMemory (reported:100 < 100.00% of configured:1000)", ReasonOwner.SLURM),
]


@pytest.mark.parametrize(("text", "owner"), OWNERS)
def test_reason_owner(text: str, owner: ReasonOwner) -> None:
    """Only slonkd's exact grammar is slonkd's; SLURM's own reasons are SLURM's; rest foreign."""
    assert reason_owner(text) is owner


def test_parse_reason_names_cause_and_message() -> None:
    """A slonkd reason yields its cause (name and detail) and the free text."""
    reason = parse_reason("slonkd:health:gpu-xid-79 GPU fell off the bus")
    assert reason.cause == Cause(name="health", detail="gpu-xid-79")
    assert reason.message == "GPU fell off the bus"


def test_split_text_suffix() -> None:
    """The ``[user@time]`` suffix of scontrol's text format is split off and parsed."""
    text, user, when = split_text_suffix("admin maint [root@2026-11-30T03:54:32]")
    assert (text, user, when) == ("admin maint", "root", datetime(2026, 11, 30, 3, 54, 32))
    assert split_text_suffix("no suffix") == ("no suffix", None, None)
    assert split_text_suffix("x [slurm@Unknown]") == ("x", "slurm", None)
    assert split_text_suffix("x [a b@2026-11-30T03:54:32]")[1] is None


HOSTILE = [
    "line1\nline2",
    "a\r\nState=IDLE",
    "quote \" and ' and `",
    "tab\there\x01ctl\x7f",
    "fake [root@2026-01-01T00:00:00]",
    "x" * 10_000,
    "uni\u2028code\u0000nul",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_sanitise_text_removes_what_breaks_slurm_output(text: str) -> None:
    """Sanitised text has no control characters, double quotes, ``=`` or brackets; bounded."""
    clean = sanitise_text(text)
    assert len(clean) <= MAX_REASON_CHARS
    assert all(ch.isprintable() for ch in clean)
    assert not set(clean) & set('"=[]`\\\n\r\t')
    assert clean == clean.strip()


@given(st.text(max_size=500))
def test_format_reason_is_always_slonkds_and_bounded(text: str) -> None:
    """Whatever the text, slonkd's reason parses back as slonkd's own cause, within bounds."""
    cause = Cause(name="health", detail="gpu-xid-79")
    reason = format_reason(cause, text)
    assert len(reason) <= MAX_REASON_CHARS
    parsed = parse_reason(reason)
    assert parsed.owner is ReasonOwner.SLONKD
    assert parsed.cause == cause


def test_priority_ladder_picks_the_highest_cause() -> None:
    """SLURM failure > health > K8s maintenance > pod lifecycle > anything else."""
    causes = frozenset(
        Cause.parse(c) for c in ("pod-terminating", "k8s-cordoned", "health:xid", "zzz")
    )
    assert highest(causes) == Cause(name="health", detail="xid")
    assert highest(causes | {Cause.parse("slurm-failure:not-responding")}).name == "slurm-failure"
    assert highest(frozenset({Cause.parse("zzz"), Cause.parse("pod-absent")})).name == "pod-absent"


def test_causes_round_trip_through_extra_and_keep_other_keys() -> None:
    """The cause set lives under ``slonkd`` in extra's JSON; other keys survive."""
    causes = frozenset({Cause.parse("health:xid-79"), Cause.parse("pod-terminating")})
    extra = encode_causes('{"rack":"r1"}', causes)
    assert json.loads(extra) == {"rack": "r1", "slonkd": ["health:xid-79", "pod-terminating"]}
    assert decode_causes(extra) == causes
    assert encode_causes(extra, frozenset()) == '{"rack":"r1"}'
    assert encode_causes('{"slonkd":["x"]}', frozenset()) == ""
    assert decode_causes("") == frozenset()
    assert decode_causes('{"rack":"r1"}') == frozenset()


def test_extra_with_foreign_text_is_never_overwritten() -> None:
    """Extra that is not a JSON object belongs to someone else: encoding refuses."""
    with pytest.raises(ParseError):
        encode_causes("rack r1", frozenset({Cause.parse("pod-terminating")}))
    assert decode_causes("rack r1") == frozenset()


@pytest.mark.parametrize("extra", ['{"slonkd":"x"}', '{"slonkd":[1]}', '{"slonkd":["BAD CAUSE"]}'])
def test_tampered_cause_set_is_a_parse_error(extra: str) -> None:
    """A ``slonkd`` key that is not a list of causes is refused, not guessed."""
    with pytest.raises(ParseError):
        decode_causes(extra)

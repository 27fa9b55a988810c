"""The state ConfigMap's encoding: a state reads back equal; an edit or corruption, StateCorrupt."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slonkd.core.coordinator_state import (
    Attempts,
    CoordinatorState,
    StateCorrupt,
    salvage_token,
)
from slonkd.core.errors import ParseError

KEYS = (
    "schema",
    "nodesOut",
    "breakerOpen",
    "breakerReason",
    "breakerOpenedAt",
    "remediation",
    "remediationAttempts",
    "handled",
    "paused",
    "pausedBy",
    "pausedReason",
    "pausedAt",
    "fencingToken",
)

STATE = CoordinatorState(
    nodes_out=frozenset({"b", "a"}),
    breaker_open=True,
    breaker_reason="many NotReady",
    breaker_opened_at=1700000000.25,
    remediation={"gpu-1": Attempts(attempts=2, last_at=1700000001.5)},
    handled={"w-3": "fail|Kill task failed"},
    paused=True,
    paused_by="alice",
    paused_reason="firmware = rollout\nnext line",
    paused_at=1700000002.0,
    fencing_token=7,
)
"""Every field set, the texts with the separators an encoding could trip on."""
GOOD = STATE.to_data()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON value, NaN and infinities included (json.dumps writes them, json.loads reads them)."""

numbers_as_text = st.sampled_from(
    ["1e400", "-1e400", "nan", "NaN", "inf", "-Infinity", "1_0", " 3 ", "0x10", "", "9" * 5000]
)
field_text = st.one_of(
    json_values.map(json.dumps),
    numbers_as_text,
    st.text(max_size=30),
    st.sampled_from(["[" * 5000, '{"a":' * 3000, "true", "false", "True", "{}", "[]"]),
)


def _parse_or_corrupt(data: Any) -> CoordinatorState | None:
    """Parse; the only error allowed is StateCorrupt (a ParseError). A parse must round-trip."""
    try:
        state = CoordinatorState.from_data(data)
    except StateCorrupt:
        return None
    assert CoordinatorState.from_data(state.to_data()) == state  # no NaN, no half-read values
    for value in (state.breaker_opened_at, state.paused_at):
        assert math.isfinite(value)
    for attempts in state.remediation.values():
        assert math.isfinite(attempts.last_at)
        assert attempts.attempts >= 0
    return state


def test_a_state_round_trips_through_configmap_data() -> None:
    """State written as ConfigMap data reads back equal; empty data is the initial state."""
    assert CoordinatorState.from_data(STATE.to_data()) == STATE
    assert CoordinatorState.from_data(None) == CoordinatorState()
    with pytest.raises(ParseError):
        CoordinatorState.from_data({"schema": "1", "nodesOut": "{not json"})
    with pytest.raises(ParseError):
        CoordinatorState.from_data({"schema": "2", "remediation": '{"n": {"attempts": "x"}}'})
    with pytest.raises(ParseError):
        CoordinatorState.from_data({"schema": "9"})
    # schema 1 (attempt counts only) still reads
    old = CoordinatorState.from_data({"schema": "1", "remediationAttempts": '{"gpu-1": 3}'})
    assert old.remediation_attempts == {"gpu-1": 3}


@settings(max_examples=400)
@given(edits=st.dictionaries(st.sampled_from(KEYS), field_text, max_size=6))
def test_any_edit_of_a_good_state_parses_or_raises_state_corrupt(edits: dict[str, str]) -> None:
    """A good state with any fields replaced by any text: a sane state or StateCorrupt."""
    _parse_or_corrupt({**GOOD, **edits})


@settings(max_examples=300)
@given(
    data=st.dictionaries(
        st.one_of(st.sampled_from(KEYS), st.text(max_size=8)),
        st.one_of(field_text, st.integers(), st.none(), st.lists(st.text(), max_size=2)),
        max_size=8,
    )
)
def test_any_mapping_parses_or_raises_state_corrupt(data: dict[str, Any]) -> None:
    """Any mapping at all (values not even strings): a sane state or StateCorrupt."""
    _parse_or_corrupt(data)


@pytest.mark.parametrize(
    "edit",
    [
        {"remediation": '{"n1": {}}'},
        {"remediation": '{"n1": {"attempts": 1e400, "lastAt": 0}}'},
        {"remediation": '{"n1": {"attempts": 1, "lastAt": NaN}}'},
        {"remediation": '{"n1": {"attempts": -1, "lastAt": 0}}'},
        {"remediation": '{"n1": {"attempts": true, "lastAt": 0}}'},
        {"remediation": '{"n1": 3}'},
        {"remediation": "[" * 5000},
        {"breakerOpenedAt": "1e400"},
        {"pausedAt": "nan"},
        {"fencingToken": "1e400"},
        {"nodesOut": '[{"a": 1}]'},
        {"handled": '{"w-1": [1]}'},
        {"breakerOpen": "yes"},
        {"paused": "True"},
        {"schema": "1", "remediation": "", "remediationAttempts": '{"k": 1e400}'},
    ],
)
def test_known_corruptions_are_state_corrupt(edit: dict[str, str]) -> None:
    """The corruptions seen in the review (and their kin) are a typed StateCorrupt, a ParseError."""
    with pytest.raises(StateCorrupt) as caught:
        CoordinatorState.from_data({**GOOD, **edit})
    assert isinstance(caught.value, ParseError)


def test_the_token_is_salvaged_from_a_corrupt_state() -> None:
    """The last writer's token is still read when the rest is broken (fencing stays monotonic)."""
    assert salvage_token({**GOOD, "remediation": '{"n1": {}}'}) == 7
    assert salvage_token({**GOOD, "fencingToken": "1e400"}) == -1
    assert salvage_token({"fencingToken": "x"}) == -1
    assert salvage_token(None) == -1
    assert salvage_token({}) == -1
    assert salvage_token({"fencingToken": "12"}) == 12


@pytest.mark.parametrize("token", [2**31 - 1, 2**31, 10**30])
def test_a_token_no_lease_can_exceed_is_corrupt_and_not_salvaged(token: int) -> None:
    """Issue 37 item 8a: a token at or above 2^31-1 is corrupt state, and no salvaged floor.

    The token is the Lease's ``leaseTransitions``, an int32: no new term's token can ever be
    above 2^31-1, so a state claiming it can only be corruption. Read as a token, every acquire
    asked the apiserver for a ``leaseTransitions`` above the int32 range: no leader ever.
    ``slonkd state reset --yes-discard-state`` must not keep it either.
    """
    with pytest.raises(StateCorrupt, match="fencingToken"):
        CoordinatorState.from_data({**GOOD, "fencingToken": str(token)})
    assert salvage_token({**GOOD, "fencingToken": str(token)}) == -1


def test_the_highest_token_a_successor_can_still_exceed_is_read() -> None:
    """2^31-2 is a state a leader may have written: the next term's token, 2^31-1, is above it."""
    highest = {**GOOD, "fencingToken": str(2**31 - 2)}
    assert CoordinatorState.from_data(highest).fencing_token == 2**31 - 2
    assert salvage_token(highest) == 2**31 - 2

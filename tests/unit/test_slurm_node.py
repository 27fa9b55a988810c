"""Node model: drained vs draining derived from base state and flags; unknown stays unknown."""

from __future__ import annotations

import pytest

from slonkd.core.slurm_node import BaseState, DrainStatus, NodeFlag, NodeState

CASES = [
    # base, flags, drain status, available
    ("IDLE", [], DrainStatus.NONE, True),
    ("IDLE", ["DRAIN"], DrainStatus.DRAINED, False),
    ("MIXED", ["DRAIN"], DrainStatus.DRAINING, False),
    ("ALLOCATED", ["DRAIN"], DrainStatus.DRAINING, False),
    ("IDLE", ["DRAIN", "COMPLETING"], DrainStatus.DRAINING, False),
    ("DOWN", ["DRAIN", "REBOOT_ISSUED"], DrainStatus.DRAINED, False),
    ("ALLOCATED", ["DRAIN", "REBOOT_REQUESTED"], DrainStatus.DRAINING, False),
    ("UNKNOWN", ["DRAIN"], DrainStatus.DRAINED, False),
    ("DOWN", ["NOT_RESPONDING"], DrainStatus.NONE, False),
    ("IDLE", ["FAIL"], DrainStatus.NONE, False),
    ("IDLE", ["NOT_RESPONDING"], DrainStatus.NONE, False),
    ("MIXED", [], DrainStatus.NONE, True),
    ("ALLOCATED", ["MAINT"], DrainStatus.NONE, False),
    ("IDLE", ["POWERED_DOWN"], DrainStatus.NONE, False),
    ("UNKNOWN", [], DrainStatus.NONE, False),
    ("FUTURE", [], DrainStatus.NONE, False),
    ("IDLE", ["DRAIN", "SOMETHING_NEW"], DrainStatus.UNKNOWN, False),
    ("SLEEPING", ["DRAIN"], DrainStatus.UNKNOWN, False),
    ("SLEEPING", [], DrainStatus.UNKNOWN, False),
]


@pytest.mark.parametrize(("base", "flags", "drain", "available"), CASES)
def test_drain_status_and_availability(
    base: str, flags: list[str], drain: DrainStatus, available: bool
) -> None:
    """DRAIN on a resting node is drained, on a busy one draining; unknown is neither."""
    state = NodeState.from_tokens(base, flags)
    assert state.drain is drain
    assert state.available is available
    assert state.out_of_service is not available


def test_unknown_tokens_are_kept_and_reported() -> None:
    """Unrecognised base and flags are kept verbatim, never dropped or mapped."""
    state = NodeState.from_tokens("sleeping", ["DRAIN", "NEW_FLAG"])
    assert state.base is BaseState.UNRECOGNISED
    assert state.unrecognised == ("sleeping", "NEW_FLAG")
    assert NodeFlag.DRAIN in state.flags
    assert not state.fully_recognised
    assert "NEW_FLAG" in str(state)


def test_tokens_are_case_insensitive_and_aliases_resolve() -> None:
    """sinfo --json prints the base in lower case, scontrol upper case; MAINT is MAINTENANCE."""
    assert NodeState.from_tokens("idle", ["drain"]) == NodeState.from_tokens("IDLE", ["DRAIN"])
    assert NodeFlag.MAINTENANCE in NodeState.from_tokens("IDLE", ["MAINT"]).flags


def test_down_and_failed_are_reported() -> None:
    """DOWN base and FAIL flag are visible as such."""
    assert NodeState.from_tokens("DOWN", []).down
    assert NodeState.from_tokens("IDLE", ["FAIL"]).failed
    assert not NodeState.from_tokens("IDLE", []).down

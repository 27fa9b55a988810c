"""Node model: drained vs draining derived from base state and flags; unknown stays unknown."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slonkd.core.kube_objects import (
    TAINTS_BY_ANNOTATION,
    KubeNodeName,
    Node,
    NodeCondition,
    Taint,
    TaintEffect,
    encode_taint_record,
)
from slonkd.core.slurm_node import (
    BaseState,
    DrainStatus,
    NodeFlag,
    NodeName,
    NodeState,
    SlurmNode,
)

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


def test_derived_answers_follow_a_replace_and_do_not_count_in_equality() -> None:
    """The answers derived once at construction (issue 17) are derived again by replace().

    A pass asks each node ``held``/``drain``/``live_reason`` many times, so they are computed
    when the node is read; a node rebuilt with ``dataclasses.replace`` (the admission's
    "as if released" view) must answer for its new state, not its old one.
    """
    drained = SlurmNode(
        name=NodeName("w-1"),
        state=NodeState.from_tokens("IDLE", ["DRAIN"]),
        reason="slonkd:k8s-cordoned maint",
    )
    assert drained.held
    assert drained.live_reason == "slonkd:k8s-cordoned maint"
    released = replace(drained, state=replace(drained.state, flags=frozenset()))
    assert released.state.drain is DrainStatus.NONE
    assert released.state.available
    assert not released.held
    assert released.live_reason == ""
    assert replace(released, state=NodeState.from_tokens("DOWN", [])).held
    assert NodeState.from_tokens("IDLE", ["DRAIN"]) == drained.state
    assert "held" not in repr(drained)
    assert "live_reason" not in repr(drained)


def test_a_kube_nodes_derived_marks_follow_a_replace() -> None:
    """``our_taints``, ``ready`` and ``slurm_healthy`` are derived again by replace()."""
    taint = Taint(key="slonk.example/slurm-failure", effect=TaintEffect.NO_SCHEDULE)
    node = Node(
        name=KubeNodeName("kn-1"),
        uid="u",
        resource_version="1",
        unschedulable=False,
        taints=(taint,),
        annotations={TAINTS_BY_ANNOTATION: encode_taint_record([taint.identity]) or ""},
        conditions=(NodeCondition(type="Ready", status="True"),),
    )
    assert node.our_taints == (taint,)
    assert node.ready is True
    assert node.slurm_healthy is None
    assert replace(node, taints=()).our_taints == ()
    assert replace(node, annotations={}).our_taints == ()
    assert replace(node, conditions=()).ready is None

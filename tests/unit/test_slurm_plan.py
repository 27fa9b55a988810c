"""Compare-and-set decisions: slonkd never steals a foreign hold and never lifts one."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.core.reasons import Cause, ReasonOwner, reason_owner
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.core.slurm_plan import (
    HoldState,
    ReleaseState,
    Skip,
    SkipReason,
    Update,
    plan_hold,
    plan_reboot,
    plan_release,
    recorded_causes,
)

POD = Cause.parse("pod-terminating")
HEALTH = Cause.parse("health:gpu-xid-79")


def node(state: str, reason: str = "", extra: str = "") -> SlurmNode:
    """A node in ``state`` (``BASE+FLAG...``) with a reason and extra."""
    base, *flags = state.split("+")
    return SlurmNode(
        name=NodeName("n1"),
        state=NodeState.from_tokens(base, flags),
        reason=reason,
        extra=extra,
    )


HOLD_SKIPS = [
    (node("IDLE+DRAIN", "admin maint"), SkipReason.FOREIGN_REASON),
    (node("MIXED+DRAIN", "admin maint"), SkipReason.FOREIGN_REASON),
    (node("DOWN", "down it"), SkipReason.FOREIGN_REASON),
    (node("IDLE+FAIL", "fail it"), SkipReason.FOREIGN_REASON),
    (node("DOWN+NOT_RESPONDING", "Not responding"), SkipReason.SLURM_REASON),
    (node("IDLE+DRAIN", "Kill task failed"), SkipReason.SLURM_REASON),
    (node("DOWN"), SkipReason.FOREIGN_STATE),
    (node("IDLE+DRAIN+NEW_FLAG", "slonkd:pod-terminating"), SkipReason.UNRECOGNISED_STATE),
    (node("IDLE+DRAIN", "slonkd:health:x", "rack r1"), SkipReason.FOREIGN_EXTRA),
    (node("IDLE+DRAIN", "slonkd:pod-terminating x"), SkipReason.ALREADY_HELD),
]


@pytest.mark.parametrize(("current", "why"), HOLD_SKIPS)
def test_drain_skips_what_it_must_not_touch(current: SlurmNode, why: SkipReason) -> None:
    """A drain leaves foreign, SLURM's, unknown and already-held nodes alone, saying why."""
    result = plan_hold(current, HoldState.DRAIN, POD, "bye")
    assert isinstance(result, Skip)
    assert result.why is why


def test_drain_of_an_idle_node_writes_only_the_reason() -> None:
    """A free node is drained with slonkd's reason; one cause needs nothing in extra."""
    for extra in ("", '{"rack":"r1"}', "rack r1"):
        result = plan_hold(node("IDLE", extra=extra), HoldState.DRAIN, POD, "bye")
        assert isinstance(result, Update)
        assert (result.state, result.reason, result.extra) == (
            "drain",
            "slonkd:pod-terminating bye",
            None,
        )


def test_stale_cause_set_is_cleared_by_a_new_drain() -> None:
    """A cause set left in extra from an old hold is replaced, never inherited."""
    stale = node("IDLE", extra='{"rack":"r1","slonkd":["health:x","k8s-cordoned"]}')
    result = plan_hold(stale, HoldState.DRAIN, POD)
    assert isinstance(result, Update)
    assert result.extra == '{"rack":"r1"}'


def test_second_cause_is_added_and_the_higher_one_shown() -> None:
    """A second, higher cause on a slonkd-held node joins the set and takes the reason."""
    held = node("IDLE+DRAIN", "slonkd:pod-terminating bye", '{"slonkd":["pod-terminating"]}')
    result = plan_hold(held, HoldState.DRAIN, HEALTH, "xid 79")
    assert isinstance(result, Update)
    assert result.reason == "slonkd:health:gpu-xid-79 xid 79"
    assert json.loads(result.extra or "")["slonkd"] == ["health:gpu-xid-79", "pod-terminating"]


def test_lower_cause_keeps_the_shown_reason() -> None:
    """A lower cause joins the set without replacing the reason slonkd shows."""
    held = node("IDLE+DRAIN", "slonkd:health:gpu-xid-79 xid", '{"slonkd":["health:gpu-xid-79"]}')
    result = plan_hold(held, HoldState.DRAIN, POD, "bye")
    assert isinstance(result, Update)
    assert result.reason == "slonkd:health:gpu-xid-79 xid"
    assert len(json.loads(result.extra or "")["slonkd"]) == 2


def test_drain_of_a_slonkd_down_node_keeps_it_down() -> None:
    """Adding a drain cause to a node slonkd holds DOWN never weakens it to a drain."""
    held = node("DOWN", "slonkd:pod-terminating", '{"slonkd":["pod-terminating"]}')
    result = plan_hold(held, HoldState.DRAIN, HEALTH)
    assert isinstance(result, Update)
    assert result.state == "down"


RELEASE_SKIPS = [
    (node("IDLE+DRAIN", "admin maint"), SkipReason.FOREIGN_REASON),
    (node("DOWN+NOT_RESPONDING", "Not responding"), SkipReason.SLURM_REASON),
    (node("IDLE"), SkipReason.NOT_HELD),
    (node("IDLE+DRAIN"), SkipReason.NOT_HELD),
    (node("IDLE+DRAIN", "slonkd:pod-terminating", '{"slonkd":5}'), SkipReason.FOREIGN_EXTRA),
    (node("IDLE+DRAIN", "slonkd:health:x", '{"slonkd":["health:x"]}'), SkipReason.OTHER_CAUSES),
    (node("SLEEPING+DRAIN", "slonkd:pod-terminating"), SkipReason.UNRECOGNISED_STATE),
]


@pytest.mark.parametrize(("current", "why"), RELEASE_SKIPS)
def test_resume_refuses_what_slonkd_does_not_hold(current: SlurmNode, why: SkipReason) -> None:
    """Resume refuses foreign/SLURM reasons, unheld nodes, tampered sets and other causes."""
    result = plan_release(current, ReleaseState.RESUME, POD)
    assert isinstance(result, Skip)
    assert result.why is why


def test_resume_lifts_the_last_cause() -> None:
    """The last slonkd cause released resumes the node and clears slonkd's key in extra."""
    held = node(
        "IDLE+DRAIN", "slonkd:pod-terminating", '{"rack":"r1","slonkd":["pod-terminating"]}'
    )
    result = plan_release(held, ReleaseState.RESUME, POD)
    assert isinstance(result, Update)
    assert (result.state, result.reason, result.extra) == ("resume", None, '{"rack":"r1"}')


def test_release_with_other_causes_keeps_the_node_held() -> None:
    """Releasing one of two causes rewrites reason and set but keeps the drain."""
    held = node(
        "MIXED+DRAIN",
        "slonkd:health:gpu-xid-79 xid",
        '{"slonkd":["health:gpu-xid-79","pod-terminating"]}',
    )
    result = plan_release(held, ReleaseState.RESUME, HEALTH)
    assert isinstance(result, Update)
    assert result.state == "drain"
    assert result.reason is not None
    assert result.reason.startswith("slonkd:pod-terminating")
    assert result.still_held_by == "pod-terminating"
    assert result.extra == ""  # one cause left: the reason carries it


def test_undrain_of_a_node_without_drain_is_skipped() -> None:
    """Undrain only removes DRAIN: a slonkd-DOWN node without DRAIN is not undrained."""
    held = node("DOWN", "slonkd:pod-terminating")
    result = plan_release(held, ReleaseState.UNDRAIN, POD)
    assert isinstance(result, Skip)
    assert result.why is SkipReason.NOT_HELD


def test_leftover_reason_on_a_resumed_node_is_stale() -> None:
    """24.11 keeps the reason after a resume: on a free node it neither blocks nor claims."""
    foreign_left = node("IDLE", "admin maint")
    drained = plan_hold(foreign_left, HoldState.DRAIN, POD)
    assert isinstance(drained, Update)
    assert drained.reason == "slonkd:pod-terminating"
    ours_left = node("IDLE", "slonkd:pod-terminating", '{"slonkd":["pod-terminating"]}')
    again = plan_hold(ours_left, HoldState.DRAIN, POD)
    assert isinstance(again, Update)
    assert again.state == "drain"
    released = plan_release(ours_left, ReleaseState.RESUME, POD)
    assert isinstance(released, Skip)
    assert released.why is SkipReason.NOT_HELD


def test_reboot_of_a_node_slonkd_holds_is_planned_with_its_reason() -> None:
    """The ladder's normal path: the node is drained by slonkd already; the reboot still goes.

    A drain plan answers "already held" for it, which is how ``scontrol reboot`` was never
    sent (issue 15 item 9); the reboot keeps the node's slonkd reason as it is.
    """
    held = node(
        "IDLE+DRAIN",
        "slonkd:health:gpu-xid-79 xid",
        '{"slonkd":["health:gpu-xid-79","pod-terminating"]}',
    )
    assert isinstance(plan_hold(held, HoldState.DRAIN, HEALTH), Skip)
    result = plan_reboot(held)
    assert isinstance(result, Update)
    assert (result.state, result.reason, result.extra) == (
        None,
        "slonkd:health:gpu-xid-79 xid",
        None,
    )
    busy = plan_reboot(node("MIXED+DRAIN", "slonkd:health:gpu-xid-79"))
    assert isinstance(busy, Update)  # ASAP: SLURM reboots it once its jobs are done


@pytest.mark.parametrize("state", ["MIXED+DRAIN+REBOOT_REQUESTED", "DOWN+DRAIN+REBOOT_ISSUED"])
@pytest.mark.parametrize("how", list(ReleaseState))
def test_release_never_cancels_a_pending_reboot(state: str, how: ReleaseState) -> None:
    """A node whose reboot is requested or issued keeps slonkd's hold until it completes.

    A resume clears SLURM's REBOOT_REQUESTED (the reboot would never happen); the reboot
    clears slonkd's reason itself when it completes.
    """
    for current in (
        node(state, "slonkd:health:gpu-xid-79 by slonkd"),
        node(
            state, "slonkd:health:gpu-xid-79", '{"slonkd":["health:gpu-xid-79","pod-terminating"]}'
        ),
    ):
        result = plan_release(current, how, HEALTH)
        assert isinstance(result, Skip), result
        assert result.why is SkipReason.REBOOT_PENDING


REBOOT_SKIPS = [
    (node("IDLE+DRAIN+REBOOT_REQUESTED", "slonkd:health:gpu-xid-79"), SkipReason.REBOOT_PENDING),
    (node("DOWN+DRAIN+REBOOT_ISSUED", "slonkd:health:gpu-xid-79"), SkipReason.REBOOT_PENDING),
    (node("IDLE+DRAIN", "admin maint"), SkipReason.FOREIGN_REASON),
    (node("IDLE+DRAIN", "Kill task failed"), SkipReason.SLURM_REASON),
    (node("DOWN"), SkipReason.FOREIGN_STATE),
    (node("IDLE"), SkipReason.NOT_HELD),
    (node("IDLE", "slonkd:health:gpu-xid-79"), SkipReason.NOT_HELD),
    (node("IDLE+DRAIN+NEW_FLAG", "slonkd:health:gpu-xid-79"), SkipReason.UNRECOGNISED_STATE),
]


@pytest.mark.parametrize(("current", "why"), REBOOT_SKIPS)
def test_reboot_skips_pending_foreign_and_unheld_nodes(current: SlurmNode, why: SkipReason) -> None:
    """A reboot is asked once (none while one is pending), never of a node slonkd does not hold.

    The adapter drains first (which records the cause); a node that is not slonkd's to
    hold after that, or holds a reboot already, gets no second ``scontrol reboot``.
    """
    result = plan_reboot(current)
    assert isinstance(result, Skip)
    assert result.why is why


BASES = st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "DOWN", "UNKNOWN", "FUTURE", "WEIRD"])
FLAGS = st.lists(
    st.sampled_from(["DRAIN", "FAIL", "NOT_RESPONDING", "COMPLETING", "REBOOT_REQUESTED", "NEW"]),
    max_size=3,
)
REASONS = st.sampled_from(
    [
        "",
        "admin maint",
        "Not responding",
        "slonkd:pod-terminating",
        "slonkd:health:gpu-xid-79 x",
        "slonkd:k8s-cordoned",
        "slonkd:BAD",
    ]
)
EXTRAS = st.sampled_from(
    [
        "",
        "rack r1",
        '{"rack":"r1"}',
        '{"slonkd":["pod-terminating","health:gpu-xid-79"]}',
        '{"slonkd":["k8s-cordoned"]}',
        '{"slonkd":5}',
    ]
)
CAUSES = st.sampled_from([POD, HEALTH, Cause.parse("k8s-cordoned")])


@given(base=BASES, flags=FLAGS, reason=REASONS, extra=EXTRAS, cause=CAUSES)
def test_no_plan_ever_steals_or_lifts_a_foreign_hold(
    base: str, flags: list[str], reason: str, extra: str, cause: Cause
) -> None:
    """No plan ever steals a foreign hold or lifts one that is not slonkd's alone.

    For any state, reason and extra: a held node under a reason that is not slonkd's is
    never written to, and a resume only happens when slonkd's reason holds the node and no
    other slonkd cause remains.
    """
    current = SlurmNode(
        name=NodeName("n1"), state=NodeState.from_tokens(base, flags), reason=reason, extra=extra
    )
    owner = reason_owner(current.live_reason)
    for how in HoldState:
        plan = plan_hold(current, how, cause)
        if isinstance(plan, Update):
            assert current.state.fully_recognised
            assert owner in {ReasonOwner.NONE, ReasonOwner.SLONKD}
            assert owner is ReasonOwner.SLONKD or not current.held
            assert plan.reason is not None
            assert reason_owner(plan.reason) is ReasonOwner.SLONKD
    for release in ReleaseState:
        plan = plan_release(current, release, cause)
        if isinstance(plan, Update):
            assert current.held
            assert owner is ReasonOwner.SLONKD
            if plan.state in {"resume", "undrain"}:
                assert recorded_causes(current) <= {cause}
            assert "REBOOT_REQUESTED" not in flags  # a release never cancels a reboot
    reboot = plan_reboot(current)
    if isinstance(reboot, Update):
        assert current.held
        assert owner is ReasonOwner.SLONKD
        assert reboot.reason == current.reason

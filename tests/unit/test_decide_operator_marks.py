"""An operator's marks on a K8s node are never undone: only taints slonkd added go."""

from __future__ import annotations

from dataclasses import replace

from slonkd.core.decide import decide
from slonkd.core.kube_actions import FAILURE_TAINT, MANUAL_TAINT, REBOOT_TAINT
from slonkd.core.kube_objects import (
    TAINTS_BY_ANNOTATION,
    Node,
    Taint,
    TaintEffect,
    decode_taint_record,
    encode_taint_record,
)
from slonkd.core.plan import Kind, Remediations
from tests.unit.coordinator_fakes import POLICY, knode, slurm, view

OPERATORS = (
    Taint(key=MANUAL_TAINT, effect=TaintEffect.NO_SCHEDULE, value="psu-swap"),
    Taint(key=FAILURE_TAINT, effect=TaintEffect.NO_SCHEDULE, value="ops"),
)


def operator_marked(*, healthy: bool | None = None) -> Node:
    """K8s node kn-0 with ``slonk.dev/`` taints a person put there (slonkd recorded none)."""
    return knode(taints=OPERATORS, added=(), healthy=healthy)


def test_an_operators_slonk_taints_stay_on_a_healthy_node() -> None:
    """Healthy node, ``slonk.dev/manual-repair`` and ``slonk.dev/unhealthy`` by hand: kept."""
    plan = decide(view(kube_node=operator_marked(healthy=False)), POLICY)
    assert [a for a in plan.actions if a.kind is Kind.UNTAINT] == []
    assert any(MANUAL_TAINT in n and "not added by slonkd" in n for n in plan.notes), plan.notes
    # slonkd's own condition is still undone
    assert [(a.kind, a.key) for a in plan.actions] == [(Kind.SET_CONDITION, "True")]


def test_an_operators_failure_taint_is_not_taken_over_on_failure() -> None:
    """A failing node already carrying someone's ``slonk.dev/unhealthy``: no second taint."""
    plan = decide(
        view(slurm=slurm("IDLE+FAIL", "Kill task failed"), kube_node=operator_marked()), POLICY
    )
    assert Kind.CORDON in {a.kind for a in plan.actions}
    assert Kind.TAINT not in {a.kind for a in plan.actions}
    healed = decide(view(kube_node=operator_marked(healthy=False)), POLICY)
    assert Kind.UNTAINT not in {a.kind for a in healed.actions}


def test_the_taint_record_round_trips_and_unreadable_means_nothing_is_ours() -> None:
    """slonkd's record reads back what it wrote; anything unreadable makes no taint slonkd's."""
    ours = Taint(key=REBOOT_TAINT, effect=TaintEffect.NO_SCHEDULE, value="slurm-failure")
    text = encode_taint_record([ours.identity])
    assert text is not None
    assert decode_taint_record(text) == {ours.identity}
    assert encode_taint_record([]) is None
    for bad in ("", "{", '{"key": "x"}', '[1, {"key": 2, "effect": "NoSchedule"}]', "null"):
        assert decode_taint_record(bad) == frozenset(), bad
    marked = replace(operator_marked(), taints=(*OPERATORS, ours))
    assert marked.our_taints == ()
    recorded = replace(marked, annotations={TAINTS_BY_ANNOTATION: text})
    assert recorded.our_taints == (ours,)
    plan = decide(view(kube_node=recorded), POLICY)
    assert [a.key for a in plan.actions if a.kind is Kind.UNTAINT] == [REBOOT_TAINT]


def test_a_remediation_step_an_operator_took_already_is_not_taken_over() -> None:
    """The ladder's manual or reboot step on a node where a person put that taint: left alone.

    slonkd would otherwise overwrite the person's taint value and annotation with its own.
    """
    failing = slurm("IDLE+FAIL", "Kill task failed")
    for attempts, key in ((1, REBOOT_TAINT), (2, MANUAL_TAINT)):
        by_hand = Taint(key=key, effect=TaintEffect.NO_SCHEDULE, value="ops")
        node = replace(operator_marked(), taints=(by_hand,))
        history = Remediations(attempts=attempts, last_at=0.0)
        plan = decide(view(slurm=failing, kube_node=node, remediation=history), POLICY)
        kinds = {a.kind for a in plan.actions}
        assert not kinds & {Kind.REQUEST_REBOOT, Kind.MARK_MANUAL}, plan.actions
        assert any(key in n and "someone else" in n for n in plan.notes), plan.notes
        bare = decide(
            view(slurm=failing, kube_node=operator_marked_bare(), remediation=history), POLICY
        )
        assert {a.kind for a in bare.actions} & {Kind.REQUEST_REBOOT, Kind.MARK_MANUAL}


def operator_marked_bare() -> Node:
    """K8s node kn-0 without any taint."""
    return replace(operator_marked(), taints=())

"""Marks that keep a pod away from its K8s node take the node out: they are budgeted.

Issue 15 item 11: with the budget spent or the breaker open, the poll's fast path put the
``slonk.dev/unhealthy`` NoSchedule taint on nodes it did not cordon. The taint keeps the
worker pod from coming back exactly as a cordon does, so it counts against the budget; the
``SlurmHealthy`` condition and the Event only inform and are not budgeted.
"""

from __future__ import annotations

from slonkd.core.decide import decide
from slonkd.core.health import Remediation, fail
from slonkd.core.kube_actions import FAILURE_TAINT
from slonkd.core.kube_objects import Taint, TaintEffect
from slonkd.core.plan import Kind
from tests.unit.coordinator_fakes import POLICY, knode, view


def test_failure_taint_is_budgeted_like_the_cordon() -> None:
    """A failing node's cordon and taint are both budgeted; condition and Event are not."""
    plan = decide(view(health={"xid": fail("xid", "gpu-xid-79", Remediation.REBOOT)}), POLICY)
    by_kind = {a.kind: a for a in plan.actions}
    assert by_kind[Kind.CORDON].budgeted
    assert by_kind[Kind.TAINT].key == FAILURE_TAINT
    assert by_kind[Kind.TAINT].budgeted
    assert not by_kind[Kind.SET_CONDITION].budgeted
    assert not by_kind[Kind.EVENT].budgeted


def test_taint_alone_on_a_cordoned_node_is_still_budgeted() -> None:
    """A node cordoned by an operator: the taint alone is asked for, and budgeted."""
    plan = decide(
        view(
            kube_node=knode(cordoned=True),
            health={"xid": fail("xid", "gpu-xid-79", Remediation.NONE)},
        ),
        POLICY,
    )
    taints = [a for a in plan.actions if a.kind is Kind.TAINT]
    assert taints
    assert all(a.budgeted for a in taints)
    assert Taint(key=FAILURE_TAINT, effect=TaintEffect.NO_SCHEDULE)  # the mark in question

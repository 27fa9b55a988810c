"""A taint the pool tolerates by design is its nature, not maintenance (issue 37 item 1).

A managed GPU pool taints every node (``nvidia.com/gpu=present:NoSchedule``) and its worker
pods tolerate it (the chart's ``pools[].tolerations``): ``decide`` must not drain them for
``k8s-tainted``. Kubernetes' matching rules decide what is tolerated (operator Exists or
Equal, value, an empty effect for every effect), except that a wildcard toleration and a
NoExecute toleration with ``tolerationSeconds`` never hide maintenance; a taint the pool does
not tolerate still drains. One test per rule, on ``decide`` (:mod:`slonkd.core.tolerations`
holds the rule); the pass's budget and breaker are in ``test_coordinator_pass.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from slonkd.core.decide import decide
from slonkd.core.kube_objects import Taint, TaintEffect, Toleration, TolerationOperator
from slonkd.core.plan import NodeView
from slonkd.core.tolerations import tolerated
from tests.unit.coordinator_fakes import POLICY, kinds, knode, pod, slurm, view

EXISTS, EQUAL = TolerationOperator.EXISTS, TolerationOperator.EQUAL
NO_SCHEDULE, NO_EXECUTE = TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE
GPU = Taint(key="nvidia.com/gpu", effect=NO_SCHEDULE, value="present")
"""The taint of every node of a managed GPU pool."""
MAINT = Taint(key="example.com/maint", effect=NO_EXECUTE)
"""Node maintenance: a new NoExecute taint nobody tolerates."""


def on(taints: tuple[Taint, ...], *tolerations: Toleration) -> NodeView:
    """A settled healthy view of w-0 on kn-0 carrying ``taints``, its pod ``tolerations``."""
    return view(pod=replace(pod(), tolerations=tolerations), kube_node=knode(taints=taints))


def test_a_taint_tolerated_with_exists_by_its_key_is_not_maintenance() -> None:
    """nvidia.com/gpu=present:NoSchedule tolerated by key with Exists: no drain; a note says so."""
    plan = decide(on((GPU,), Toleration(key="nvidia.com/gpu", operator=EXISTS)), POLICY)
    assert kinds(plan) == []
    assert any("nvidia.com/gpu" in n and "tolerated" in n for n in plan.notes), plan.notes


def test_an_equal_toleration_of_the_taints_value_hides_it() -> None:
    """Equal with the taint's value and effect: the pool's nature."""
    toleration = Toleration(
        key="nvidia.com/gpu", operator=EQUAL, value="present", effect=NO_SCHEDULE
    )
    assert kinds(decide(on((GPU,), toleration), POLICY)) == []


def test_an_equal_toleration_of_another_value_hides_nothing() -> None:
    """Equal with another value does not tolerate the taint: it is maintenance."""
    toleration = Toleration(key="nvidia.com/gpu", operator=EQUAL, value="absent")
    assert kinds(decide(on((GPU,), toleration), POLICY)) == [("drain", "k8s-tainted:gpu")]


@pytest.mark.parametrize("effect", [NO_SCHEDULE, NO_EXECUTE])
def test_a_toleration_without_an_effect_matches_every_effect(effect: TaintEffect) -> None:
    """An empty effect tolerates the key's taint whatever its effect (Kubernetes' rule)."""
    taint = replace(GPU, effect=effect)
    assert kinds(decide(on((taint,), Toleration(key=GPU.key, operator=EXISTS)), POLICY)) == []


def test_a_toleration_of_another_effect_hides_nothing() -> None:
    """A NoSchedule toleration does not tolerate the key's NoExecute taint."""
    taint = replace(GPU, effect=NO_EXECUTE)
    toleration = Toleration(key=GPU.key, operator=EXISTS, effect=NO_SCHEDULE)
    assert kinds(decide(on((taint,), toleration), POLICY)) == [("drain", "k8s-tainted:gpu")]


@pytest.mark.parametrize("effect", [None, NO_SCHEDULE, NO_EXECUTE])
def test_a_wildcard_toleration_never_hides_maintenance(effect: TaintEffect | None) -> None:
    """An empty key with Exists tolerates every taint: it says nothing of the pool's nature."""
    wildcard = Toleration(operator=EXISTS, effect=effect)
    assert kinds(decide(on((MAINT,), wildcard), POLICY)) == [("drain", "k8s-tainted:maint")]


def test_a_noexecute_toleration_with_seconds_never_hides_maintenance() -> None:
    """tolerationSeconds on NoExecute: the pod is evicted when they run out, eviction is coming."""
    toleration = Toleration(key=MAINT.key, operator=EXISTS, effect=NO_EXECUTE, seconds=3600)
    assert kinds(decide(on((MAINT,), toleration), POLICY)) == [("drain", "k8s-tainted:maint")]


def test_a_taint_the_pool_does_not_tolerate_still_drains_beside_a_tolerated_one() -> None:
    """A GPU pool's node gets a NoExecute maintenance taint: drained for that taint, by its key."""
    plan = decide(on((GPU, MAINT), Toleration(key=GPU.key, operator=EXISTS)), POLICY)
    assert kinds(plan) == [("drain", "k8s-tainted:maint")]


def test_a_drain_for_a_taint_the_pool_tolerates_is_released() -> None:
    """A node drained for the pool's own taint (by an older slonkd) comes back."""
    drained = slurm("IDLE+DRAIN", "slonkd:k8s-tainted:gpu")
    v = replace(on((GPU,), Toleration(key=GPU.key, operator=EXISTS)), slurm=drained)
    assert kinds(decide(v, POLICY)) == [("release", "k8s-tainted:gpu")]


@pytest.mark.parametrize(
    ("toleration", "taint", "hides"),
    [
        (Toleration(key="k", operator=EXISTS), Taint(key="k", effect=NO_SCHEDULE, value="v"), True),
        (Toleration(key="k"), Taint(key="k", effect=NO_SCHEDULE), True),  # Equal, both empty
        (Toleration(key="k"), Taint(key="k", effect=NO_SCHEDULE, value="v"), False),
        (Toleration(key="k", operator=EXISTS), Taint(key="k2", effect=NO_SCHEDULE), False),
        (Toleration(key="k", value="v"), Taint(key="", effect=NO_SCHEDULE, value="v"), False),
        (Toleration(value="v"), Taint(key="k", effect=NO_SCHEDULE, value="v"), False),  # no key
        (
            Toleration(key="k", operator=EXISTS, effect=NO_EXECUTE, seconds=0),
            Taint(key="k", effect=NO_EXECUTE),
            False,
        ),
        (
            Toleration(key="k", operator=EXISTS, effect=NO_EXECUTE),
            Taint(key="k", effect=NO_EXECUTE),
            True,
        ),
    ],
)
def test_the_rule_in_one_place(toleration: Toleration, taint: Taint, hides: bool) -> None:
    """:func:`tolerated` itself: Kubernetes' matching, less wildcards and eviction timers."""
    assert tolerated(taint, (toleration,)) is hides
    assert tolerated(taint, ()) is False

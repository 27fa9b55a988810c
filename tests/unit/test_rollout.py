"""Rollout planning: which outdated workers go next, phases read from the world, settings."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slonkd.adapters.kube.statefulsets import statefulset_from_json
from slonkd.core.budget import BudgetPolicy
from slonkd.core.decide import decide
from slonkd.core.errors import ParseError
from slonkd.core.kube_objects import (
    HOLD_KEY,
    TAINTS_BY_ANNOTATION,
    KubeNodeName,
    Node,
    Taint,
    TaintEffect,
    encode_taint_record,
)
from slonkd.core.plan import Kind, NodeView, Policy
from slonkd.core.reasons import Cause, highest
from slonkd.core.rollout import RolloutSettings, plan_rollout, progress
from slonkd.core.rollout_phase import (
    REVISION_LABEL,
    ROLLOUT_CAUSE,
    Phase,
    StatefulSetRevision,
    WorkerView,
    held_by_rollout,
    phase_of,
)
from slonkd.core.slurm_node import NodeName
from tests.unit.rollout_fakes import DRAINED, ROOMY, STS, fleet, node, pod, view


def test_statefulset_owns_its_pods_only() -> None:
    """Name ``<sts>-<ordinal>`` and the selector's labels: both needed."""
    assert STS.owns(pod("w-3"))
    assert not STS.owns(pod("wx-3"))
    assert not STS.owns(pod("w-a"))
    other = replace(pod("w-1"), labels={"slonk.dev/pool": "x", REVISION_LABEL: "w-old"})
    assert not STS.owns(other)


def test_phases_follow_the_world() -> None:
    """Outdated, draining, replacing, starting, done and updated, from pod and SLURM alone."""
    assert phase_of(view("w-0", pod("w-0"), node("w-0"))) is Phase.OUTDATED
    assert phase_of(view("w-0", pod("w-0", "w-new"), node("w-0"))) is Phase.UPDATED
    drained = node("w-0", "IDLE+DRAIN", DRAINED)
    assert phase_of(view("w-0", pod("w-0"), drained)) is Phase.DRAINING
    assert phase_of(view("w-0", pod("w-0", terminating=True), drained)) is Phase.REPLACING
    assert phase_of(view("w-0", None, drained)) is Phase.REPLACING
    # gone for good (scaled down, StatefulSet deleted): the rollout lets go of the node
    gone = WorkerView(node="w-7", pod=None, statefulset=None, slurm=node("w-7", "DOWN", DRAINED))
    assert phase_of(gone) is Phase.DONE
    assert STS.wants("w-3")
    assert not STS.wants("w-4")
    assert not STS.wants("x-1")
    assert phase_of(view("w-0", pod("w-0", "w-new", ready=False), drained)) is Phase.STARTING
    assert phase_of(view("w-0", pod("w-0", "w-new"), drained)) is Phase.DONE
    # held by the rollout and by the agent's pod-terminating at once (the cause set in extra)
    both = node("w-0", "DOWN+DRAIN", "slonkd:pod-terminating x", ("pod-terminating", "rollout"))
    assert held_by_rollout(both)
    assert phase_of(view("w-0", pod("w-0", "w-new"), both)) is Phase.DONE
    # a pod that is not the rollout's business
    assert phase_of(view("w-0", None, node("w-0"))) is Phase.UNMANAGED
    rolling = WorkerView(
        node="w-0",
        pod=pod("w-0"),
        statefulset=StatefulSetRevision(name="w", namespace="slonk", update_revision="w-new"),
        slurm=node("w-0"),
    )
    assert phase_of(rolling) is Phase.UNMANAGED  # RollingUpdate: the controller rolls it


def test_one_at_a_time_in_name_order() -> None:
    """max_parallel 1: the first outdated worker starts; the others wait and say why."""
    plan = plan_rollout(fleet(), RolloutSettings(), policy=ROOMY)
    assert plan.start == ("w-0",)
    assert plan.waiting == {n: "at most 1 at a time" for n in ("w-1", "w-2", "w-3")}


def test_nothing_new_starts_while_one_is_in_progress() -> None:
    """A drained worker (or one whose pod is being replaced) holds the single slot."""
    views = fleet()
    views[0] = view("w-0", None, node("w-0", "DOWN+DRAIN", DRAINED))
    plan = plan_rollout(views, RolloutSettings(), policy=ROOMY)
    assert plan.start == ()
    views[0] = view("w-0", pod("w-0", "w-new"), node("w-0", "DOWN+DRAIN", DRAINED))
    plan = plan_rollout(views, RolloutSettings(), policy=ROOMY)
    assert plan.release == ("w-0",)
    assert plan.start == ()  # the next goes once the release is seen


def test_parallel_and_budget_bound_the_starts() -> None:
    """max_parallel 3 inside a budget with 1 unit left (an operator drains one): one starts."""
    views = [*fleet(), view("w-9", pod("w-9", "w-new"), node("w-9", "IDLE+DRAIN", "disk swap"))]
    plan = plan_rollout(
        views,
        RolloutSettings(max_parallel=3),
        policy=BudgetPolicy(max_out=2, max_out_percent=100.0),
    )
    assert plan.start == ("w-0",)
    assert plan.waiting["w-1"] == "disruption budget of pool default: 2 of 2 out"
    plan = plan_rollout(fleet(), RolloutSettings(max_parallel=3), policy=ROOMY)
    assert plan.start == ("w-0", "w-1", "w-2")


def test_a_node_already_out_costs_no_budget_and_unready_pods_go_first() -> None:
    """A pod that is not Ready goes first; a node slonkd holds already fits a full budget."""
    views = fleet()
    views[2] = view("w-2", pod("w-2", ready=False), node("w-2", "IDLE+DRAIN", "slonkd:health:x"))
    plan = plan_rollout(views, RolloutSettings(), policy=BudgetPolicy(max_out=1))
    assert plan.start == ("w-2",)


def test_operator_and_slurm_holds_are_left_alone() -> None:
    """An operator's drain or SLURM's failure: never drained by the rollout, reported."""
    views = fleet(3)
    views[0] = view("w-0", pod("w-0"), node("w-0", "IDLE+DRAIN", "disk swap by ops"))
    views[1] = view("w-1", pod("w-1"), node("w-1", "DOWN", "Not responding"))
    plan = plan_rollout(views, RolloutSettings(), policy=ROOMY)
    assert plan.start == ("w-2",)
    assert "someone else" in plan.waiting["w-0"]
    assert "someone else" in plan.waiting["w-1"]


def test_unknown_slurm_node_and_terminating_pod_wait() -> None:
    """Not seen in SLURM: unknown is not idle. A pod going away is replaced anyway."""
    views = [
        view("w-0", pod("w-0"), None),
        view("w-1", pod("w-1", terminating=True), node("w-1")),
    ]
    plan = plan_rollout(views, RolloutSettings(max_parallel=2), policy=ROOMY)
    assert plan.start == ()
    assert plan.waiting["w-0"] == "SLURM node not seen"
    assert "terminating" in plan.waiting["w-1"]


def test_progress_counts() -> None:
    """JSON-able counts per phase and per StatefulSet."""
    views = fleet(3)
    views[0] = view("w-0", pod("w-0", "w-new"), node("w-0"))
    views[1] = view("w-1", pod("w-1"), node("w-1", "IDLE+DRAIN", DRAINED))
    plan = plan_rollout(views, RolloutSettings(), policy=ROOMY)
    out = progress(views, plan, [STS])
    assert out["updated"] == 1
    assert out["outdated"] == 1
    assert out["in_progress"] == {"w-1": "draining"}
    assert out["statefulsets"]["w"]["updated"] == 1
    assert out["complete"] is False
    json.dumps(out)


def test_decide_never_releases_the_rollouts_drain() -> None:
    """The coordinator's healthy rule keeps ``rollout``: only the rollout releases it."""
    v = NodeView(
        node=NodeName("w-0"),
        now=1000.0,
        slurm=node("w-0", "IDLE+DRAIN", DRAINED),
        pod=pod("w-0"),
        kube_node=None,
        pod_ready_since=0.0,
    )
    plan = decide(v, Policy())
    assert not [a for a in plan.actions if a.kind is Kind.RELEASE]
    assert any("rollout releases it" in n for n in plan.notes)


def test_rollout_is_on_the_pod_lifecycle_rung() -> None:
    """Below health and K8s maintenance, beside pod lifecycle."""
    assert ROLLOUT_CAUSE.priority == Cause(name="pod-terminating").priority
    assert highest(frozenset({ROLLOUT_CAUSE, Cause(name="k8s-cordoned")})).name == "k8s-cordoned"


def test_settings_from_mapping() -> None:
    """Known numbers only; bad values refused with a clear message."""
    assert RolloutSettings.from_mapping({"max_parallel": 2}).max_parallel == 2
    with pytest.raises(ValueError, match="unknown keys"):
        RolloutSettings.from_mapping({"parallel": 2})
    with pytest.raises(ValueError, match="max_parallel"):
        RolloutSettings.from_mapping({"max_parallel": 0})
    with pytest.raises(ValueError, match="must be a number"):
        RolloutSettings.from_mapping({"job_wait_s": "10"})
    with pytest.raises(ValueError, match="JSON object"):
        RolloutSettings.from_mapping([1])
    assert RolloutSettings.from_mapping({"requeue_in_prestop": True}).requeue_in_prestop
    assert not RolloutSettings.from_mapping({}).requeue_in_prestop
    with pytest.raises(ValueError, match="true or false"):
        RolloutSettings.from_mapping({"requeue_in_prestop": 1})


def test_statefulset_from_json() -> None:
    """updateRevision, OnDelete and the selector from the apiserver's JSON."""
    sts = statefulset_from_json(
        {
            "metadata": {"name": "w", "namespace": "slonk"},
            "spec": {
                "replicas": 4,
                "updateStrategy": {"type": "OnDelete"},
                "selector": {"matchLabels": {"slonk.dev/pool": "w"}},
            },
            "status": {"updateRevision": "w-new", "currentRevision": "w-old"},
        }
    )
    assert sts == STS
    assert not statefulset_from_json({"metadata": {"name": "x"}}).on_delete
    with pytest.raises(ParseError):
        statefulset_from_json({"spec": {}})


def test_coordinator_settings_parse_rollout(tmp_path: Path) -> None:
    """The config file's ``rollout``: an object, or null to switch rollouts off."""
    from slonkd.cli.coordinator import load_settings

    path = tmp_path / "c.json"
    env = {"POD_NAMESPACE": "slonk", "SLONKD_CONFIG": str(path)}
    path.write_text(json.dumps({"rollout": {"max_parallel": 2, "job_wait_s": 5}}))
    s = load_settings(env)
    assert s.rollout == RolloutSettings(max_parallel=2, job_wait_s=5)
    path.write_text(json.dumps({"rollout": None}))
    assert load_settings(env).rollout is None
    path.unlink()
    assert load_settings({"POD_NAMESPACE": "slonk"}).rollout == RolloutSettings()
    path.write_text(json.dumps({"rollout": {"max_parallel": -1}}))
    with pytest.raises(ValueError, match="max_parallel"):
        load_settings(env)


def test_a_released_node_holds_the_slot_until_back_in_service() -> None:
    """Released by the rollout, still DOWN for the agent's cause: the next one waits."""
    views = fleet()
    views[0] = WorkerView(
        node="w-0",
        pod=pod("w-0", "w-new"),
        statefulset=STS,
        slurm=node("w-0", "DOWN+DRAIN", "slonkd:pod-terminating held"),
        settling=True,
    )
    plan = plan_rollout(views, RolloutSettings(), policy=ROOMY)
    assert plan.phases["w-0"] is Phase.SETTLING
    assert plan.start == ()
    views[0] = replace(views[0], settling=False)
    assert plan_rollout(views, RolloutSettings(), policy=ROOMY).start == ("w-1",)


def test_a_hold_stops_new_starts_but_not_work_in_progress() -> None:
    """The breaker open: nothing new is drained; a Ready new pod is released.

    A pause stops everything instead (``test_rollout_pause.py``).
    """
    views = fleet()
    views[0] = view("w-0", pod("w-0", "w-new"), node("w-0", "DOWN+DRAIN", DRAINED))
    plan = plan_rollout(views, RolloutSettings(max_parallel=3), policy=ROOMY, hold="breaker open")
    assert plan.start == ()
    assert plan.release == ("w-0",)
    assert plan.waiting["w-1"] == "breaker open"


def test_each_pool_has_its_own_budget() -> None:
    """A full pool waits while another pool's workers go."""
    ops = view("w-9", pod("w-9", "w-new"), node("w-9", "IDLE+DRAIN", "disk swap"))
    views = [*fleet(2), ops] + [replace(v, pool="serve") for v in fleet(4)[2:]]
    plan = plan_rollout(views, RolloutSettings(max_parallel=4), policy=BudgetPolicy())
    assert plan.start == ("w-2",)
    assert plan.waiting["w-0"] == "disruption budget of pool default: 1 of 1 out"
    assert plan.waiting["w-3"] == "disruption budget of pool serve: 1 of 1 out"


def kube_node(name: str, *, held: bool = False) -> Node:
    """K8s node ``name``; ``held`` puts the operator's ``slonk.dev/hold`` label on it."""
    return Node(
        name=KubeNodeName(name),
        uid=f"uid-{name}",
        resource_version="1",
        unschedulable=False,
        labels={HOLD_KEY: "ops"} if held else {},
    )


def test_an_operators_hold_keeps_the_rollout_off_the_node() -> None:
    """A worker on a held K8s node is never started, evicted or released; the rest goes on."""
    views = [replace(v, kube_node=kube_node(f"kn-{v.node}")) for v in fleet(3)]
    views[0] = replace(views[0], kube_node=kube_node("kn-w-0", held=True))
    plan = plan_rollout(views, RolloutSettings(), policy=ROOMY)
    assert plan.start == ("w-1",)  # not w-0, first by name
    assert "on hold" in plan.waiting["w-0"]
    assert "on hold" in plan.held["w-0"]
    # held while drained for the rollout: not evicted, and it takes no rollout slot
    views[0] = replace(views[0], slurm=node("w-0", "IDLE+DRAIN", DRAINED))
    plan = plan_rollout(views, RolloutSettings(), policy=ROOMY)
    assert plan.phases["w-0"] is Phase.DRAINING
    assert plan.draining == ()
    assert plan.start == ("w-1",)
    # held with its new pod Ready: the rollout's cause is not released either
    views[0] = replace(views[0], pod=pod("w-0", "w-new"))
    plan = plan_rollout(views, RolloutSettings(), policy=ROOMY)
    assert plan.phases["w-0"] is Phase.DONE
    assert plan.release == ()
    out = progress(views, plan, [STS])
    assert out["held"] == {"w-0": plan.held["w-0"]}
    # the hold lifted: the rollout carries on
    views[0] = replace(views[0], kube_node=kube_node("kn-w-0"))
    assert plan_rollout(views, RolloutSettings(), policy=ROOMY).release == ("w-0",)


def test_the_rollout_counts_every_node_out_as_the_coordinator_does() -> None:
    """A cordoned K8s node or a slonkd NoSchedule taint uses the pool's room: nothing starts.

    Ten workers, budget limit 1. An operator's cordon of one updated worker's K8s node (its
    SLURM node still IDLE) takes the room, exactly as it does for the coordinator's budget;
    so does slonkd's own NoSchedule taint. The crowded-out worker waits (the rollout never
    opens the breaker); once the cordon is lifted, the first outdated worker starts.
    """
    views = [*fleet(9), view("w-9", pod("w-9", "w-new"), node("w-9"))]
    cordoned = replace(kube_node("kn-9"), unschedulable=True)
    taint = Taint(key="slonk.dev/unhealthy", effect=TaintEffect.NO_SCHEDULE, value="x")
    tainted = replace(
        kube_node("kn-9"),
        taints=(taint,),
        annotations={TAINTS_BY_ANNOTATION: encode_taint_record([taint.identity]) or ""},
    )
    assert tainted.our_taints == (taint,)
    for out in (cordoned, tainted):
        views[9] = replace(views[9], kube_node=out)
        plan = plan_rollout(views, RolloutSettings(), policy=BudgetPolicy())
        assert plan.start == ()
        assert plan.waiting["w-0"] == "disruption budget of pool default: 1 of 1 out"
    views[9] = replace(views[9], kube_node=kube_node("kn-9"))
    assert plan_rollout(views, RolloutSettings(), policy=BudgetPolicy()).start == ("w-0",)


def test_a_node_out_while_its_pod_is_gone_still_uses_its_pools_room() -> None:
    """w-3 is drained for a health check and its pod is gone (evicted, being replaced).

    Its StatefulSet wants it back: it is a worker of the pool, out, and the pool's room (1)
    is taken. The old rollout skipped a view with no pod and started w-0: two out of a limit
    of 1 (the coordinator's gate counted it in pool ``default`` the same way).
    """
    views = fleet()
    views[3] = view("w-3", None, node("w-3", "IDLE+DRAIN", "slonkd:health:mount-missing"))
    plan = plan_rollout(views, RolloutSettings(), policy=BudgetPolicy(max_out=1))
    assert plan.start == ()
    assert plan.waiting["w-0"] == "disruption budget of pool default: 1 of 1 out"

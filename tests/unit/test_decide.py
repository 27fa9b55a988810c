"""decide(): every rung of the priority ladder, competing causes, and properties over any view."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.core.decide import decide
from slonkd.core.health import CheckResult, Remediation, Verdict, fail, ok
from slonkd.core.kube_actions import FAILURE_TAINT
from slonkd.core.kube_objects import Taint, TaintEffect
from slonkd.core.plan import Action, Kind, NodeView, Policy, Remediations, Writer
from slonkd.core.reasons import Cause, ReasonOwner, parse_reason
from slonkd.core.slurm_node import DrainStatus, NodeName
from tests.unit.coordinator_fakes import NOW, POLICY, kinds, knode, pod, slurm, view


def test_healthy_node_needs_nothing() -> None:
    """A Ready pod on a Ready node with an idle SLURM node and passing checks: no action."""
    assert decide(view(), POLICY).actions == ()


def test_hold_and_pause_stop_everything() -> None:
    """A held K8s node or a global pause: no action, whatever else is wrong."""
    bad = {
        "pod": pod(terminating=True),
        "health": {"gpu": fail("gpu", "gpu-xid-79", Remediation.REBOOT)},
    }
    held = decide(view(kube_node=knode(held=True), **bad), POLICY)
    assert held.actions == ()
    assert "hold" in held.notes[0]
    assert decide(view(paused=True, **bad), POLICY).actions == ()


def test_pod_terminating_drains_by_the_agent_unbudgeted() -> None:
    """Pod lifecycle: terminating -> the agent drains with pod-terminating, outside the budget."""
    plan = decide(view(pod=pod(terminating=True)), POLICY)
    assert kinds(plan) == [("drain", "pod-terminating")]
    (action,) = plan.actions
    assert (action.writer, action.budgeted) == (Writer.AGENT, False)


def test_new_pod_ready_resumes_what_the_agent_drained() -> None:
    """The node's next pod, once Ready, releases pod-terminating (the agent's cause)."""
    plan = decide(view(slurm=slurm("IDLE+DRAIN", "slonkd:pod-terminating")), POLICY)
    assert kinds(plan, Writer.AGENT) == [("release", "pod-terminating")]
    down_after_prestop = decide(view(slurm=slurm("DOWN", "slonkd:pod-terminating")), POLICY)
    assert kinds(down_after_prestop, Writer.AGENT) == [("release", "pod-terminating")]


def test_pod_not_ready_past_grace_drains_by_the_coordinator() -> None:
    """A pod not Ready for longer than the grace: coordinator drain, budgeted; shorter: nothing."""
    late = decide(
        view(pod=pod(ready=False), pod_ready_since=None, pod_unready_since=NOW - 61), POLICY
    )
    assert kinds(late) == [("drain", "pod-not-ready")]
    assert late.actions[0].writer is Writer.COORDINATOR
    assert late.actions[0].budgeted
    early = decide(
        view(pod=pod(ready=False), pod_ready_since=None, pod_unready_since=NOW - 5), POLICY
    )
    assert early.actions == ()


def test_operator_drain_stays_while_pod_is_ready() -> None:
    """An operator's drain on a node whose pod is Ready: slonkd writes nothing to SLURM."""
    plan = decide(view(slurm=slurm("IDLE+DRAIN", "maintenance by alice")), POLICY)
    assert plan.actions == ()
    assert any("not slonkd's" in n for n in plan.notes)


def test_operator_redrain_after_slonkd_makes_it_foreign() -> None:
    """slonkd drained, then an operator re-drained with a new reason: never resumed."""
    plan = decide(
        view(slurm=slurm("IDLE+DRAIN", "bad DIMM, ticket 42", ("pod-terminating",))), POLICY
    )
    assert plan.actions == ()


def test_terminating_pod_on_health_drained_node_adds_its_cause() -> None:
    """Pod terminating on a node slonkd holds for health: the cause is added, health stays shown."""
    plan = decide(
        view(
            slurm=slurm("IDLE+DRAIN", "slonkd:health:gpu-xid-79 x", ("health:gpu-xid-79",)),
            pod=pod(terminating=True),
            health={"xid": fail("xid", "gpu-xid-79", Remediation.REBOOT)},
        ),
        POLICY,
    )
    assert ("drain", "pod-terminating") in kinds(plan)
    assert ("release", "health:gpu-xid-79") not in kinds(plan)


def test_health_failure_drains_cordons_taints_and_remediates() -> None:
    """A fail verdict: drain health:<cause>, cordon, taint, condition, Event, evict (first rung)."""
    plan = decide(view(health={"xid": fail("xid", "gpu-xid-94", Remediation.RESTART_POD)}), POLICY)
    assert [a.kind for a in plan.actions] == [
        Kind.DRAIN,
        Kind.CORDON,
        Kind.TAINT,
        Kind.SET_CONDITION,
        Kind.EVENT,
        Kind.EVICT,
    ]
    assert all(a.writer is Writer.COORDINATOR for a in plan.actions)
    assert str(plan.actions[0].cause) == "health:gpu-xid-94"


def test_remediation_ladder_and_cooldown() -> None:
    """After a restart attempt the next step is a reboot request, then manual; cool-down waits."""
    failing = {"xid": fail("xid", "gpu-xid-94", Remediation.RESTART_POD)}
    second = decide(
        view(health=failing, remediation=Remediations(attempts=1, last_at=NOW - 1000)), POLICY
    )
    assert Kind.REQUEST_REBOOT in [a.kind for a in second.actions]
    third = decide(
        view(health=failing, remediation=Remediations(attempts=2, last_at=NOW - 1000)), POLICY
    )
    assert Kind.MARK_MANUAL in [a.kind for a in third.actions]
    cooling = decide(
        view(health=failing, remediation=Remediations(attempts=1, last_at=NOW - 10)), POLICY
    )
    assert not {Kind.EVICT, Kind.REQUEST_REBOOT, Kind.MARK_MANUAL} & {
        a.kind for a in cooling.actions
    }


def test_slurm_failure_counts_only_on_a_settled_pod() -> None:
    """SLURM's 'Not responding' on a pod Ready for an hour is a failure; on a new pod it is not."""
    down = slurm("DOWN+NOT_RESPONDING", "Not responding")
    settled = decide(view(slurm=down), POLICY)
    assert [a.kind for a in settled.actions][:4] == [
        Kind.CORDON,
        Kind.TAINT,
        Kind.SET_CONDITION,
        Kind.EVENT,
    ]
    assert not [
        a for a in settled.actions if a.kind in (Kind.DRAIN, Kind.RELEASE)
    ]  # SLURM's own reason
    fresh = decide(view(slurm=down, pod_ready_since=NOW - 30), POLICY)
    assert fresh.actions == ()
    rolling = decide(view(slurm=down, pod=pod(terminating=True)), POLICY)
    assert [a.kind for a in rolling.actions] == []  # SLURM's reason: no SLURM write, no failure


def test_kube_maintenance_is_mirrored_and_lifted() -> None:
    """An admin cordon drains in SLURM (k8s-cordoned) and is never undone; uncordon releases."""
    cordoned = decide(view(kube_node=knode(cordoned=True)), POLICY)
    assert kinds(cordoned) == [("drain", "k8s-cordoned")]
    assert Kind.UNCORDON not in [a.kind for a in cordoned.actions]
    lifted = decide(view(slurm=slurm("IDLE+DRAIN", "slonkd:k8s-cordoned")), POLICY)
    assert kinds(lifted) == [("release", "k8s-cordoned")]
    tainted = decide(
        view(
            kube_node=knode(taints=(Taint(key="example.com/maint", effect=TaintEffect.NO_EXECUTE),))
        ),
        POLICY,
    )
    assert kinds(tainted) == [("drain", "k8s-tainted:maint")]
    notready = decide(view(kube_node=knode(ready=False)), POLICY)
    assert kinds(notready) == [("drain", "k8s-notready")]
    deleting = decide(view(kube_node=knode(deleting=True)), POLICY)
    assert kinds(deleting) == [("drain", "k8s-deleted")]  # DOWN once no job is left


def test_slonkd_marks_are_undone_when_healthy_but_not_others() -> None:
    """slonkd's cordon, taint and condition are undone once healthy; an admin cordon stays."""
    ours = knode(
        cordoned=True,
        by_slonkd=True,
        taints=(Taint(key=FAILURE_TAINT, effect=TaintEffect.NO_SCHEDULE),),
        healthy=False,
    )
    plan = decide(view(kube_node=ours), POLICY)
    assert [a.kind for a in plan.actions] == [Kind.UNCORDON, Kind.UNTAINT, Kind.SET_CONDITION]


def test_unknowns_never_release() -> None:
    """Missing health verdicts, an unseen K8s node or an absent pod keep slonkd's causes held."""
    assert (
        decide(
            view(slurm=slurm("IDLE+DRAIN", "slonkd:health:gpu-xid-79"), health={}), POLICY
        ).actions
        == ()
    )
    assert (
        decide(
            view(slurm=slurm("IDLE+DRAIN", "slonkd:k8s-cordoned"), kube_node=None), POLICY
        ).actions
        == ()
    )
    gone = decide(
        view(slurm=slurm("DOWN", "slonkd:pod-terminating"), pod=None, pod_ready_since=None), POLICY
    )
    assert kinds(gone) == []
    unknown_state = decide(
        view(slurm=slurm("IDLE+WEIRD_NEW_FLAG", "slonkd:pod-terminating")), POLICY
    )
    assert unknown_state.actions == ()
    assert decide(view(slurm=None), POLICY).actions == ()


def test_a_pending_reboot_keeps_slonkds_hold_until_it_completes() -> None:
    """The check passes while the reboot slonkd asked for waits: no release (it would cancel it).

    SLURM clears slonkd's reason itself when the reboot completes.
    """
    waiting = view(slurm=slurm("MIXED+DRAIN+REBOOT_REQUESTED", "slonkd:health:slurmd-dead"))
    plan = decide(waiting, POLICY)
    assert [a for a in plan.actions if a.kind is Kind.RELEASE] == []
    assert any("reboot" in n for n in plan.notes), plan.notes
    done = view(slurm=slurm("IDLE+DRAIN", "slonkd:health:slurmd-dead"))
    # once it completed, the check's pass starts the revalidation (then the cause is released)
    assert kinds(decide(done, POLICY)) == [("drain", "revalidating")]


# --- properties over arbitrary views ----------------------------------------------------------

reasons = st.sampled_from(
    [
        "",
        "slonkd:pod-terminating",
        "slonkd:health:gpu-xid-79 x",
        "slonkd:k8s-cordoned",
        "maintenance by alice",
        "Not responding",
        "slonkd:bogus cause!",
        "Kill task failed",
    ]
)
states = st.sampled_from(
    [
        "IDLE",
        "IDLE+DRAIN",
        "MIXED+DRAIN",
        "DOWN",
        "DOWN+NOT_RESPONDING",
        "IDLE+FAIL",
        "ALLOCATED",
        "UNKNOWN",
        "IDLE+SOMETHING_NEW",
        "MIXED",
    ]
)
extras = st.sampled_from([(), ("pod-terminating",), ("health:gpu-xid-79", "k8s-cordoned")])
verdicts = st.sampled_from(
    [
        ok("gpu"),
        fail("gpu", "gpu-xid-79", Remediation.REBOOT),
        CheckResult(check="gpu", verdict=Verdict.UNKNOWN, cause="tool-missing"),
    ]
)


@st.composite
def views(draw: st.DrawFn) -> NodeView:
    """Arbitrary views mixing owned, foreign and unknown states."""
    taints = draw(
        st.lists(
            st.sampled_from(
                [
                    Taint(key=FAILURE_TAINT, effect=TaintEffect.NO_SCHEDULE),
                    Taint(key="example.com/x", effect=TaintEffect.NO_SCHEDULE),
                ]
            ),
            max_size=2,
            unique=True,
        )
    )
    kube = draw(
        st.none()
        | st.builds(
            knode,
            cordoned=st.booleans(),
            by_slonkd=st.booleans(),
            taints=st.just(tuple(taints)),
            ready=st.booleans(),
            held=st.booleans(),
            healthy=st.none() | st.booleans(),
            deleting=st.booleans(),
        )
    )
    return view(
        slurm=draw(st.none() | st.builds(slurm, states, reasons, extras)),
        pod=draw(st.none() | st.builds(pod, ready=st.booleans(), terminating=st.booleans())),
        kube_node=kube,
        pod_ready_since=draw(st.none() | st.floats(0, NOW)),
        pod_unready_since=draw(st.none() | st.floats(0, NOW)),
        health=draw(st.dictionaries(st.just("gpu"), verdicts, max_size=1)),
        paused=draw(st.booleans()),
        remediation=Remediations(attempts=draw(st.integers(0, 3)), last_at=draw(st.floats(0, NOW))),
    )


def _slurm_writes(actions: tuple[Action, ...]) -> list[Action]:
    return [a for a in actions if a.kind in (Kind.DRAIN, Kind.DOWN, Kind.RELEASE, Kind.REQUEUE)]


@given(views())
def test_property_never_touches_what_slonkd_does_not_own(v: NodeView) -> None:
    """For any view, slonkd never writes over what it does not own.

    No SLURM write over a reason that is not slonkd's; no uncordon of a cordon slonkd did
    not make; nothing at all on a held node or while paused. Only a reason that holds the
    node is anyone's (``live_reason``): 24.11 keeps old text after a resume.
    """
    plan = decide(v, POLICY)
    if v.paused or (v.kube_node is not None and v.kube_node.held):
        assert plan.actions == ()
        return
    if v.slurm is not None:
        owner = parse_reason(v.slurm.live_reason).owner
        if owner in (ReasonOwner.FOREIGN, ReasonOwner.SLURM) or not v.slurm.state.fully_recognised:
            assert _slurm_writes(plan.actions) == []
    else:
        assert _slurm_writes(plan.actions) == []
    for action in plan.actions:
        if action.kind is Kind.UNCORDON:
            assert v.kube_node is not None
            assert v.kube_node.cordoned_by_slonkd
        if action.kind is Kind.UNTAINT:
            assert action.key.startswith("slonk.dev/")
        if action.kind is Kind.RELEASE and v.slurm is not None:
            assert parse_reason(v.slurm.live_reason).owner is ReasonOwner.SLONKD


@given(views())
def test_property_no_job_is_killed_without_requeue(v: NodeView) -> None:
    """A Down is decided only for a node drained with no job left (or after a Requeue)."""
    actions = decide(v, POLICY).actions
    for i, action in enumerate(actions):
        if action.kind is Kind.DOWN:
            requeued = any(
                a.kind is Kind.REQUEUE and a.cause == action.cause and a.writer is action.writer
                for a in actions[:i]
            )
            assert requeued or (v.slurm is not None and v.slurm.state.drain is DrainStatus.DRAINED)


@given(views())
def test_property_agent_writes_only_its_own_lifecycle_causes(v: NodeView) -> None:
    """The agent never cordons, evicts, or drains for anything but its own pod's lifecycle."""
    for action in decide(v, POLICY).for_writer(Writer.AGENT):
        assert action.kind in (Kind.DRAIN, Kind.RELEASE)
        assert action.cause == Cause(name="pod-terminating")


@given(views())
def test_property_decide_is_deterministic(v: NodeView) -> None:
    """The same view always gives the same plan (level-triggered: re-deciding is safe)."""
    assert decide(v, POLICY) == decide(replace(v), POLICY)


@pytest.mark.parametrize("grace", [0.0, 120.0])
def test_policy_grace_is_respected(grace: float) -> None:
    """failure_grace_s decides when a Ready pod's SLURM failure starts to count."""
    plan = decide(
        view(slurm=slurm("IDLE+FAIL"), pod_ready_since=NOW - 60), Policy(failure_grace_s=grace)
    )
    assert (Kind.CORDON in [a.kind for a in plan.actions]) is (grace < 60)


def test_failure_set_before_the_pod_was_ready_is_not_blamed_on_its_node() -> None:
    """A SLURM failure older than the current pod belongs to the hardware the pod left."""
    from datetime import datetime

    old = replace(
        slurm("IDLE+FAIL", "Kill task failed"), reason_time=datetime.fromtimestamp(NOW - 3000)
    )
    assert decide(view(slurm=old, pod_ready_since=NOW - 600), POLICY).actions == ()
    fresh = replace(old, reason_time=datetime.fromtimestamp(NOW - 60))
    assert Kind.CORDON in [
        a.kind for a in decide(view(slurm=fresh, pod_ready_since=NOW - 600), POLICY).actions
    ]


def test_a_failure_already_remediated_is_left_to_an_operator() -> None:
    """Once slonkd evicted for a failure, the same failure is not acted on again."""
    from slonkd.core.slurm_node import failure_fingerprint

    failed = slurm("IDLE+FAIL", "Kill task failed")
    plan = decide(view(slurm=failed, handled_failure=failure_fingerprint(failed)), POLICY)
    assert plan.actions == ()
    assert any("remediated already" in n for n in plan.notes)


def test_pods_sharing_a_k8s_node_agree_on_its_marks() -> None:
    """A failing pod's cordon is not undone by a healthy neighbour on the same K8s node."""
    from slonkd.core.fleet_decide import merge_shared_nodes

    marked = knode(
        cordoned=True,
        by_slonkd=True,
        healthy=False,
        taints=(Taint(key=FAILURE_TAINT, effect=TaintEffect.NO_SCHEDULE),),
    )
    sick = view(
        node=NodeName("w-0"), slurm=slurm("IDLE+FAIL", "Kill task failed"), kube_node=marked
    )
    well = view(node=NodeName("w-1"), kube_node=marked)
    plans = merge_shared_nodes([sick, well], [decide(sick, POLICY), decide(well, POLICY)])
    assert not [
        a for a in plans[1].actions if a.kind in (Kind.UNCORDON, Kind.UNTAINT, Kind.SET_CONDITION)
    ]
    both_fresh = [
        view(node=NodeName("w-0"), slurm=slurm("IDLE+FAIL", "Kill task failed")),
        view(node=NodeName("w-1"), slurm=slurm("IDLE+FAIL", "Kill task failed")),
    ]
    merged = merge_shared_nodes(both_fresh, [decide(v, POLICY) for v in both_fresh])
    cordons = [a for p in merged for a in p.actions if a.kind is Kind.CORDON]
    assert len(cordons) == 1  # one cordon of the shared node

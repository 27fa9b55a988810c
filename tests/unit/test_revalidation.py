"""Proof of health before return: the pure rule (judge) and how ``decide`` applies it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from slonkd.core.coordinator_state import CoordinatorState, StateCorrupt
from slonkd.core.decide import decide
from slonkd.core.health import CheckResult, Remediation, Verdict, fail, ok, unknown, warn
from slonkd.core.messages import AgentStatus, Channel, decode, encode, node_topic
from slonkd.core.plan import Kind, Plan, Policy, Remediations
from slonkd.core.reasons import Cause, highest
from slonkd.core.revalidation import (
    REVALIDATING,
    TIMED_OUT,
    Answer,
    Pending,
    RevalidationPolicy,
    Step,
    failed_checks,
    judge,
)
from tests.unit.coordinator_fakes import NOW, kinds, slurm, view

RP = RevalidationPolicy(timeout_s=600, recheck_s=30)
POLICY = Policy(failure_grace_s=120, unready_grace_s=60, revalidation=RP)
SENT = Pending(since=NOW - 100, pod_uid="u1", command="cmd-00001", requested_at=NOW - 10)


def answer(*results: CheckResult, command: str = "cmd-00001", kube_node: str = "kn-0") -> Answer:
    """An answer to ``command`` measured on ``kube_node``."""
    return Answer(command=command, kube_node=kube_node, verdicts={r.check: r for r in results})


def judged(pending: Pending, got: Answer | None, **kw: Any) -> Step:
    """The step ``judge`` takes for the pod u1 on kn-0 at NOW (``kw`` overrides)."""
    args: dict[str, Any] = {
        "pod_uid": "u1",
        "kube_node": "kn-0",
        "now": NOW,
        "last_step_at": 0.0,
        "policy": RP,
    }
    args.update(kw)
    return judge(pending, got, **args).step


@pytest.mark.parametrize(
    ("pending", "got", "kw", "step"),
    [
        # nothing sent yet, or sent to the pod the node had before: send (again)
        (Pending(since=NOW), None, {}, Step.REQUEST),
        (replace(SENT, pod_uid="u0"), answer(ok("gpu")), {}, Step.REQUEST),
        # sent, no answer yet: wait; no answer for recheck_s: send again
        (SENT, None, {}, Step.WAIT),
        (replace(SENT, requested_at=NOW - 31), None, {}, Step.REQUEST),
        # the answer to this command with every check ok: passed
        (SENT, answer(ok("gpu"), ok("slurmd")), {}, Step.PASSED),
        # an answer to another (older) command proves nothing
        (SENT, answer(ok("gpu"), command="cmd-00000"), {}, Step.WAIT),
        # measured on another K8s node (the hardware the pod left): proves nothing here
        (SENT, answer(ok("gpu"), kube_node="kn-9"), {}, Step.WAIT),
        # unknown, warn and fail are not a pass; nor is an answer without any check
        (SENT, answer(ok("gpu"), unknown("dcgm-diag", "tool-missing")), {}, Step.WAIT),
        (SENT, answer(warn("gpu", "gpu-xid-79")), {}, Step.WAIT),
        (SENT, answer(fail("gpu", "gpu-xid-79", Remediation.REBOOT)), {}, Step.WAIT),
        (SENT, answer(), {}, Step.WAIT),
        # a failed answer: sent again after recheck_s, or after retry_s once the agent's own
        # verdicts all pass (a fixed node returns in seconds)
        (replace(SENT, requested_at=NOW - 3), answer(warn("gpu", "x")), {}, Step.WAIT),
        (
            replace(SENT, requested_at=NOW - 3),
            answer(warn("gpu", "x")),
            {"healthy": True},
            Step.REQUEST,
        ),
        (
            replace(SENT, requested_at=NOW - 1),
            answer(warn("gpu", "x")),
            {"healthy": True},
            Step.WAIT,
        ),
        # past the timeout without a pass: the ladder's next rung
        (replace(SENT, since=NOW - 601), None, {}, Step.TIMED_OUT),
        (replace(SENT, since=NOW - 601), answer(ok("gpu")), {}, Step.PASSED),
        # ... counted from the last ladder step when that came later
        (replace(SENT, since=NOW - 601), None, {"last_step_at": NOW - 5}, Step.WAIT),
    ],
)
def test_judge_table(pending: Pending, got: Answer | None, kw: dict[str, Any], step: Step) -> None:
    """Only the answer to the last recheck, from the pod's K8s node, all ok, is a pass."""
    assert judged(pending, got, **kw) is step


def test_required_checks_must_be_in_the_answer_and_pass() -> None:
    """A check the policy names (dcgm-diag) that the agent did not report is not a pass."""
    required = ("dcgm-diag",)
    assert failed_checks(answer(ok("gpu")), required) == ("dcgm-diag",)
    assert failed_checks(answer(ok("gpu"), ok("dcgm-diag")), required) == ()
    policy = replace(RP, required=required)
    assert judged(SENT, answer(ok("gpu")), policy=policy) is Step.WAIT
    assert judged(SENT, answer(ok("gpu"), ok("dcgm-diag")), policy=policy) is Step.PASSED


def test_a_timed_out_revalidation_still_rechecks_when_due() -> None:
    """Timed out: the ladder acts, and rechecks go on (a later pass still returns the node)."""
    late = replace(SENT, since=NOW - 601, requested_at=NOW - 31)
    got = judge(late, None, pod_uid="u1", kube_node="kn-0", now=NOW, last_step_at=0, policy=RP)
    assert got.step is Step.TIMED_OUT
    assert got.send
    fresh = replace(late, requested_at=NOW - 1)
    got = judge(fresh, None, pod_uid="u1", kube_node="kn-0", now=NOW, last_step_at=0, policy=RP)
    assert got.step is Step.TIMED_OUT
    assert not got.send


def _slurm_kinds(plan: Plan) -> list[tuple[str, str]]:
    return [(k, c) for k, c in kinds(plan) if k in ("drain", "release", "down")]


def test_an_ended_health_failure_becomes_revalidating_first() -> None:
    """The check passes again: drain ``revalidating`` first, the health cause stays this pass."""
    ended = view(slurm=slurm("IDLE+DRAIN", "slonkd:health:slurmd-dead"))
    plan = decide(ended, POLICY)
    assert _slurm_kinds(plan) == [("drain", "revalidating")]
    drain = next(a for a in plan.actions if a.kind is Kind.DRAIN)
    assert not drain.budgeted  # the node is out already: only its cause changes
    assert plan.revalidation is None  # not held yet: no recheck before the drain holds


def test_revalidating_holds_then_the_failure_is_released_and_a_recheck_asked() -> None:
    """Both held: the failure is released, revalidating stays, the leader sends a recheck."""
    both = view(
        slurm=slurm(
            "IDLE+DRAIN", "slonkd:health:slurmd-dead", ("health:slurmd-dead", "revalidating")
        )
    )
    plan = decide(both, POLICY)
    assert _slurm_kinds(plan) == [("release", "health:slurmd-dead")]
    assert plan.revalidation is not None
    assert plan.revalidation.step is Step.REQUEST


def test_only_a_passing_answer_to_the_recheck_resumes() -> None:
    """Held revalidating: waiting and failing answers keep it; the passing one releases it."""
    held = slurm("IDLE+DRAIN", "slonkd:revalidating")
    waiting = decide(view(slurm=held, revalidation=SENT), POLICY)
    assert _slurm_kinds(waiting) == []
    assert waiting.revalidation is not None
    assert waiting.revalidation.step is Step.WAIT
    bad = answer(ok("gpu"), warn("slurmd", "slurmd-dead"))
    failing = decide(view(slurm=held, revalidation=SENT, recheck=bad), POLICY)
    assert _slurm_kinds(failing) == []
    assert failing.revalidation is not None
    assert failing.revalidation.pending == ("slurmd",)
    good = decide(view(slurm=held, revalidation=SENT, recheck=answer(ok("gpu"))), POLICY)
    assert _slurm_kinds(good) == [("release", "revalidating")]
    assert good.revalidation is not None
    assert good.revalidation.step is Step.PASSED


def test_a_lost_record_is_derived_from_slurms_reason() -> None:
    """No record (a failover that lost it): judged from the reason, a recheck is asked."""
    held = slurm("IDLE+DRAIN", "slonkd:revalidating")
    plan = decide(view(slurm=held), POLICY)
    assert _slurm_kinds(plan) == []
    assert plan.revalidation is not None
    assert plan.revalidation.step is Step.REQUEST


def test_a_timeout_takes_the_ladders_next_rung() -> None:
    """No pass within the timeout: a failure on the K8s node and the ladder's next step."""
    held = slurm("IDLE+DRAIN", "slonkd:revalidating")
    late = replace(SENT, since=NOW - 700)
    evicted_once = Remediations(attempts=1, last_at=NOW - 700)
    cooled = replace(POLICY, remediation_cooldown_s=300)
    plan = decide(view(slurm=held, revalidation=late, remediation=evicted_once), cooled)
    assert plan.failure == TIMED_OUT
    assert ("request-reboot", "revalidating:timeout") in kinds(plan)  # rung 2 after an eviction
    assert _slurm_kinds(plan) == []  # and no return


def test_a_remediated_node_that_slurm_returned_is_drained_for_revalidation() -> None:
    """The ladder acted (a record), SLURM put the node back by itself: drain it, budgeted."""
    plan = decide(view(slurm=slurm("IDLE"), revalidation=Pending(since=NOW - 5)), POLICY)
    assert _slurm_kinds(plan) == [("drain", "revalidating")]
    assert next(a for a in plan.actions if a.kind is Kind.DRAIN).budgeted
    # while SLURM's own reason holds the node, slonkd writes nothing
    down = decide(
        view(slurm=slurm("DOWN", "Not responding"), revalidation=Pending(since=NOW - 5)), POLICY
    )
    assert _slurm_kinds(down) == []


def test_a_node_returned_long_after_the_ladder_acted_gets_its_whole_timeout() -> None:
    """Waiting for SLURM or an operator to put the node back does not count against the proof.

    Evicted two hours ago, back now: held ``revalidating`` and rechecked, not timed out at
    once (which would take the ladder's next rung for a node whose new pod nobody checked).
    """
    long_ago = Remediations(attempts=1, last_at=NOW - 7200)
    waiting = Pending(since=NOW - 7200)
    back = decide(view(slurm=slurm("IDLE"), revalidation=waiting, remediation=long_ago), POLICY)
    assert _slurm_kinds(back) == [("drain", "revalidating")]
    held = replace(
        slurm("IDLE+DRAIN", "slonkd:revalidating"),
        reason_time=datetime.fromtimestamp(NOW - 5, UTC),
    )
    plan = decide(view(slurm=held, revalidation=waiting, remediation=long_ago), POLICY)
    assert plan.failure is None, plan.notes
    assert plan.revalidation is not None
    assert plan.revalidation.step is Step.REQUEST
    # once the recheck went out, the timeout counts from the node's return, not from then
    began = plan.revalidation.since
    assert began == NOW - 5
    sent = Pending(since=began, pod_uid="u1", command="cmd-00001", requested_at=NOW - 1)
    late = decide(view(slurm=held, revalidation=sent, remediation=long_ago, now=NOW + 650), POLICY)
    assert late.failure == TIMED_OUT


def test_revalidation_off_releases_as_before() -> None:
    """``revalidate: false``: an ended failure is released; a held revalidating too."""
    off = replace(POLICY, revalidation=replace(RP, enabled=False))
    ended = view(slurm=slurm("IDLE+DRAIN", "slonkd:health:slurmd-dead"))
    assert _slurm_kinds(decide(ended, off)) == [("release", "health:slurmd-dead")]
    held = view(slurm=slurm("IDLE+DRAIN", "slonkd:revalidating"))
    assert _slurm_kinds(decide(held, off)) == [("release", "revalidating")]


def test_a_new_failure_while_revalidating_keeps_both() -> None:
    """The check fails on the new pod: drained for it too, revalidating stays."""
    held = slurm("IDLE+DRAIN", "slonkd:revalidating")
    failing = {"slurmd": fail("slurmd", "slurmd-dead", Remediation.RESTART_POD)}
    plan = decide(view(slurm=held, revalidation=SENT, health=failing), POLICY)
    assert ("drain", "health:slurmd-dead") in _slurm_kinds(plan)
    assert ("release", "revalidating") not in _slurm_kinds(plan)


def test_the_reason_shows_a_failure_before_revalidating() -> None:
    """Health and revalidating held: the reason names the failure (ties by name)."""
    assert highest(frozenset({REVALIDATING, Cause(name="health", detail="x")})).name == "health"
    assert REVALIDATING.priority < Cause(name="k8s-cordoned").priority


def test_state_keeps_revalidations_across_a_round_trip() -> None:
    """The state ConfigMap keeps records; older states read as none; garbage is corrupt."""
    state = CoordinatorState(revalidating={"w-0": SENT})
    assert CoordinatorState.from_data(state.to_data()) == state
    older = {k: v for k, v in state.to_data().items() if k != "revalidating"}
    assert CoordinatorState.from_data(older).revalidating == {}
    with pytest.raises(StateCorrupt):
        CoordinatorState.from_data({**state.to_data(), "revalidating": '{"w-0": {"since": -1}}'})


def test_an_answering_status_round_trips_and_plain_ones_are_unchanged() -> None:
    """``answers`` is carried when set and left out when empty (older readers accept those)."""
    topic = node_topic("lab", "w-0", Channel.STATUS)
    status = AgentStatus(node="w-0", online=True, health={"gpu": "ok"}, answers="cmd-00001")
    assert decode(topic, encode(status)) == status
    plain = AgentStatus(node="w-0", online=True)
    assert b"answers" not in encode(plain)
    assert decode(topic, encode(plain)) == plain
    assert Verdict.OK.value == "ok"


def test_status_and_explain_say_what_is_pending_and_since_when() -> None:
    """The status row and ``slonkd status``'s table name the checks pending and the start."""
    from slonkd.cli.ops import render_table
    from slonkd.core.status import explain, node_row

    held = view(
        slurm=slurm("IDLE+DRAIN", "slonkd:revalidating"),
        revalidation=replace(SENT, requested_at=NOW - 1),
        recheck=answer(ok("gpu"), unknown("dcgm-diag", "tool-missing")),
    )
    plan = decide(held, POLICY)
    row = node_row(held, plan, {})
    assert row["revalidation"]["pending_checks"] == ["dcgm-diag"]
    assert row["revalidation"]["step"] == "wait"
    assert row["revalidation"]["recheck"] == "cmd-00001"
    assert row["revalidation"]["since"].startswith("1970-01-01T02:45:00")  # NOW - 100
    assert explain(held, plan, {})["revalidation"] == row["revalidation"]
    table = render_table({"state": {}, "budget": [], "nodes": [row]})
    assert "revalidating w-0 since 1970-01-01T02:45:00+00:00: wait, pending dcgm-diag" in table
    assert "revalidation" not in node_row(view(), decide(view(), POLICY), {})

"""Health causes meet slonkd's reason grammar, from the agent's verdict to the drain.

What the agent publishes, the coordinator accepts, and what the coordinator drains for,
slonkd recognises as its own and lifts.

Check names such as ``mount:/home`` are outside the cause grammar (a colon and a slash);
every health cause goes through one sanitiser (``cause_detail``) on its way into a verdict,
a bus payload and a SLURM reason.
"""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from slonkd.adapters.health.checks import Check
from slonkd.core import node_health, reasons
from slonkd.core.decide import decide
from slonkd.core.fleet_decide import suspect_common_causes
from slonkd.core.health import (
    CheckResult,
    Hysteresis,
    Remediation,
    Verdict,
    decode_verdict,
    encode_verdict,
    ok,
)
from slonkd.core.kube_objects import KubeNodeName, Node, NodeCondition
from slonkd.core.messages import AgentStatus, Channel, decode, encode, node_topic
from slonkd.core.plan import Kind, NodeView, Policy
from slonkd.core.reasons import Cause, ReasonOwner, encode_causes, format_reason, parse_reason
from slonkd.core.revalidation import REVALIDATING
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.runtime.agent.health_loop import HealthLoop
from tests.unit.pods import running_pod

NOW = 10_000.0
POLICY = Policy(failure_grace_s=120, unready_grace_s=60)
TOPIC = node_topic("lab", "w-0", Channel.STATUS)


def _slurm(node: str, state: str = "IDLE", reason: str = "") -> SlurmNode:
    base, *flags = state.split("+")
    return SlurmNode(name=NodeName(node), state=NodeState.from_tokens(base, flags), reason=reason)


def _view(node: str = "w-0", **kw: object) -> NodeView:
    """A settled view of ``node`` (pod Ready for an hour, K8s node Ready), ``kw`` overriding."""
    pod = running_pod(node, uid=f"u-{node}", on=f"kn-{node}")
    kube = Node(
        name=KubeNodeName(f"kn-{node}"),
        uid=f"n-{node}",
        resource_version="1",
        unschedulable=False,
        conditions=(NodeCondition(type="Ready", status="True"),),
    )
    base: dict[str, object] = {
        "node": NodeName(node),
        "now": NOW,
        "slurm": _slurm(node),
        "pod": pod,
        "kube_node": kube,
        "pod_ready_since": NOW - 3600,
        "health": {},
    }
    base.update(kw)
    return NodeView(**base)  # type: ignore[arg-type]


def _accepted(health: dict[str, str]) -> AgentStatus:
    """The status as the coordinator decodes it (raises ParseError when it would drop it)."""
    status = AgentStatus(node="w-0", online=True, pod="w-0", health=health, at=NOW)
    payload = decode(TOPIC, encode(status))
    assert isinstance(payload, AgentStatus)
    return payload


def test_a_causeless_health_fail_drains_for_a_cause_slonkd_owns_and_lifts() -> None:
    """A cause-less fail drains for a cause slonkd reads back as its own, and lifts it.

    The check ``mount:/x`` fails without a cause (as the coordinator decodes ``fail``); the
    reason written for it must parse as slonkd's, and the drain is lifted once the check
    passes (issue 15.7: it was ``slonkd:health:mount:/x``, foreign, never lifted).
    """
    failing = {"mount:/x": decode_verdict("mount:/x", "fail")}
    plan = decide(_view(health=failing), POLICY)
    (drain,) = [a for a in plan.actions if a.kind is Kind.DRAIN]
    written = format_reason(drain.cause, "health check failed")
    read = parse_reason(written)
    assert read.owner is ReasonOwner.SLONKD, written
    assert read.cause == drain.cause
    assert str(drain.cause) == "health:mount-x"
    healed = decide(
        _view(slurm=_slurm("w-0", "IDLE+DRAIN", written), health={"mount:/x": ok("mount:/x")}),
        POLICY,
    )
    # first held for revalidation (slonkd.core.revalidation), then the cause itself is lifted
    assert (Kind.DRAIN, REVALIDATING) in [(a.kind, a.cause) for a in healed.actions]
    both = replace(
        _slurm("w-0", "IDLE+DRAIN", written),
        extra=encode_causes("", frozenset({drain.cause, REVALIDATING})),
    )
    lifted = decide(_view(slurm=both, health={"mount:/x": ok("mount:/x")}), POLICY)
    assert (Kind.RELEASE, drain.cause) in [(a.kind, a.cause) for a in lifted.actions]


def test_suspected_causeless_health_causes_match_the_drains_slonkd_holds() -> None:
    """Failing and already-drained nodes count as one suspected cause, in slonkd's grammar.

    Two nodes fail ``mount:/x`` without a cause and a third is drained for it already: the
    three count as one cause (suspected at three).
    """
    failing = {"mount:/x": decode_verdict("mount:/x", "fail")}
    first = decide(_view("w-0", health=failing), POLICY)
    (drain,) = [a for a in first.actions if a.kind is Kind.DRAIN]
    drained = _slurm("w-2", "IDLE+DRAIN", format_reason(drain.cause, "health check failed"))
    views = [
        _view("w-0", health=failing),
        _view("w-1", health=failing),
        _view("w-2", slurm=drained, health={}),
    ]
    plans = [decide(v, POLICY) for v in views]
    _, suspected = suspect_common_causes(views, plans, min_nodes=3, fraction=0.5)
    assert suspected == frozenset({drain.cause})
    assert all(Cause.parse(str(c)) == c for c in suspected)


async def test_a_hung_home_publishes_one_stable_accepted_cause_until_it_answers() -> None:
    """A hung NFS home gives one stable, accepted fail verdict until it answers again.

    Every probe misses its deadline: one fail verdict with one cause and remediation across
    runs, every status the agent would publish is one the coordinator's decoder accepts, and
    the check clears once the mount answers (issue 16.5: ``fail:mount:/home-deadline-missed:
    manual`` was rejected, and the next run swapped it for ``fail:nfs-hung``, no remediation).
    """
    hung = node_health.judge_mount("/home", responded=False, is_mount=None)
    fine = node_health.judge_mount("/home", responded=True, is_mount=True)
    script = iter([hung] * 10 + [fine] * 3)

    async def run() -> CheckResult:
        return next(script)

    check = Check(name="mount:/home", period_s=1.0, run=run)
    reported: list[CheckResult] = []

    async def on_change(result: CheckResult) -> None:
        reported.append(result)

    loop = HealthLoop(
        checks=[check], policy=Hysteresis(fail_n=3, window_m=5, clear_k=3), on_change=on_change
    )
    published: list[str] = []
    for _ in range(13):
        await loop.run_once(check)
        health = {name: encode_verdict(r) for name, r in loop.verdicts().items()}
        published.append(_accepted(health).health["mount:/home"])
    fails = {p for p in published if p.startswith("fail")}
    assert fails == {"fail:mount-home-deadline-missed:manual"}
    assert published[-1] == "ok"
    assert [r.verdict for r in reported] == [Verdict.UNKNOWN, Verdict.FAIL, Verdict.OK]
    decoded = decode_verdict("mount:/home", "fail:mount-home-deadline-missed:manual")
    plan = decide(_view(health={"mount:/home": decoded}), POLICY)
    assert str(plan.failure) == "health:mount-home-deadline-missed"
    assert Kind.MARK_MANUAL in [a.kind for a in plan.actions]


def test_any_cause_text_is_encoded_as_a_verdict_the_coordinator_accepts() -> None:
    """Any cause text becomes a grammar-safe cause, so the verdict encoding always decodes.

    Capitals, colons, slashes, spaces, non-ASCII or too many characters included.
    """
    texts = ["Mount:/Home Dir", "nfs-hung", "x" * 200, ":::", "", "Ünïcode/ö"]
    for text in texts:
        result = CheckResult(
            check="c", verdict=Verdict.FAIL, cause=text, remediation=Remediation.REBOOT
        )
        back = _accepted({"c": encode_verdict(result)}).health["c"]
        assert decode_verdict("c", back).cause == result.cause


def test_cause_detail_examples() -> None:
    """Known causes are kept as they are; check names map to readable, stable causes."""
    assert reasons.cause_detail("gpu-xid-79") == "gpu-xid-79"
    assert reasons.cause_detail("mount:/home") == "mount-home"
    assert reasons.cause_detail("mount:/home-deadline-missed") == "mount-home-deadline-missed"
    assert reasons.cause_detail("disk:/") == "disk"
    assert reasons.cause_detail("") == reasons.cause_detail(":/") == "unnamed"
    long_a, long_b = "mount:/" + "a" * 80, "mount:/" + "a" * 79 + "b"
    assert reasons.cause_detail(long_a) != reasons.cause_detail(long_b)
    assert len(reasons.cause_detail(long_a)) <= 48


@given(st.text(max_size=300))
def test_cause_detail_is_in_every_grammar_and_deterministic(text: str) -> None:
    """Any text maps to one detail that every reader accepts; a detail maps to itself.

    The readers: a SLURM reason, a bus verdict and a cause set in ``extra``.
    """
    detail = reasons.cause_detail(text)
    assert detail == reasons.cause_detail(text)
    assert reasons.cause_detail(detail) == detail
    cause = Cause(name="health", detail=detail)
    assert Cause.parse(str(cause)) == cause
    assert parse_reason(format_reason(cause, "x")).cause == cause
    _accepted({"c": f"fail:{detail}:manual"})
    assert json.loads(json.dumps(str(cause))) == str(cause)


def test_the_agent_publishes_only_statuses_the_coordinator_decodes() -> None:
    """The agent checks its status with the coordinator's decoder before publishing.

    A check name outside the bus grammar (a space in a mount path) goes out under a safe
    key, and a status the decoder still refuses (more than 64 checks) goes out with no
    verdicts at all (unknown to the coordinator, never a stale retained status) and the
    decoder's reason.
    """
    from slonkd.runtime.agent.commands import publishable_status

    verdicts = {"mount:/my home": "fail:mount-my-home-deadline-missed:manual", "xid": "ok"}
    status = AgentStatus(node="w-0", online=True, pod="w-0", health=verdicts, at=NOW)
    sent, error = publishable_status(TOPIC, status)
    assert error == ""
    assert _accepted(sent.health).health == {
        "mount-my-home": "fail:mount-my-home-deadline-missed:manual",
        "xid": "ok",
    }
    crowded = AgentStatus(
        node="w-0", online=True, health={f"c{i}": "ok" for i in range(65)}, at=NOW
    )
    sent, error = publishable_status(TOPIC, crowded)
    assert "health" in error
    assert sent.health == {}
    assert _accepted(sent.health).online

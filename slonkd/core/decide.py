"""The decision core: ``decide(view, policy) -> Plan`` for one node, pure and total.

A :class:`~slonkd.core.plan.NodeView` is a frozen snapshot of everything slonkd knows about one
node: the worker pod, the Kubernetes node it runs on, the SLURM node, health verdicts, the
operator's hold and pause, and remediation history (the types are :mod:`slonkd.core.plan`'s).
:func:`decide` returns the actions that make SLURM and Kubernetes agree, each with its cause,
its writer (agent or coordinator, per the table in docs/architecture.md) and whether it counts
against the disruption budget; the Kubernetes side (marks and the remediation ladder) is
planned by :mod:`slonkd.core.kube_actions`. Callers execute only the actions of their own
writer; the adapters re-check ownership right before writing (compare-and-set), so a stale
view can at worst do nothing.

The rules, highest priority first:

1. An operator's hold on the node, or a global pause: no action at all.
2. A SLURM state or reason that is not slonkd's (an operator's drain or down, SLURM's own
   failure reason on a node slonkd does not hold): slonkd writes nothing to SLURM.
   An operator's cordon is never undone.
3. A SLURM-reported failure on a node whose pod has been Running and Ready past a grace
   (lifecycle is not failure) -> cordon, taint, ``SlurmHealthy=False``, Event, remediation.
   A failure reason set before the current pod became Ready is the past of the SLURM node
   (its pod may now run on other hardware) and does not count against this K8s node.
4. A health verdict ``fail`` -> SLURM drain ``health:<cause>`` and the same K8s marks.
5. Kubernetes maintenance (cordon by someone else, NoSchedule/NoExecute taints that are
   not slonkd's, NotReady, deletion) -> drain; a node whose K8s node is being deleted is
   set DOWN once drained with no job left (never while a job runs: it could not be saved).
   A taint the node's worker pod tolerates by design (a managed GPU pool's
   ``nvidia.com/gpu=present:NoSchedule``) is the pool's nature, not maintenance
   (:mod:`slonkd.core.tolerations`: Kubernetes' matching, but a wildcard toleration or one
   with ``tolerationSeconds`` never hides maintenance).
6. Pod lifecycle: terminating -> drain (agent, not budgeted); absent, not ready or
   restarting past a grace -> drain (coordinator).
7. Healthy: every slonkd cause that no longer applies is released, each by its writer;
   the node resumes only when none is left (the adapter's compare-and-set). A failure
   cause (``slurm-*``, ``health``) that ends is first replaced by ``revalidating``, held
   until the agent of the node's pod answers a recheck with every check passing
   (:mod:`slonkd.core.revalidation`); past its timeout the ladder takes its next rung. slonkd's own
   cordon, taints and condition are undone once no failure cause remains (on a K8s node
   shared by several pods, see :func:`slonkd.core.fleet_decide.merge_shared_nodes`).

No action ever kills a job: a ``Down`` is decided only for a node that is drained with no
job left on it.
"""

from __future__ import annotations

from dataclasses import replace

from slonkd.core.errors import ParseError
from slonkd.core.health import Remediation, Verdict
from slonkd.core.kube_actions import kube_actions
from slonkd.core.kube_objects import Node, PodPhase, TaintEffect, Toleration
from slonkd.core.plan import Action, Kind, NodeView, Plan, Policy, Writer
from slonkd.core.reasons import Cause, ReasonOwner, cause_detail, decode_causes, parse_reason
from slonkd.core.revalidation import (
    REVALIDATING,
    TIMED_OUT,
    Judgement,
    Pending,
    Step,
    is_failure,
    judge,
)
from slonkd.core.slurm_node import DrainStatus, SlurmNode, failure_fingerprint
from slonkd.core.tolerations import tolerated

REASON_CLOCK_SLACK_S = 2.0
"""SLURM stamps reasons to the second: comparisons with observed times allow this much."""

# Causes each writer owns (docs/architecture.md, "Who writes what").
AGENT_CAUSES = frozenset({"pod-terminating"})
JOB_FAILURES = Cause(name="job-failures")
"""A node that keeps failing multi-node jobs (:mod:`slonkd.core.job_blame`); an operator's
resume ends it, never slonkd."""


def _c(name: str, detail: str = "") -> Cause:
    return Cause(name=name, detail=detail[:64])


def _writer_of(cause: Cause) -> Writer:
    return Writer.AGENT if cause.name in AGENT_CAUSES else Writer.COORDINATOR


def held_causes(slurm: SlurmNode) -> frozenset[Cause] | None:
    """slonkd's causes on the node, or None when SLURM's state is not slonkd's to touch.

    Only a reason that holds the node counts (``live_reason``): SLURM 24.11 keeps the text of
    an old reason after a resume, and that leftover is nobody's.
    """
    reason = parse_reason(slurm.live_reason)
    held = slurm.state.down or slurm.state.failed or slurm.state.drain is not DrainStatus.NONE
    if reason.owner in (ReasonOwner.FOREIGN, ReasonOwner.SLURM):
        return None
    if reason.owner is ReasonOwner.NONE:
        return None if held else frozenset()
    try:
        causes = decode_causes(slurm.extra)
    except ParseError:
        return None
    return causes | {reason.cause} if reason.cause else causes


def _slurm_failure(view: NodeView, policy: Policy) -> str | None:
    """SLURM's own failure on a node whose pod is settled (lifecycle is not failure)."""
    s = view.slurm
    if s is None or view.pod is None or view.pod.terminating or not view.pod.ready:
        return None
    if view.pod_ready_since is None or view.now - view.pod_ready_since < policy.failure_grace_s:
        return None
    if (
        s.reason_time is not None
        and s.reason_time.timestamp() + REASON_CLOCK_SLACK_S < view.pod_ready_since
    ):
        return None  # set before this pod was Ready: it belongs to the node's past, not to it
    reason = s.live_reason  # a leftover text after a resume is no failure (24.11 keeps it)
    owner = parse_reason(reason).owner
    if owner is ReasonOwner.SLURM:
        return reason.split(" [")[0][:60] or "slurm-reported"
    if owner is ReasonOwner.NONE and (s.state.failed or s.state.down):
        return str(s.state)
    return None


def _maintenance(
    node: Node | None, tolerations: tuple[Toleration, ...], notes: list[str]
) -> Cause | None:
    """Kubernetes maintenance on the pod's K8s node; a taint its pod tolerates is none."""
    if node is None:
        return None
    if node.deletion_timestamp:
        return _c("k8s-deleted")
    if node.unschedulable and not node.cordoned_by_slonkd:
        return _c("k8s-cordoned")
    foreign = [
        t
        for t in node.taints
        if not t.slonk_key
        and t.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)
        and not t.key.startswith("node.kubernetes.io/not-ready")
        and not t.key.startswith("node.kubernetes.io/unreachable")
        and t.key != "node.kubernetes.io/unschedulable"
    ]
    if foreign:  # most nodes of most fleets carry none
        natural = [t for t in foreign if tolerated(t, tolerations)]
        if natural:
            shown = ", ".join(f"{t.key}={t.value}:{t.effect}" for t in natural[:4])
            notes.append(f"taint {shown} tolerated by the pod: the pool's nature, not maintenance")
        untolerated = [t for t in foreign if t not in natural]
        if untolerated:
            return _c("k8s-tainted", untolerated[0].key.rsplit("/", 1)[-1])
    if node.ready is False:
        return _c("k8s-notready")
    return None


def _lifecycle(view: NodeView, policy: Policy) -> Cause | None:
    pod = view.pod
    if pod is not None and pod.terminating:
        return _c("pod-terminating")
    if pod is not None and pod.ready and pod.phase is PodPhase.RUNNING:
        return None
    if (
        view.pod_unready_since is not None
        and view.now - view.pod_unready_since >= policy.unready_grace_s
    ):
        return _c("pod-not-ready")
    return None


def decide(view: NodeView, policy: Policy) -> Plan:
    """The plan for one node (see the module docstring for the rules)."""
    notes: list[str] = []
    kube = view.kube_node
    if view.paused:
        return Plan(node=view.node, notes=("slonkd is paused: no automated action",))
    if kube is not None and kube.held:
        return Plan(
            node=view.node, notes=(f"K8s node {kube.name} is on hold: no automated action",)
        )

    failure: Cause | None = None
    remediation = Remediation.NONE
    slurm_failure = _slurm_failure(view, policy)
    if (
        slurm_failure
        and view.slurm is not None
        and failure_fingerprint(view.slurm) == view.handled_failure
    ):
        notes.append(f"SLURM failure {slurm_failure!r} was remediated already; left to an operator")
        slurm_failure = None
    if slurm_failure:
        failure, remediation = _c("slurm-failure"), Remediation.RESTART_POD
        notes.append(f"SLURM reports a failure: {slurm_failure}")
    health_fails = sorted(
        (r for r in view.health.values() if r.verdict is Verdict.FAIL), key=lambda r: r.check
    )
    health_causes = {_c("health", cause_detail(r.cause or r.check)) for r in health_fails}
    if health_fails and failure is None:
        top = health_fails[0]
        failure, remediation = _c("health", cause_detail(top.cause or top.check)), top.remediation

    judgement = _revalidation(view, policy)
    if (
        failure is None
        and judgement is not None
        and judgement.step is Step.TIMED_OUT
        and _holds_revalidating(view)
    ):
        failure, remediation = TIMED_OUT, Remediation.RESTART_POD
        notes.append(f"revalidation timed out: {judgement.why}")

    wanted: set[Cause] = set(health_causes)
    tolerations = view.pod.tolerations if view.pod is not None else ()
    maintenance = _maintenance(kube, tolerations, notes)
    if maintenance is not None:
        wanted.add(maintenance)
    lifecycle = _lifecycle(view, policy)
    if lifecycle is not None:
        wanted.add(lifecycle)
    if view.job_blame:
        wanted.add(JOB_FAILURES)
        notes.append(f"blamed for failed jobs: {view.job_blame}")

    actions: list[Action] = []
    actions += _slurm_actions(view, wanted, notes, judgement)
    if kube is not None and any(a.cause == JOB_FAILURES for a in actions):
        # the evidence, with the drain (not budgeted: it takes nothing out, and a budgeted
        # K8s action would count every pod of the K8s node against the budget)
        actions.append(
            Action(
                kind=Kind.EVENT, writer=Writer.COORDINATOR, cause=JOB_FAILURES,
                key="JobFailures", detail=view.job_blame,
            )
        )  # fmt: skip
    actions += kube_actions(view, failure, remediation, policy, notes)
    return Plan(
        node=view.node,
        actions=tuple(actions),
        notes=tuple(notes),
        failure=failure,
        revalidation=judgement if _holds_revalidating(view) else None,
    )


def _holds_revalidating(view: NodeView) -> bool:
    held = held_causes(view.slurm) if view.slurm is not None else None
    return held is not None and REVALIDATING in held


def _revalidation(view: NodeView, policy: Policy) -> Judgement | None:
    """The revalidation's judgement, when one is in progress or a failure cause ends now."""
    s, pod = view.slurm, view.pod
    if not policy.revalidation.enabled or s is None or pod is None:
        return None
    held = held_causes(s) or frozenset()
    if view.revalidation is None and REVALIDATING not in held and not any(map(is_failure, held)):
        return None
    since = view.now  # a record lost (or never written): SLURM's reason says since when
    reason = parse_reason(s.live_reason)
    if reason.cause == REVALIDATING and s.reason_time is not None:
        since = min(since, s.reason_time.timestamp())
    pending = view.revalidation or Pending(since=since)
    if not pending.command:  # the ladder's record: the proof starts when the node came back
        pending = replace(pending, since=max(pending.since, since))
    return judge(
        pending,
        view.recheck,
        pod_uid=pod.uid,
        kube_node=pod.node_name or "",
        now=view.now,
        last_step_at=view.remediation.last_at,
        policy=policy.revalidation,
        healthy=bool(view.health)
        and all(r.verdict is Verdict.OK for r in view.health.values())
        and set(policy.revalidation.required) <= set(view.health),
    )


def _slurm_actions(
    view: NodeView, wanted: set[Cause], notes: list[str], judgement: Judgement | None = None
) -> list[Action]:
    s = view.slurm
    if s is None:
        notes.append("SLURM node not read: no SLURM action (unknown never means drained)")
        return []
    if not s.state.fully_recognised:
        notes.append(f"SLURM state {s.state} not recognised: no SLURM action")
        return []
    held = held_causes(s)
    if held is None:
        notes.append(
            f"SLURM state {s.state} / reason {s.reason[:80]!r} is not slonkd's: left alone"
        )
        return []
    ending = [c for c in held - wanted if is_failure(c) and not _cannot_release(view, c)]
    failing = any(is_failure(c) for c in wanted | (held - set(ending)))
    if (
        judgement is not None
        and judgement.step is not Step.PASSED
        and (REVALIDATING in held or ending or (_returned(view) and not failing))
    ):
        wanted.add(REVALIDATING)  # no resume before the new pod's checks passed
        notes.append(f"revalidating: {judgement.why}")
    out: list[Action] = []
    for cause in sorted(wanted - held):
        writer = _writer_of(cause)
        budgeted = cause.name != "pod-terminating"
        if cause == REVALIDATING:
            budgeted = not held  # replacing a cause keeps the node out; only this takes it out
        out.append(Action(kind=Kind.DRAIN, writer=writer, cause=cause, budgeted=budgeted))
    deleted = _c("k8s-deleted")
    if deleted in wanted and deleted in held and not s.state.down:
        # A deletion held by a finalizer gives the jobs time: drained first, DOWN only once
        # no job is left (it kills nothing then); the pod's preStop requeues the rest.
        if s.state.drain is DrainStatus.DRAINED:
            out.append(Action(kind=Kind.DOWN, writer=_writer_of(deleted), cause=deleted))
        else:
            notes.append("K8s node is being deleted: drained, waiting for its jobs to end")
    for cause in sorted(held - wanted):
        if cause in ending and REVALIDATING in wanted and REVALIDATING not in held:
            notes.append(f"keeping {cause}: released once revalidating holds the node")
            continue
        why_not = _cannot_release(view, cause)
        if why_not:
            notes.append(f"keeping {cause}: {why_not}")
            continue
        out.append(Action(kind=Kind.RELEASE, writer=_writer_of(cause), cause=cause))
    return out


def _returned(view: NodeView) -> bool:
    """The ladder acted on the node and no recheck went out since (a record without one).

    SLURM put it back by itself (a completed reboot). A record whose recheck went out but
    whose hold is gone was resumed by someone else: the node is theirs.
    """
    return view.revalidation is not None and not view.revalidation.command


def _cannot_release(view: NodeView, cause: Cause) -> str:
    """Why a held cause must stay although nothing asks for it now (unknown is not healthy)."""
    if view.slurm is not None and view.slurm.state.reboot_pending:
        return "a reboot is pending (a release would cancel it; it clears slonkd's hold)"
    if cause.name == "health":
        return "" if view.health else "no health verdicts known"
    if cause.name.startswith("k8s-"):
        return "" if view.kube_node is not None else "K8s node not seen"
    if cause.name.startswith("pod-"):
        pod = view.pod
        settled = (
            pod is not None and pod.ready and pod.phase is PodPhase.RUNNING and not pod.terminating
        )
        return "" if settled else "pod not Running and Ready"
    if cause == JOB_FAILURES:
        return "blamed for failed jobs: ended by an operator's resume once the node is repaired"
    if cause.name == "rollout":
        return "the rollout releases it once the node's new pod is Ready"
    if cause.name == REVALIDATING.name:
        return ""  # still wanted unless its judgement passed (or revalidation is off)
    return "cause unknown to this version of slonkd"

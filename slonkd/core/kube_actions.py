"""The Kubernetes side of a plan: slonkd's marks on a K8s node and the remediation ladder.

For a node with a failure (SLURM-reported or a health verdict, see :mod:`slonkd.core.decide`)
the coordinator cordons its K8s node, taints it :data:`FAILURE_TAINT`, sets the
``SlurmHealthy=False`` condition and records an Event; then the remediation ladder takes one
step per attempt past a cooldown: evict the pod (restart), request a reboot
(:data:`REBOOT_TAINT`), mark the node for manual repair (:data:`MANUAL_TAINT`). Once no failure
is left and the pod there is settled, slonkd's own marks are undone; an operator's cordon or
taint never is. Every action here is the coordinator's (:class:`~slonkd.core.plan.Writer`);
the executors are :mod:`slonkd.runtime.coordinating.executing` and
:mod:`slonkd.runtime.coordinating.remediating`.
"""

from __future__ import annotations

from slonkd.core.health import Remediation
from slonkd.core.plan import Action, Kind, NodeView, Policy, Writer
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import failure_fingerprint

FAILURE_TAINT = "slonk.dev/unhealthy"
"""The NoSchedule taint slonkd puts on a K8s node whose SLURM node failed."""
REBOOT_TAINT = "slonk.dev/reboot-requested"
"""NoSchedule taint (and annotation) asking the site's reboot tooling to reboot the node."""
MANUAL_TAINT = "slonk.dev/manual-repair"
"""NoSchedule taint (and annotation) marking a node that restarts and reboots did not fix."""
_HEALTHY = Cause(name="healthy")
"""The cause of undoing slonkd's marks."""


def kube_actions(
    view: NodeView,
    failure: Cause | None,
    remediation: Remediation,
    policy: Policy,
    notes: list[str],
) -> list[Action]:
    """The coordinator's actions on the view's K8s node (``notes`` gets what was left alone).

    With a ``failure``: slonkd's marks and, when ``policy.remediate``, the ladder's next step;
    without: the undoing of slonkd's own marks once the pod there is settled.
    """
    kube = view.kube_node
    if kube is None:
        return []
    co = Writer.COORDINATOR
    out: list[Action] = []
    ours = {t.key for t in kube.our_taints}
    others = sorted({t.key for t in kube.taints if t.slonk_key} - ours)
    if failure is not None:
        if not kube.unschedulable:
            out.append(Action(kind=Kind.CORDON, writer=co, cause=failure, budgeted=True))
        if not any(t.key == FAILURE_TAINT for t in kube.taints):  # anyone's will do
            # NoSchedule keeps the pod from coming back: it takes the node out like a cordon
            out.append(
                Action(kind=Kind.TAINT, writer=co, cause=failure, key=FAILURE_TAINT, budgeted=True)
            )
        if kube.slurm_healthy is not False:
            out.append(Action(kind=Kind.SET_CONDITION, writer=co, cause=failure, key="False"))
            out.append(Action(kind=Kind.EVENT, writer=co, cause=failure, key="SlurmUnhealthy"))
        if policy.remediate:
            present = {t.key for t in kube.taints} - ours
            for step in _remediate(view, failure, remediation, policy, notes):
                taint = MANUAL_TAINT if step.kind is Kind.MARK_MANUAL else step.key
                if step.kind in (Kind.REQUEST_REBOOT, Kind.MARK_MANUAL) and taint in present:
                    notes.append(f"{taint} on K8s node {kube.name} put there by someone else: left")
                    continue
                out.append(step)
        return out
    if holds_marks(view):
        # The failure is not seen now only because the pod is in its lifecycle (e.g. just
        # evicted by remediation): undoing the marks would let its replacement land back here.
        notes.append(
            f"keeping slonkd's marks on K8s node {kube.name}: its pod is not settled"
            " (or its eviction not seen yet)"
        )
        return out
    if kube.unschedulable and kube.cordoned_by_slonkd:
        out.append(Action(kind=Kind.UNCORDON, writer=co, cause=_HEALTHY))
    elif kube.unschedulable:
        notes.append(f"K8s node {kube.name} cordoned by someone else: never undone by slonkd")
    for key in sorted(ours):
        out.append(Action(kind=Kind.UNTAINT, writer=co, cause=_HEALTHY, key=key))
    for key in others:
        notes.append(f"taint {key} on K8s node {kube.name} was not added by slonkd: never removed")
    if kube.slurm_healthy is False:
        out.append(Action(kind=Kind.SET_CONDITION, writer=co, cause=_HEALTHY, key="True"))
    return out


def holds_marks(view: NodeView) -> bool:
    """slonkd's marks are on the K8s node and the pod there is not settled: keep them.

    Nor are they undone while the pod slonkd evicted for the SLURM failure they are for
    still shows on that node, settled, with that failure standing: the eviction's record
    (the failure handled, so not counted again) is read fresh from the state, the pod's
    deletion arrives through a watch, and a pass between the two must not lift the marks.
    """
    kube, pod = view.kube_node, view.pod
    if kube is None:
        return False
    ours = bool(kube.our_taints)
    marked = (kube.unschedulable and kube.cordoned_by_slonkd) or ours or kube.slurm_healthy is False
    return marked and (pod is None or pod.terminating or not pod.ready or _eviction_unseen(view))


def _eviction_unseen(view: NodeView) -> bool:
    """The pod here is the one slonkd evicted for the failure its cordon stands for."""
    kube, slurm = view.kube_node, view.slurm
    return (
        kube is not None
        and slurm is not None
        and kube.unschedulable
        and kube.marked_for == view.node
        and view.handled_failure == failure_fingerprint(slurm)  # never "": it holds a "|"
    )


def _remediate(
    view: NodeView, failure: Cause, remediation: Remediation, policy: Policy, notes: list[str]
) -> list[Action]:
    co = Writer.COORDINATOR
    history = view.remediation
    if history.attempts and view.now - history.last_at < policy.remediation_cooldown_s:
        notes.append(f"remediation cooling down after {history.attempts} attempt(s)")
        return []
    step = {
        Remediation.NONE: 99,
        Remediation.RESTART_POD: 0,
        Remediation.REBOOT: 1,
        Remediation.MANUAL: 2,
    }[remediation] + history.attempts
    if remediation is Remediation.NONE:
        return []
    if step == 0 and view.pod is not None and not view.pod.terminating:
        return [
            Action(kind=Kind.EVICT, writer=co, cause=failure, budgeted=True, detail=view.pod.name)
        ]
    if step <= 1:
        return [
            Action(
                kind=Kind.REQUEST_REBOOT, writer=co, cause=failure, budgeted=True, key=REBOOT_TAINT
            )
        ]
    return [Action(kind=Kind.MARK_MANUAL, writer=co, cause=failure, budgeted=True)]

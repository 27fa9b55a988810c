"""What ``slonkd status`` and ``slonkd explain`` show, built from one pass's views and plans.

Pure: one JSON-able row per node (SLURM state, K8s state, owner, reason, slonkd's causes,
since, drift) and the full explanation of one node's decision. Drift is what slonkd would
still change: the pending actions of the plan (empty when both sides already agree).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from slonkd.core.plan import NodeView, Plan
from slonkd.core.reasons import decode_causes, reason_owner
from slonkd.core.revalidation import Judgement


def _slurm_fields(view: NodeView) -> dict[str, Any]:
    s = view.slurm
    if s is None:
        return {"slurm_state": "unread", "reason": "", "owner": "", "causes": [], "since": None}
    reason = s.live_reason
    return {
        "slurm_state": str(s.state),
        "reason": reason,
        "owner": reason_owner(reason).value if reason else "",
        "causes": sorted(str(c) for c in decode_causes(s.extra)),
        "since": s.reason_time.isoformat() if s.reason_time and reason else None,
        "reason_user": s.reason_user or "",
    }


def _kube_state(view: NodeView) -> str:
    kube = view.kube_node
    if kube is None:
        return "unseen"
    parts = ["Ready" if kube.ready else "NotReady" if kube.ready is False else "Unknown"]
    if kube.unschedulable:
        parts.append("SchedulingDisabled" + ("(slonkd)" if kube.cordoned_by_slonkd else ""))
    parts.extend(f"taint:{t.key}" for t in kube.taints if t.key.startswith("slonk.dev/"))
    return ",".join(parts)


def node_row(view: NodeView, plan: Plan, refused: Mapping[str, str]) -> dict[str, Any]:
    """One node's line of ``slonkd status``."""
    pod = view.pod
    row: dict[str, Any] = {
        "node": str(view.node),
        "pod": "" if pod is None else ("Terminating" if pod.terminating else pod.phase.value),
        "pod_ready": bool(pod and pod.ready),
        "kube_node": "" if view.kube_node is None else str(view.kube_node.name),
        "kube_state": _kube_state(view),
        "hold": bool(view.kube_node is not None and view.kube_node.held),
        **_slurm_fields(view),
        "failure": "" if plan.failure is None else str(plan.failure),
        "drift": [f"{a.writer.value}:{a.kind.value}:{a.cause}" for a in plan.actions],
    }
    if str(view.node) in refused:
        row["budget"] = refused[str(view.node)]
    if plan.revalidation is not None:
        row["revalidation"] = revalidation_row(plan.revalidation)
    return row


def revalidation_row(judgement: Judgement) -> dict[str, Any]:
    """What a node held ``revalidating`` waits for: the step, pending checks, since when."""
    return {
        "step": judgement.step.value,
        "pending_checks": list(judgement.pending),
        "since": datetime.fromtimestamp(judgement.since, UTC).isoformat(timespec="seconds"),
        "recheck": judgement.command,
        "requested_at": judgement.requested_at or None,
        "why": judgement.why,
    }


def explain(view: NodeView, plan: Plan, refused: Mapping[str, str]) -> dict[str, Any]:
    """Everything slonkd knew about one node at the last pass and what it decided, and why."""
    pod = view.pod
    kube = view.kube_node
    return {
        **node_row(view, plan, refused),
        "view": {
            "pod": None
            if pod is None
            else {
                "name": str(pod.name),
                "uid": pod.uid,
                "phase": pod.phase.value,
                "ready": pod.ready,
                "terminating": pod.terminating,
                "node": pod.node_name,
                "ready_since": view.pod_ready_since,
                "unready_since": view.pod_unready_since,
            },
            "kube_node": None
            if kube is None
            else {
                "name": str(kube.name),
                "unschedulable": kube.unschedulable,
                "taints": [f"{t.key}={t.value}:{t.effect.value}" for t in kube.taints],
                "ready": kube.ready,
                "hold": kube.held,
            },
            "slurm_extra": "" if view.slurm is None else view.slurm.extra[:2000],
            "health": {k: f"{v.verdict.value}:{v.cause}" for k, v in view.health.items()},
            "paused": view.paused,
            "remediation": {
                "attempts": view.remediation.attempts,
                "last_at": view.remediation.last_at,
            },
            "handled_failure": view.handled_failure,
            "job_blame": view.job_blame,
        },
        "decision": {
            "actions": [
                {
                    "kind": a.kind.value,
                    "writer": a.writer.value,
                    "cause": str(a.cause),
                    "budgeted": a.budgeted,
                    "key": a.key,
                }
                for a in plan.actions
            ],
            "notes": list(plan.notes),
        },
    }

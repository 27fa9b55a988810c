"""Quarantined hardware on the leader: the status section, the gauges, ``slonkd return``.

:mod:`slonkd.core.quarantine` finds, from the leader's caches (every K8s node, the worker
pods: :mod:`.observing`) and the state's remediation history (:mod:`.remembering`), the
machines slonkd marked that no worker pod runs on; :func:`section` is ``slonkd status``'s
``quarantined`` section and :func:`observe` sets ``slonkd_quarantined_nodes`` and
``slonkd_quarantined_longest_seconds`` once a pass (:mod:`.reconciling`), beside
``slonkd_quarantine_limit_seconds`` (the settings' ``quarantine_alert_s``, the chart's
``coordinator.quarantine.alertAfterSeconds``) that the alert compares it with.

``POST /v1/nodes/{kube_node}/return`` (:func:`return_endpoint`, served by :mod:`.api`) is a
person's answer: the machine was checked. Like ``recheck`` (:mod:`.commands`) it answers
only loopback clients, so ``kubectl exec`` into the coordinator's pod (RBAC) decides who
may; ``by`` in the body is who the caller says they are. It is refused, with one line,
while a failure stands by what the leader knows (:func:`~slonkd.core.quarantine.return_refusal`);
else the executors (:mod:`.executing`) lift slonkd's own marks, fenced by the lease,
audited and counted as every K8s write, and the history's entry is kept, marked returned.
The return itself is one more audit record (action ``return``, cause ``returned by <who>``)
and the log line ``coordinator.node_returned``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog
from aiohttp import web

from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.errors import SlonkdError
from slonkd.core.kube_objects import Node
from slonkd.core.plan import NodeView
from slonkd.core.quarantine import (
    longest,
    mark_returned,
    quarantined,
    return_actions,
    return_refusal,
    slonkd_marks,
)
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd.runtime.coordinating.commands import loopback

log = structlog.get_logger("slonkd.coordinator")

MAX_WHO = 100
"""The longest ``by`` a return keeps."""


def section(leader: Any, now: float) -> dict[str, Any]:
    """``slonkd status``'s ``quarantined`` section: each machine, how many, the longest wait."""
    found = quarantined(
        leader.nodes.items().values(), leader.pods.items().values(), leader.state.remediation
    )
    return {
        "count": len(found),
        "longest_s": round(longest(found, now), 1),
        "nodes": [q.as_json(now) for q in found],
    }


def observe(leader: Any, now: float) -> None:
    """Set the two gauges from the caches and the state, once a pass."""
    found = quarantined(
        leader.nodes.items().values(), leader.pods.items().values(), leader.state.remediation
    )
    leader.metrics.quarantined.set(len(found))
    leader.metrics.quarantined_longest.set(round(longest(found, now), 1))
    leader.metrics.quarantine_limit.set(leader.s.quarantine_alert_s)


def _slurm_of(leader: Any, kube: Node | None) -> SlurmNode | None:
    """The SLURM node the marks are for, as the last pass read it (None: not in it)."""
    marked = kube.marked_for if kube is not None else None
    snapshot = leader.snapshot
    if marked is None or snapshot is None:
        return None
    return next((v.slurm for v in snapshot.views if v.node == marked), None)


async def _who(request: web.Request) -> str:
    try:
        body = await request.json() if request.can_read_body else {}
    except ValueError:
        body = {}
    who = body.get("by") if isinstance(body, dict) else None
    return (who if isinstance(who, str) and who.strip() else "unknown").strip()[:MAX_WHO]


async def return_endpoint(
    request: web.Request, leader: Any, not_leading: Callable[[], web.Response | None]
) -> web.Response:
    """``POST /v1/nodes/{kube_node}/return``: loopback only; lift slonkd's marks or refuse."""
    name = request.match_info["node"][:253]
    if not loopback(request.remote):
        log.warning("coordinator.return_refused", reason="not from loopback", remote=request.remote)
        return web.json_response({"error": "only from inside the coordinator's pod"}, status=403)
    if (refusal := not_leading()) is not None:
        return refusal
    who = await _who(request)
    kube: Node | None = leader.nodes.get(name)
    why = return_refusal(
        kube,
        name,
        pods=leader.pods.items().values(),
        health=leader.observer.health,
        slurm=_slurm_of(leader, kube),
    )
    try:
        token = leader.elector.check_valid()
    except SlonkdError as exc:  # the lease is gone: nothing is written, nothing recorded
        return web.json_response({"error": str(exc)[:200]}, status=503)
    cause = f"returned by {who}"
    before = None if kube is None else f"slonkd's marks: {','.join(slonkd_marks(kube)) or '-'}"
    if why is not None or kube is None:
        why = why or f"no K8s node {name!r}"
        leader.audit.record(
            action="return", node=name, cause=cause, fencing_token=token,
            outcome=f"refused: {why}", before=before, dry_run=leader.s.dry_run, kube_node=name,
        )  # fmt: skip
        log.info("coordinator.return_refused", kube_node=name, cause=cause, reason=why)
        return web.json_response({"error": why, "kube_node": name}, status=409)
    actions = return_actions(kube, who)
    view = NodeView(
        node=NodeName(kube.marked_for or name), now=time.time(), slurm=None, pod=None,
        kube_node=kube,
    )  # fmt: skip
    try:
        done, failed = await leader.executor.apply_kube_all(
            view, actions, token, leader.elector.check_valid
        )
    except SlonkdError as exc:  # the lease went meanwhile: the rest is the next leader's
        log.warning("coordinator.return_interrupted", kube_node=name, error=str(exc)[:200])
        return web.json_response({"error": f"interrupted: {str(exc)[:200]}"}, status=503)
    history = leader.state.remediation.get(name)
    if history is not None and not failed and not leader.s.dry_run:

        def returned(st: CoordinatorState) -> CoordinatorState:
            entry = mark_returned(st.remediation.get(name, history), who, time.time())
            return replace(st, remediation={**st.remediation, name: entry})

        await leader.memory.update(token, returned)
    outcome = "returned" if not failed else f"failed: {failed} of {len(actions)} writes failed"
    leader.audit.record(
        action="return", node=name, cause=cause, fencing_token=token, outcome=outcome,
        before=before, after=None if failed else "slonkd's marks lifted",
        dry_run=leader.s.dry_run, kube_node=name,
        lifted=[f"{a.kind.value}{':' + a.key if a.key else ''}" for a in actions],
    )  # fmt: skip
    log.info(
        "coordinator.node_returned",
        kube_node=name,
        node=str(view.node),
        cause=cause,
        owner="operator",
        outcome=outcome,
        writes=done,
    )
    status = 200 if not failed else 502
    return web.json_response(
        {
            "kube_node": name,
            "returned_by": who,
            "lifted": [a.kind.value + (f" {a.key}" if a.key else "") for a in actions],
            "outcome": outcome,
            "dry_run": leader.s.dry_run,
            "fencing_token": token,
        },
        status=status,
    )

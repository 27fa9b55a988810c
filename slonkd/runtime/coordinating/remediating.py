"""The remediation ladder's steps, as the coordinator executes them.

``decide`` plans the step (:func:`slonkd.core.decide.decide`, one step per attempt with a
cool-down): evict the pod, then request a reboot, then mark for manual repair. Each step
done is counted per K8s node in the state (:mod:`.remembering`), which the next views read
(:mod:`.observing`); a reboot request also starts the node's revalidation there (SLURM
returns a rebooted node by itself; slonkd holds it until its checks passed on demand,
:mod:`.revalidating`). The executors' table (:mod:`.executing`) dispatches the three kinds here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypeVar

import structlog

from slonkd.adapters.kube.ports import EventWrites, NodeWrites, PodWrites
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.core.coordinator_state import Attempts, CoordinatorState
from slonkd.core.errors import OutcomeUnknownError, SlonkdError
from slonkd.core.kube_actions import MANUAL_TAINT, REBOOT_TAINT
from slonkd.core.kube_changes import ChangeOutcome, ChangeResult, ObjectRef
from slonkd.core.kube_objects import Node, TaintEffect
from slonkd.core.plan import Action, Kind, NodeView
from slonkd.core.revalidation import Pending
from slonkd.core.slurm_node import failure_fingerprint
from slonkd.runtime.coordinating.auditing import Auditor, failure_outcome
from slonkd.runtime.coordinating.remembering import Memory
from slonkd.runtime.coordinating.values import label_value

log = structlog.get_logger("slonkd.coordinator")

V = TypeVar("V")

SLURM_REBOOT = "slurm-reboot"
"""Audit action of a reboot step's SLURM half (``scontrol reboot ASAP``), next to its K8s half."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Remediator:
    """Evictions, reboot requests and manual-repair marks, each recorded as an attempt."""

    slurm: SlurmBackend
    nodes: NodeWrites
    pods: PodWrites
    events: EventWrites
    memory: Memory
    auditor: Auditor
    check_valid: Callable[[], int]
    """The fencing token, or an error when the lease is no longer held."""
    revalidates: Callable[[], bool] = lambda: True
    """Whether proof of health before return is on (the policy's, off without a bus): a
    ladder step then records a revalidation for the node's return."""

    async def evict(
        self, view: NodeView, kube: Node, action: Action, token: int
    ) -> ChangeResult | None:
        """Evict the worker pod (a new one may land on healthy hardware); None: no pod.

        The eviction's record (the failure handled, the ladder's attempt, the revalidation
        the node owes) is written first, fenced by the token: a leader whose term has ended
        without it knowing yet (a deleted Lease is seen only at the next renewal) is refused
        there and evicts nothing. Recorded after, the eviction would be made and its record
        refused, and the next leader, not knowing, would evict the re-placed pod again. An
        eviction that is not made (a PDB refuses it, the pod is gone, an error) takes its
        record back.
        """
        if view.pod is None:
            return None
        handled = failure_fingerprint(view.slurm) if view.slurm is not None else ""
        # the node proves its health on its next pod before it returns
        undo = await self._remediated(kube.name, view.node, handled, token, revalidate=True)
        try:
            result = await self.pods.evict(view.pod.namespace, view.pod.name, uid=view.pod.uid)
        except SlonkdError:
            await self.memory.update(token, undo)
            raise
        if not result.done:
            await self.memory.update(token, undo)
        return result

    async def escalate(
        self, view: NodeView, kube: Node, action: Action, token: int
    ) -> ChangeResult | None:
        """The remediation ladder's later steps: a reboot request, then manual repair.

        A reboot request is ``scontrol reboot ASAP`` (when slonkd may hold the SLURM node)
        plus the ``slonk.dev/reboot-requested`` taint and annotation that the site's reboot
        tooling acts on; slonkd never reboots a machine. Manual repair is a taint and an
        annotation for people. Both are recorded as attempts (with the time) in the state,
        first and fenced, as an eviction is (:meth:`evict`): a deposed leader requests
        nothing, and whoever sees the taint finds the attempt on record. A taint that was
        already there (or a refused write) takes the record back.
        """
        cause = str(action.cause)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        reboot = action.kind is Kind.REQUEST_REBOOT
        # SLURM returns a rebooted node by itself: it must prove its health first
        undo = await self._remediated(kube.name, view.node, "", token, revalidate=reboot)
        attempts = self.memory.state.remediation[kube.name].attempts
        if reboot:
            taint, reason = REBOOT_TAINT, "SlurmRebootRequested"
            await self._request_slurm_reboot(view, action, token)
        else:
            taint, reason = MANUAL_TAINT, "SlurmManualRepair"
        try:
            result = await self.nodes.set_taint(
                kube.name, taint, TaintEffect.NO_SCHEDULE, label_value(cause)
            )
        except SlonkdError:
            await self.memory.update(token, undo)
            raise
        if result.outcome is not ChangeOutcome.CHANGED:
            await self.memory.update(token, undo)
            return result
        await self.nodes.set_annotations(
            kube.name, {taint: f"{stamp} {cause[:200]} (attempt {attempts})"}
        )
        await self.events.record(
            ObjectRef(kind="Node", name=kube.name, uid=kube.uid),
            type_="Warning",
            reason=reason,
            message=f"slonkd: {cause} (remediation attempt {attempts})",
        )
        return result

    async def _request_slurm_reboot(self, view: NodeView, action: Action, token: int) -> None:
        """The reboot's SLURM half; its failure (e.g. no RebootProgram) is audited, not raised.

        It must not keep the site's tooling from seeing the request on the K8s node.
        """
        cause = str(action.cause)
        before = str(view.slurm.state) if view.slurm is not None else None
        try:
            rebooted = await self.slurm.request_reboot([view.node], action.cause, "by slonkd")
        except SlonkdError as exc:
            self.check_valid()
            outcome, _ = failure_outcome(exc)  # "outcome unknown": the reboot may have been asked
            self.auditor.record(SLURM_REBOOT, view.node, action.cause, token, outcome, before)
            log.warning(
                "slurm.reboot_failed",
                node=view.node,
                cause=cause,
                error=str(exc)[:300],
                outcome_unknown=isinstance(exc, OutcomeUnknownError),
            )
            return
        skips = {k.node: k.why.value for k in rebooted.skipped}
        done = (
            "changed" if view.node in rebooted.changed else f"skipped: {skips.get(view.node, '')}"
        )
        self.auditor.record(SLURM_REBOOT, view.node, action.cause, token, done, before)
        log.info(
            "slurm.reboot_requested",
            node=view.node,
            cause=cause,
            requested=bool(rebooted.changed),
            skipped=skips,
        )

    async def _remediated(
        self, kube_node: str, node: str, handled: str, token: int, *, revalidate: bool = False
    ) -> Callable[[CoordinatorState], CoordinatorState]:
        """Record one remediation step (and the failure it handled) in the state ConfigMap.

        ``revalidate``: also start the node's revalidation (a record with no recheck sent:
        when SLURM puts the node back by itself, slonkd drains it ``revalidating``). Returns
        the change that takes this record back (the node's entries as they were before it).
        """
        was = CoordinatorState()

        def change(st: CoordinatorState) -> CoordinatorState:
            nonlocal was
            was = st
            before = st.remediation.get(kube_node, Attempts())
            remediation = {
                **st.remediation,
                kube_node: Attempts(attempts=before.attempts + 1, last_at=time.time()),
            }
            done = {**st.handled, node: handled} if handled else st.handled
            checks = st.revalidating
            if revalidate and self.revalidates():  # a round going on keeps its start
                began = st.revalidating[node].since if node in st.revalidating else time.time()
                checks = {**st.revalidating, node: Pending(since=began)}
            return replace(st, remediation=remediation, handled=done, revalidating=checks)

        await self.memory.update(token, change)

        def undo(st: CoordinatorState) -> CoordinatorState:
            return replace(
                st,
                remediation=_restored(st.remediation, kube_node, was.remediation),
                handled=_restored(st.handled, node, was.handled) if handled else st.handled,
                revalidating=_restored(st.revalidating, node, was.revalidating),
            )

        return undo


def _restored(now: Mapping[str, V], key: str, was: Mapping[str, V]) -> dict[str, V]:
    """``now`` with ``key`` as it was in ``was`` (absent there: removed)."""
    out = {k: v for k, v in now.items() if k != key}
    if key in was:
        out[key] = was[key]
    return out

"""The agent's one write to SLURM and its record: the drain or release, then its log line.

:class:`~slonkd.runtime.agent.sidecar.Agent` decides (``decide()`` of :mod:`slonkd.core.decide`) and
hands each of its actions here. The write goes through the SLURM backend
(:mod:`slonkd.adapters.slurm.scontrol`, a compare-and-set read then the update), then the
node is read once more so that the line ``agent.mirror_applied`` carries the state before and
after, and :class:`~slonkd.runtime.kit.metrics.Metrics` counts it.

The line also carries ``read_at`` and ``written_at`` (epoch seconds): SLURM has no
conditional update, so an operator's write that reaches slurmctld between the
compare-and-set read and the update is overwritten. That window (one slurmctld round trip,
docs/architecture.md) is in the record, so a lost operator write can be placed inside it or
shown to lie outside it (the soak's checker, ``bench/soak_check.py``, does exactly that).

A write that reached SLURM is recorded even when what follows it fails or is cancelled (a
SIGTERM while the agent's pod goes away): the line then says the state after is unknown.
A write cancelled while in flight may or may not have reached slurmctld (the update line can
already be on scontrol's stdin): ``agent.mirror_interrupted`` says so, with the action and
its cause, before the cancellation goes on. So does ``agent.mirror_outcome_unknown`` for a
write whose request left without an answer in time (the adapter's ``OutcomeUnknownError``,
never sent again): the error goes on to the reconcile loop, whose retry reads the node
afresh and decides again (``reconcile.py``), so a drain an operator made meanwhile is theirs.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.results import UpdateResult
from slonkd.core.errors import OutcomeUnknownError
from slonkd.core.plan import Action, Kind
from slonkd.core.slurm_node import SlurmNode
from slonkd.runtime.kit.metrics import Metrics

log = structlog.get_logger("slonkd.agent")


async def apply_action(
    backend: SlurmBackend,
    metrics: Metrics,
    key: str,
    action: Action,
    before: SlurmNode | None,
) -> bool:
    """Write ``action`` (a drain or a release of node ``key``) and record it; False: not ours.

    Logged with what the reconcile bound in structlog's context (node, pod, reconcile id).
    """
    began = time.monotonic()
    if action.kind not in (Kind.DRAIN, Kind.RELEASE):
        # decide() gives the agent nothing else; refuse loudly rather than guess
        log.error("agent.unexpected_action", action=action.kind.value, cause=str(action.cause))
        return False
    try:
        result = await _write(backend, key, action)
    except OutcomeUnknownError as exc:
        metrics.applied(
            action.kind.value, action.cause.name, changed=False, skipped=["outcome-unknown"]
        )
        log.warning(
            "agent.mirror_outcome_unknown",
            action=action.kind.value,
            cause=str(action.cause),
            state_before=str(before.state) if before else None,
            error=str(exc)[:300],
            note="SLURM may hold it; judged again on a fresh read, never sent again as it was",
            duration_ms=round((time.monotonic() - began) * 1000, 1),
        )
        raise
    written_at = time.time()
    after: SlurmNode | None = None
    try:
        after = await backend.read_node(key)
    finally:  # the write is in SLURM: recorded even when the read fails or is cancelled
        metrics.applied(
            action.kind.value,
            action.cause.name,
            changed=key in result.changed,
            skipped=[s.why.value for s in result.skipped],
        )
        log.info(
            "agent.mirror_applied",
            action=action.kind.value,
            cause=str(action.cause),
            changed=key in result.changed,
            skipped=[f"{s.why.value}: {s.detail[:80]}" for s in result.skipped],
            state_before=str(before.state) if before else None,
            state_after=str(after.state) if after else None,
            duration_ms=round((time.monotonic() - began) * 1000, 1),
            read_at=result.read_at,
            written_at=round(written_at, 3),
        )
    return True


async def _write(backend: SlurmBackend, key: str, action: Action) -> UpdateResult:
    """The drain or release; a cancellation while it is in flight is logged, then goes on."""
    try:
        if action.kind is Kind.DRAIN:
            return await backend.drain([key], action.cause, "pod is terminating")
        return await backend.resume([key], action.cause)
    except asyncio.CancelledError:
        log.warning(
            "agent.mirror_interrupted",
            action=action.kind.value,
            cause=str(action.cause),
            note="stopped while the write was in flight: SLURM may hold it",
        )
        raise

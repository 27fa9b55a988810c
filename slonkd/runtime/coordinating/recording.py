"""The records of the coordinator's SLURM writes: the metric, the audit records, the log line.

A hostlist update (:func:`record_update`: drain, down, release) and a node's requeue
(:func:`record_requeue`) are recorded here the same way wherever the leader writes them: the
executors of a pass (:mod:`.executing`), the rollout's drains and releases (:mod:`.rolling`)
and one worker's requeue in its replacement (:mod:`.replacing`). Each audit record goes
through :class:`~.auditing.Auditor`; the K8s writes' records are the executors' own.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from slonkd.adapters.slurm.results import RequeueResult, UpdateResult
from slonkd.core.plan import Kind
from slonkd.core.reasons import Cause
from slonkd.runtime.coordinating.auditing import Auditor
from slonkd.runtime.kit.metrics import Metrics

log = structlog.get_logger("slonkd.coordinator")


def record_update(
    auditor: Auditor,
    metrics: Metrics,
    kind: Kind,
    cause: Cause,
    result: UpdateResult,
    token: int,
    before: Mapping[str, str],
    **detail: str,
) -> None:
    """A SLURM hostlist update's metric, audit record per node and log line.

    One audit record per node changed or skipped; the log line is ``slurm.nodes_<kind>``,
    with ``detail``'s keys added. The coordinator's passes and its rollout (:mod:`.rolling`)
    both record here.
    """
    metrics.applied(
        kind.value,
        cause.name,
        changed=bool(result.changed),
        skipped=[skip.why.value for skip in result.skipped],
    )
    for name in sorted(result.changed):
        auditor.record(kind.value, name, cause, token, "changed", before.get(name))
    for skip in result.skipped:
        outcome = f"skipped: {skip.why.value}"
        auditor.record(kind.value, skip.node, cause, token, outcome, before.get(skip.node))
    log.info(
        f"slurm.nodes_{kind.value}",
        action=kind.value,
        cause=str(cause),
        owner="coordinator",
        nodes=sorted(result.changed),
        skipped={s.node: s.why.value for s in result.skipped},
        calls=result.calls,
        **detail,
    )


def record_requeue(
    auditor: Auditor,
    node: str,
    cause: Cause,
    requeued: RequeueResult,
    token: int,
    before: str | None,
) -> None:
    """The requeue of a node's jobs: its audit record and its log line.

    One audit record with the jobs requeued and those left, logged as ``slurm.jobs_requeued``
    (the rollout, :mod:`.replacing`, requeues all of a node's jobs or none: what holds them
    back is its own ``rollout.blocked`` record).
    """
    auditor.record(
        "requeue",
        node,
        cause,
        token,
        "requeued",
        before,
        jobs=[str(j) for j in requeued.requeued],
        not_requeueable=[str(j) for j in requeued.not_requeueable],
    )
    log.info(
        "slurm.jobs_requeued",
        node=node,
        cause=str(cause),
        jobs=list(requeued.requeued),
        not_requeueable=list(requeued.not_requeueable),
    )

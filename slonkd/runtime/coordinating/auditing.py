"""The coordinator's audit records: one format for every action, dry run included.

Every write (or planned write, in a dry run) of :mod:`.executing`, :mod:`.remediating` and
:mod:`.admitting` (the breaker) goes through :class:`Auditor` into the JSON-lines
:class:`~slonkd.runtime.coordinating.audit_log.AuditLog`, which writes the file from its own thread
(a record
costs the loop no I/O); the term drains it when it ends (:mod:`.leading`).
"""

from __future__ import annotations

from slonkd.core.errors import OutcomeUnknownError
from slonkd.core.reasons import Cause
from slonkd.runtime.coordinating.audit_log import AuditLog, DryRunSeen

_NOTHING_DONE = frozenset({"dry-run", "not implemented", "blocked"})
"""Outcomes of an action that was not taken: the record has no "after"."""


def failure_outcome(exc: BaseException) -> tuple[str, str]:
    """A failed write's audit outcome and its ``why`` for ``slonkd_actions_skipped``.

    ``outcome unknown: ...`` / ``outcome-unknown`` for a SLURM write that may have landed
    (never sent again: the next pass judges it on its own read), ``failed: ...`` / ``failed``
    for any other failure.
    """
    if isinstance(exc, OutcomeUnknownError):
        return f"outcome unknown: {str(exc)[:200]}", "outcome-unknown"
    return f"failed: {str(exc)[:200]}", "failed"


class Auditor:
    """The audit log of this leader's term, and which dry-run plans were said already."""

    def __init__(self, log: AuditLog, *, dry_run: bool) -> None:
        self.log = log
        self.dry_run = dry_run
        self.seen = DryRunSeen()
        """Dry-run plans already audited, so a dry run says each once per node and state."""

    def record(
        self,
        action: str,
        node: str,
        cause: Cause,
        token: int,
        outcome: str,
        before: str | None,
        **extra: str | list[str],
    ) -> None:
        """One action on one node: what it was before, and after.

        No "after" when nothing was done: a dry run, an action not implemented, or one
        ``blocked`` (the rollout's requeue while a job on the node cannot be requeued).
        """
        self.log.record(
            action=action,
            node=node,
            cause=str(cause),
            fencing_token=token,
            outcome=outcome,
            before=before,
            after=None if outcome in _NOTHING_DONE else f"{action} {cause}",
            dry_run=self.dry_run,
            **extra,
        )

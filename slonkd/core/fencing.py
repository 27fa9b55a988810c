"""The lease check right before each write a leader's term sends, and when it last passed.

A term's writes are fenced by checking its lease before each write batch; a leader paused
(SIGSTOP, a stalled VM) between that check and the request would still send it on waking,
after its successor's term began: a read-modify-write has a GET in between, a SLURM
compare-and-set a read. So the term sets a guard (:func:`guard_writes`, the elector's
``check_valid``) in a context variable: the term's task and every task it starts after
inherit it, and the places that send a write call :func:`before_write` with no await
between it and the request (the Kubernetes transport for every method but GET, the SLURM
runner and the primed ``scontrol`` for an update). A guard that raises stops the write.
Other processes and tasks (agents, the CLI, the elector's own Lease calls) set none.

:meth:`slonkd.adapters.kube.lease.LeaderElector.check_valid` notes when it passed (wall
clock, also per task); :class:`slonkd.runtime.coordinating.audit_log.AuditLog` puts that in every
record as
``lease_checked_at``, when the write was allowed, beside ``ts``, when it returned: a leader
stopped mid-write records it after its successor's term began. The soak's fencing invariant
(I3, ``bench.soak_check``) judges the first.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

_checked_at: ContextVar[float | None] = ContextVar("slonkd_lease_checked_at", default=None)
_guard: ContextVar[Callable[[], object] | None] = ContextVar("slonkd_write_guard", default=None)


def guard_writes(check: Callable[[], object]) -> None:
    """Run ``check`` right before each write of this task and of the tasks it starts later."""
    _guard.set(check)


def before_write() -> None:
    """The running task's guard, if it has one (it raises when the write must not go)."""
    check = _guard.get()
    if check is not None:
        check()


def lease_checked(at: float) -> None:
    """The running task found its lease valid at ``at`` (wall-clock seconds)."""
    _checked_at.set(at)


def last_lease_check() -> float | None:
    """When the running task last found its lease valid (None: never)."""
    return _checked_at.get()


__all__ = ["before_write", "guard_writes", "last_lease_check", "lease_checked"]

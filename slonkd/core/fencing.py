"""When the running task last found its lease valid: the moment a fenced write was allowed.

:meth:`slonkd.adapters.kube.lease.LeaderElector.check_valid` notes it (wall clock) in a
context variable, so each asyncio task has its own (a task started later inherits its
parent's); :class:`slonkd.runtime.audit.AuditLog` puts it in every record as
``lease_checked_at``. A record's ``ts`` is taken when the write returned, which for a leader
paused mid-write (SIGSTOP past its lease) is after its successor's term began although the
write was allowed and sent before: the soak's fencing invariant (I3, ``bench.soak_check``)
judges a record by this moment instead. A pause between this check and the request leaves
the write allowed on the old term: the window a client-side lease check cannot close
(``docs/architecture.md``, "The leader").
"""

from __future__ import annotations

from contextvars import ContextVar

_checked_at: ContextVar[float | None] = ContextVar("slonkd_lease_checked_at", default=None)


def lease_checked(at: float) -> None:
    """The running task found its lease valid at ``at`` (wall-clock seconds)."""
    _checked_at.set(at)


def last_lease_check() -> float | None:
    """When the running task last found its lease valid (None: never)."""
    return _checked_at.get()


__all__ = ["last_lease_check", "lease_checked"]

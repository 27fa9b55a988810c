"""The level-triggered reconcile loop: take a key, reconcile it, settle its fate.

A reconcile function gets a key (a node name), reads a fresh view itself, decides and acts.
It returns how long until it wants to look again (``None``: only on the next event).
Success forgets the key's failures; a :class:`TransientError` (or any unexpected error)
retries with backoff; a :class:`TerminalError` is reported and not retried until the next
event. Every run is one log line with its reconcile id and duration, and, given
:class:`~slonkd.runtime.kit.metrics.Metrics`, one observation of the latency histogram.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable

import structlog

from slonkd.core.errors import TerminalError, TransientError
from slonkd.runtime.kit.metrics import Metrics
from slonkd.runtime.kit.workqueue import WorkQueue

log = structlog.get_logger("slonkd.reconcile")

Reconcile = Callable[[str, str], Awaitable[float | None]]
"""``(key, reconcile_id) -> seconds until the next look, or None``."""

_ids = itertools.count(1)


async def run_worker(
    queue: WorkQueue, reconcile: Reconcile, *, name: str = "worker", metrics: Metrics | None = None
) -> None:
    """Process keys until cancelled (one key at a time per worker)."""
    while True:
        key = await queue.get()
        rid = f"{name}-{next(_ids)}"
        began = time.monotonic()
        outcome = "ok"
        try:
            again = await reconcile(key, rid)
            queue.forget(key)
            if again is not None:
                queue.add_after(key, again)
        except TransientError as exc:
            outcome = "retry"
            retry = _retry(queue, key, rid, exc)
            log.warning("reconcile.transient_error", **retry, failures=queue.failures(key))
        except TerminalError as exc:
            outcome = "terminal"
            queue.forget(key)
            log.error("reconcile.terminal_error", node=key, reconcile_id=rid, error=str(exc)[:300])
        except Exception as exc:  # a bug in one reconcile must not stop the loop
            outcome = "crashed"
            log.exception("reconcile.crashed", **_retry(queue, key, rid, exc))
        finally:
            queue.done(key)
        duration_s = time.monotonic() - began
        if metrics is not None:
            metrics.reconciled(outcome, duration_s)
        log.debug(
            "reconcile.finished",
            node=key,
            reconcile_id=rid,
            outcome=outcome,
            duration_ms=round(duration_s * 1000, 1),
        )


def _retry(queue: WorkQueue, key: str, rid: str, exc: Exception) -> dict[str, object]:
    """Queue ``key`` again with backoff after ``exc``; the log fields that say so."""
    delay = queue.retry(key)
    return {
        "node": key,
        "reconcile_id": rid,
        "error": str(exc)[:300],
        "retry_in_s": round(delay, 3),
    }

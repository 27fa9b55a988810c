"""One leader's term: its parts' tasks, in the order they may start, and its passes.

A :class:`Term` is what a leader runs while it holds the Lease, over the parts
:mod:`.composing` built (a :class:`~.reconciling.Coordinator`). It lists its own tasks in
three waves, because fencing orders them: :meth:`Term.reads` start beside the claim of the
term's token (:meth:`Term.claim`, :meth:`.remembering.Memory.claim`): the informers' lists,
the bus and its statuses, nothing that writes; :meth:`Term.writers` start once the token is
on record; :meth:`Term.after_sync` once the lists are in (the credential reaper sweeps first,
the SLURM poll, the state watch, job blame, slurmctld's statistics). :meth:`Term.passes` is the
level-triggered loop: on every wake a marks-only pass (:mod:`.fast_path`), once, before the
debounce; then a whole pass (:mod:`.reconciling`).
:mod:`.leading` starts the waves in one task group and knows none of the parts.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine
from contextlib import AbstractContextManager
from typing import Any

import structlog

from slonkd.adapters.kube.state import FencedError
from slonkd.core.errors import SlonkdError, TransientError
from slonkd.core.log_events import COORDINATOR_SYNCED
from slonkd.runtime.coordinating.reconciling import Coordinator
from slonkd.runtime.kit import heap
from slonkd.runtime.kit.level_loop import Debounce, run_level_triggered

log = structlog.get_logger("slonkd.coordinator")

Job = Coroutine[Any, Any, None]
"""One of the term's tasks, not started yet."""


LOADING_MAX_S = 120.0
"""The longest the cyclic collector is held off for a term's lists (:meth:`Term.loading`)."""


class NotLeading(Exception):
    """The lease ran out under this term's work."""


class Term:
    """The tasks and the passes of one leader's term over ``c``'s parts."""

    def __init__(self, c: Coordinator, token: int) -> None:
        self.c = c
        self.token = token

    def reads(self) -> list[Job]:
        """What runs beside the claim: the lists, the bus and its statuses (only reads)."""
        c = self.c
        jobs: list[Job] = [c.nodes.run(), c.pods.run()]
        if c.bus is not None:
            jobs += [c.bus.run(), c.observer.read_statuses(c.bus)]
        return jobs

    def read_ahead(self) -> None:
        """The first pass's SLURM read, side by side with the lists (see :mod:`.pass_read`)."""
        self.c.read_slurm_ahead()

    async def claim(self) -> None:
        """The term's token into the state before anything writes (a dry run writes nothing)."""
        if self.c.auditor.dry_run:
            return
        await self.c.memory.claim(self.token)
        self.c.first_pass_ms["claim_ms"] = round((time.monotonic() - self.c.began) * 1000, 1)

    def writers(self) -> list[Job]:
        """What writes, fenced like a pass's writes: started once the term is on record."""
        c = self.c
        jobs: list[Job] = []
        if c.commands is not None:
            jobs.append(c.commands.announce_when_connected())
        jobs.append(c.triggers.run())
        if c.topology is not None:
            jobs.append(c.topology.run())
        if c.rollout is not None:
            jobs.append(c.rollout.run())
        return jobs

    def loading(self) -> AbstractContextManager[None]:
        """Around the term's start until :meth:`synced`: what the lists make is kept all term.

        No collection scans the growing caches again and again while they load; what they
        hold then stays out of every later pass's collections until :meth:`end`
        (:mod:`slonkd.runtime.kit.heap`).
        """
        return heap.loading(LOADING_MAX_S)

    async def synced(self) -> None:
        """Until both informers have listed (the first pass needs the whole fleet)."""
        c = self.c
        await c.nodes.synced.wait()
        await c.pods.synced.wait()
        c.first_pass_ms["lists_ms"] = round((time.monotonic() - c.began) * 1000, 1)
        log.info(COORDINATOR_SYNCED, nodes=len(c.nodes), pods=len(c.pods))

    def after_sync(self) -> list[Job]:
        """What needs the lists: the reaper (its leader-start sweep), polls, watches."""
        c, s = self.c, self.c.s
        jobs: list[Job] = []
        if c.reaper is not None:
            jobs.append(c.reaper.run())  # sweeps first: the leader-start sweep
        if c.watch is not None:
            jobs.append(c.watch.run())
        jobs.append(c.memory.watch(c.observer.dirty, s.state_poll_s))
        if c.job_outcomes is not None:
            jobs.append(c.job_outcomes.run())
        if c.fleet is not None and s.sdiag_s > 0:
            jobs.append(
                c.fleet.poll_sdiag(c.slurm.diag, interval_s=s.sdiag_s, timeout_s=s.sdiag_timeout_s)
            )
        return jobs

    async def passes(self) -> None:
        """A pass on every change (debounced), poll change and resync; fast marks on each wake."""
        s = self.c.s
        await run_level_triggered(
            self.c.observer.dirty,
            lambda _cause: self.one_pass(),
            debounce=Debounce(quiet_s=s.debounce_s, max_wait_s=s.max_batch_delay_s),
            on_wake=self.c.fast_path.mark,  # before the debounce: a failure is marked at once
        )

    async def one_pass(self) -> float:
        """A whole pass; a failed pass is counted and retried at the next wake.

        Returns the seconds until the next resync; raises :class:`NotLeading` once the
        elector says the term is over (every task of the term then stops).
        """
        c = self.c
        try:
            with structlog.contextvars.bound_contextvars(pass_id=c.passes + 1):
                await c.reconcile_all()  # every line of the pass carries its number
        except FencedError:
            raise  # a newer token in the state: the elector ends this term
        except SlonkdError as exc:
            c.metrics.reconciled("retry" if isinstance(exc, TransientError) else "terminal", 0.0)
            log.warning("coordinator.pass_failed", error=str(exc)[:300])
        if not c.elector.is_valid():
            raise NotLeading  # stop every task of this term, whatever the elector does
        return c.s.resync_s

    def end(self) -> None:
        """What outlives the task group.

        The read ahead of a first pass that never came; the lists frozen at the start, back
        to the collector with the term.
        """
        self.c.cancel_read_ahead()
        heap.release()

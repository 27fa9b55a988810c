"""Leader election on a coordination.k8s.io/v1 Lease, with a fencing token and a validity clock.

- Acquire: create the Lease, or take it over once the holder's lease has run out as measured
  by *this* process's monotonic clock since it last saw the record change (clocks of
  different machines are never compared). Writes use the resourceVersion as precondition,
  so two candidates can never both win.
- Fencing token: ``spec.leaseTransitions``, raised by one on every acquisition (also when a
  candidate re-acquires after losing it), so commands carrying an older token can be refused.
  It stays monotonic when the Lease is deleted and created anew: a new term's token is above
  both the Lease's and the ``floor`` (the token of the last write to the state the leader
  fences, read at acquisition). A term whose work meets a newer token anyway (an old term's
  write that landed after the floor was read) raises :class:`Superseded`: the elector gives
  the Lease up and campaigns again, above it.
- Validity: :meth:`LeaderElector.is_valid` is true only while the last successful renewal,
  timed from *before* its request was sent, is younger than the lease duration minus a
  safety margin. A process paused (SIGSTOP, a long GC, a frozen VM) past its lease wakes up
  invalid and must not write. Failing to renew within the renew deadline, or seeing another
  holder, ends leadership at once: the work is cancelled before anything else happens.

kubernetes_asyncio ships a LeaderElection with a LeaseLock, but it keeps no fencing token
(leaseTransitions is never raised), measures time with the wall clock, cannot tell a caller
whether its lease is still valid before a write, and runs the leader's work as a loose task.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from slonkd.adapters.kube.errors import Call, KubeConflict, KubeNotFound
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import SlonkdError, TerminalError, TransientError
from slonkd.core.fencing import lease_checked

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSettings:
    """The Lease and its timing (client-go's defaults: 15 s, 10 s, 2 s)."""

    name: str
    namespace: str
    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    safety_margin_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("a candidate needs a unique identity")
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("need retry_period_s < renew_deadline_s < lease_duration_s")
        if not 0 < self.safety_margin_s < self.lease_duration_s:
            raise ValueError(
                f"need 0 < safety_margin_s ({self.safety_margin_s})"
                f" < lease_duration_s ({self.lease_duration_s})"
            )


class Superseded(TerminalError):
    """The term's work met a newer fencing token than its own: end the term, campaign again."""


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Lost(Exception):
    """Leadership ended (internal)."""


class _WorkEnded(_Lost):
    """The leader's work returned on its own: the term ends with it (internal)."""


class LeaderElector:
    """One candidate for one Lease."""

    def __init__(
        self,
        transport: KubeTransport,
        settings: LeaseSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        floor: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        """``floor``: the newest token already used (a new term's token is above it)."""
        self._transport = transport
        self._floor = floor
        self._s = settings
        self._clock = clock
        self._path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{settings.namespace}/leases/{settings.name}"
        )
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self._answered_at: float | None = None
        self._valid_until = 0.0
        self._token: int | None = None

    # -- what callers ask ------------------------------------------------------------------

    @property
    def holder(self) -> str:
        """The holder this candidate last saw on the Lease ("" : none seen yet)."""
        if self._token is not None and self.is_valid():
            return self._s.identity
        return self._observed[0] if self._observed else ""

    @property
    def token(self) -> int | None:
        """The fencing token while leading, else None."""
        return self._token

    def api_silent_s(self) -> float | None:
        """Seconds since the apiserver last answered a Lease call (None: it never has).

        A candidate that cannot reach the API does nothing useful, leader or standby: the
        coordinator's readiness is built on this.
        """
        if self._answered_at is None:
            return None
        return self._clock() - self._answered_at

    def is_valid(self) -> bool:
        """True if this candidate leads and its lease has not run out by the local clock."""
        return self._token is not None and self._clock() < self._valid_until

    def check_valid(self) -> int:
        """The fencing token, or TerminalError if the lease is not valid right now."""
        token = self._token
        if token is None or not self.is_valid():
            raise TerminalError(f"{self._s.identity}: lease {self._s.name} is not held")
        lease_checked(time.time())  # for the audit record of the write it allows
        return token

    # -- the loop --------------------------------------------------------------------------

    async def run(self, work: Callable[[int], Coroutine[Any, Any, None]]) -> None:
        """Campaign forever; while leading, run ``work(token)``, cancelled the moment it ends.

        A ``work`` that returns on its own ends the term too: the Lease is given up and the
        campaign starts again (a holder that renews with no work running would keep every
        other candidate out).
        """
        while True:
            token = await self._acquire()
            log.info(
                "kube.lease_acquired", lease=self._s.name, identity=self._s.identity, token=token
            )
            current = asyncio.current_task()
            cancelling_before = current.cancelling() if current is not None else 0
            lost = superseded = False
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._renew_until_lost())
                    group.create_task(self._work_then_end(work, token))
            except* _WorkEnded:
                # No Lease held with no work running: give it up for the next term (ours or
                # another candidate's), as when superseded.
                lost = superseded = True
            except* _Lost:
                lost = True
            except* Superseded as group:
                lost = superseded = True
                log.warning(
                    "kube.lease_superseded",
                    lease=self._s.name,
                    identity=self._s.identity,
                    token=token,
                    error=str(group.exceptions[0])[:300],
                )
            finally:
                self._token = None
            if current is not None:
                if lost and sys.version_info < (3, 12) and current.cancelling() > cancelling_before:
                    # Python 3.11's TaskGroup cancels its parent when a child fails during
                    # __aexit__ and never takes that request back (fixed in 3.12): undo it,
                    # or the campaign would end as if it had been cancelled.
                    current.uncancel()
                if current.cancelling() > cancelling_before:
                    # A TaskGroup that is already aborting (leadership lost) swallows a
                    # cancellation of its parent; honour it here instead of campaigning again.
                    raise asyncio.CancelledError
            log.warning("kube.lease_lost", lease=self._s.name, identity=self._s.identity)
            if superseded:
                await self._give_up()  # campaign again at once, for a token above the newer one

    @staticmethod
    async def _work_then_end(work: Callable[[int], Coroutine[Any, Any, None]], token: int) -> None:
        await work(token)
        raise _WorkEnded

    async def release(self) -> None:
        """Give the lease up (graceful shutdown) so another candidate takes over at once.

        Also after the term ended (the campaign cancelled first, as on SIGTERM, leaves no
        token): the Lease may still name this candidate, and a successor would wait a whole
        lease duration for it. Only a record naming this candidate is cleared.
        """
        self._token = None
        await self._give_up()

    async def _give_up(self) -> None:
        """Clear the holder if it is still this candidate (the term has ended already)."""
        try:
            lease = await self._get()
            if lease is None or lease["spec"].get("holderIdentity") != self._s.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            await self._put(lease)
        except TransientError as exc:
            log.warning("kube.lease_release_failed", lease=self._s.name, error=str(exc))

    async def _acquire(self) -> int:
        while True:
            try:
                token = await self._try_acquire()
            except TransientError as exc:
                log.warning("kube.lease_unreachable", lease=self._s.name, error=str(exc))
                token = None
            if token is not None:
                return token
            await asyncio.sleep(self._s.retry_period_s * random.uniform(1.0, 1.2))  # noqa: S311

    async def _renew_until_lost(self) -> None:
        last_ok = self._clock()
        while True:
            await asyncio.sleep(self._s.retry_period_s)
            if not self.is_valid():
                raise self._stop_leading()
            try:
                if await self._try_renew():
                    last_ok = self._clock()
                    continue
                raise self._stop_leading()  # somebody else holds it
            except TransientError as exc:
                log.warning("kube.lease_renew_failed", lease=self._s.name, error=str(exc))
            if self._clock() - last_ok > self._s.renew_deadline_s:
                raise self._stop_leading()

    def _stop_leading(self) -> _Lost:
        self._token = None  # invalid at once, before the work is even cancelled
        return _Lost()

    # -- one attempt -----------------------------------------------------------------------

    def _call(self, verb: str) -> Call:
        """A call on this Lease, as RBAC sees it (a create names no object)."""
        return Call(
            verb=verb,
            group="coordination.k8s.io",
            resource="leases",
            namespace=self._s.namespace,
            name="" if verb == "create" else self._s.name,
        )

    async def _get(self) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = await self._transport.request(
                self._call("get"), "GET", self._path
            )
        except KubeNotFound:
            self._answered_at = self._clock()
            return None
        self._answered_at = self._clock()
        return lease

    async def _put(self, lease: dict[str, Any]) -> None:
        await self._transport.request(self._call("update"), "PUT", self._path, body=lease)
        self._answered_at = self._clock()

    def _spec(self, transitions: int, acquire_time: str) -> dict[str, Any]:
        now = _micro_time()
        return {
            "holderIdentity": self._s.identity,
            "leaseDurationSeconds": max(1, round(self._s.lease_duration_s)),
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _try_acquire(self) -> int | None:
        sent_at = self._clock()
        lease = await self._get()
        if lease is None:
            token = await self._above_floor(0)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._s.name, "namespace": self._s.namespace},
                "spec": self._spec(token, ""),
            }
            path = self._path.rsplit("/", 1)[0]
            try:
                await self._transport.request(self._call("create"), "POST", path, body=body)
            except KubeConflict:
                return None  # another candidate created it first
            return self._won(token, sent_at)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, str(spec.get("renewTime")), lease["metadata"]["resourceVersion"])
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        duration = float(spec.get("leaseDurationSeconds") or self._s.lease_duration_s)
        if holder and self._clock() < self._observed_at + duration:
            return None  # held, and not yet expired by our clock
        transitions = await self._above_floor(int(spec.get("leaseTransitions") or 0) + 1)
        lease["spec"] = self._spec(transitions, "")
        try:
            await self._put(lease)
        except KubeConflict:
            return None
        return self._won(transitions, sent_at)

    async def _above_floor(self, token: int) -> int:
        """``token``, or one above the floor where the floor has reached it."""
        if self._floor is None:
            return token
        try:
            floor = await self._floor()
        except SlonkdError as exc:  # no term without the floor: try again later
            raise TransientError(f"lease {self._s.name}: token floor unreadable: {exc}") from exc
        if floor < token:
            return token
        log.warning(
            "kube.lease_token_raised",
            lease=self._s.name,
            identity=self._s.identity,
            lease_token=token,
            floor=floor,
            detail="the state holds a token the Lease does not (the Lease was recreated?)",
        )
        return floor + 1

    async def _try_renew(self) -> bool:
        sent_at = self._clock()
        lease = await self._get()
        if lease is None:
            return False
        spec = lease.get("spec") or {}
        token = self._token
        if spec.get("holderIdentity") != self._s.identity or token is None:
            return False
        if int(spec.get("leaseTransitions") or 0) != token:
            return False
        lease["spec"] = self._spec(token, str(spec.get("acquireTime") or ""))
        try:
            await self._put(lease)
        except KubeConflict:
            return False
        self._valid_until = sent_at + self._s.lease_duration_s - self._s.safety_margin_s
        return True

    def _won(self, token: int, sent_at: float) -> int:
        self._token = token
        self._valid_until = sent_at + self._s.lease_duration_s - self._s.safety_margin_s
        return token

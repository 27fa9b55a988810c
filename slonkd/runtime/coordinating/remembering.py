"""The coordinator's memory: the state ConfigMap as last read or written.

Breaker, pause, remediation history and handled failures survive a failover there. A new
term claims it with its token before it acts (:mod:`.term`); a pass reads it
(:mod:`.reconciling`), the breaker (:mod:`.admitting`) and the remediation steps
(:mod:`.remediating`) write it under the fencing token; between passes it is polled so an
operator's pause or breaker reset starts a pass within seconds (:mod:`.term`). A corrupt
ConfigMap pauses every automated action until it is repaired.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import structlog

from slonkd.adapters.kube.lease import Superseded
from slonkd.adapters.kube.ports import EventWrites, StateStorage
from slonkd.core.coordinator_state import CoordinatorState, StateCorrupt
from slonkd.core.errors import SlonkdError
from slonkd.core.kube_changes import ObjectRef

log = structlog.get_logger("slonkd.coordinator")


@dataclass(slots=True, kw_only=True)
class Memory:
    """The state ConfigMap ``namespace/name``, its last known content and readability."""

    store: StateStorage
    events: EventWrites
    namespace: str
    name: str
    state: CoordinatorState = field(default_factory=CoordinatorState)
    """Breaker, pause, remediation history and handled failures, as last read/written."""
    error: str = ""
    """Why the state ConfigMap is unreadable ("": it is readable)."""
    known: bool = False
    """Whether ``state`` was read or written in this term (or the ConfigMap found corrupt,
    which reads as paused); until then it is the default, not paused, whatever is stored."""

    async def load(self) -> CoordinatorState:
        """Read the state (an operator's pause or reset is seen here); corrupt: paused."""
        try:
            self.state = await self.store.load()
        except StateCorrupt as exc:
            await self._unreadable(exc)  # a paused pass: status served, nothing done
        else:
            self._readable()
            self.known = True
        return self.state

    async def update(
        self, token: int, change: Callable[[CoordinatorState], CoordinatorState]
    ) -> CoordinatorState:
        """Write ``change`` as the leader holding ``token``; the result is the known state."""
        self.state = await self.store.update(token, change)
        self.known = True
        return self.state

    async def claim(self, token: int) -> None:
        """Write this term's token into the state before its first pass acts.

        From then on every state write of an older term is refused (``FencedError``), and so
        is what such a write guards (an eviction is recorded before it is made,
        :mod:`.remediating`). Without it, a leader that has not yet noticed the end of its
        term (a deleted Lease is seen at the next renewal) could write and act until the new
        term's first write. A corrupt or unreachable state is left to the pass (it pauses, or
        its first write raises the token); a newer token than this term's ends the term.
        A corrupt state pauses this term at once (what the term starts after its claim, the
        rollout among them, must not act before the first pass reads it).
        """
        try:
            await self.update(token, lambda st: st)
        except StateCorrupt as exc:
            await self._unreadable(exc)  # paused now; the pass reads it again and says why
            return
        except Superseded:
            raise  # a newer term wrote: this one ends
        except SlonkdError as exc:
            log.warning("coordinator.state_claim_failed", error=str(exc)[:300])
            return
        log.info("coordinator.state_claimed")

    async def warn(self, reason: str, message: str) -> None:
        """A Warning Event on the state ConfigMap (best effort: never fails the caller)."""
        with contextlib.suppress(SlonkdError):
            await self.events.record(
                ObjectRef(kind="ConfigMap", name=self.name, namespace=self.namespace),
                type_="Warning",
                reason=reason,
                message=message,
            )

    async def watch(self, dirty: asyncio.Event, poll_s: float) -> None:
        """Start a pass (``dirty``) on an operator's pause, unpause, reset or mode switch."""
        while True:
            await asyncio.sleep(poll_s)
            try:
                stored = await self.store.load()
            except SlonkdError as exc:
                log.debug("coordinator.state_read_failed", error=str(exc)[:200])
                continue
            seen = (self.state.paused, self.state.breaker_open, self.state.pool_modes)
            if (stored.paused, stored.breaker_open, stored.pool_modes) != seen:
                log.info(
                    "coordinator.operator_change",
                    paused=stored.paused,
                    breaker_open=stored.breaker_open,
                    pool_modes={k: f"{v.mode} by {v.by}" for k, v in stored.pool_modes.items()},
                    by=stored.paused_by or stored.breaker_reason[:100],
                )
                dirty.set()

    async def _unreadable(self, exc: StateCorrupt) -> None:
        """A corrupt state ConfigMap: act as paused (no automated action) until it is repaired.

        Logged and recorded as an Event once per distinct error, not every pass.
        """
        ref = f"{self.namespace}/{self.name}"
        why = (
            f"state ConfigMap {ref} is unreadable ({str(exc)[:200]}): automated actions refused "
            "until it is repaired or `slonkd state reset --yes-discard-state`"
        )
        self.state = replace(self.state, paused=True, paused_by="slonkd", paused_reason=why)
        self.known = True  # known to be unusable: paused
        if self.error == str(exc):
            return
        self.error = str(exc)
        log.error("coordinator.state_corrupt", state=ref, error=str(exc)[:300], owner="coordinator")
        await self.warn("StateCorrupt", f"slonkd: {why}")

    def _readable(self) -> None:
        if self.error:
            log.warning("coordinator.state_readable", state=self.name, was=self.error)
            self.error = ""

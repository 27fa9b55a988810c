"""The leader's slurmctld triggers: installed on leadership, kept, removed when turned off.

With ``trigger_program`` set, every term registers slurmctld's permanent node triggers
(down, drained, fail, up) running that program (``slonkd-nudge`` where slurmctld runs,
e.g. the controller image's ``/opt/slonkd/bin/slonkd-nudge``), so a node event nudges the
coordinator over MQTT (:mod:`.observing` reads the nudge and starts a pass). The triggers
are a backstop next to the reasons poll: slurmctld checks them only every 15 s or so. They
live in slurmctld's state and outlive the coordinator, so the registration is idempotent
(:meth:`~slonkd.adapters.slurm.triggers.Triggers.ensure`), repeated every
:data:`RECHECK_S` (a slurmctld that lost its state gets them back) and retried with a
backoff while slurmctld is away. Without ``trigger_program`` the term clears the triggers a
coordinator installed before (the owner tag says which) once, so turning the setting off
leaves nothing behind in slurmctld. An operator's triggers are never touched. Writes go
only while the lease is valid.

slurmctld's program publishes as a broker client of its own (publish SLURM events, nothing
else): with ``nudge_client`` and the dynsec admin configured, the term makes that client
(:func:`nudge_client_provisioner`) before its first registration.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from slonkd.adapters.bus.dynsec_roles import nudge_role
from slonkd.adapters.slurm.triggers import EnsureResult, TriggerEvent
from slonkd.core.errors import SlonkdError
from slonkd.runtime.coordinating.credentials import CredentialSettings, dynsec_admin
from slonkd.runtime.coordinating.settings import NudgeClient

log = structlog.get_logger("slonkd.coordinator")

RECHECK_S = 300.0
"""A held term checks its triggers again this often."""
RETRY_MIN_S = 2.0
RETRY_MAX_S = 60.0
"""A failed registration is retried after 2 s, doubling up to 60 s."""


class TriggerRegistry(Protocol):
    """One owner's slurmctld triggers (:class:`~slonkd.adapters.slurm.triggers.Triggers`)."""

    async def ensure(self, program: str, events: Sequence[TriggerEvent] = ...) -> EnsureResult:
        """Exactly one permanent trigger per event runs ``program``; returns what changed."""
        ...

    async def remove(self) -> tuple[int, ...]:
        """Clear every trigger of this owner; returns the ids cleared."""
        ...


@dataclass(slots=True, kw_only=True)
class TriggerKeeper:
    """Keeps the owner's triggers as configured for one term (a task of the term)."""

    triggers: TriggerRegistry
    program: str
    """The program the triggers run; "": none (the owner's triggers are cleared)."""
    check_valid: Callable[[], int]
    """Raises unless this term's lease is valid (checked before every write)."""
    provision: Callable[[], Awaitable[None]] | None = None
    """Makes the program's broker client, once per term before the first registration."""
    recheck_s: float = RECHECK_S
    retry_min_s: float = RETRY_MIN_S
    retry_max_s: float = RETRY_MAX_S

    async def run(self) -> None:
        """Ensure (or clear) the triggers now, then every ``recheck_s``; until cancelled."""
        if not self.program:
            await self._remove()
            return
        wait = self.retry_min_s
        provision = self.provision
        while True:
            try:
                self.check_valid()
                if provision is not None:
                    await provision()
                    provision = None
                result = await self.triggers.ensure(self.program)
            except SlonkdError as exc:
                log.warning("coordinator.triggers_failed", error=str(exc)[:300], retry_s=wait)
                await asyncio.sleep(wait)
                wait = min(wait * 2, self.retry_max_s)
                continue
            wait = self.retry_min_s
            log.info(
                "coordinator.triggers_ensured",
                program=self.program,
                added=[e.value for e in result.added],
                cleared=list(result.cleared),
                kept=list(result.kept),
            )
            await asyncio.sleep(self.recheck_s)

    async def _remove(self) -> None:
        """Clear the triggers a coordinator installed before, once (no retries: best effort)."""
        try:
            self.check_valid()
            cleared = await self.triggers.remove()
        except SlonkdError as exc:
            log.info("coordinator.triggers_not_checked", error=str(exc)[:300])
            return
        if cleared:
            log.info("coordinator.triggers_removed", cleared=list(cleared))


def nudge_client_provisioner(
    credentials: CredentialSettings, cluster: str, client: NudgeClient
) -> Callable[[], Awaitable[None]]:
    """Makes (or remakes) slurmctld's broker client in dynsec with the admin's rights.

    Bound to no client id: slurmctld runs one slonkd-nudge process per trigger event.
    """
    admin = dynsec_admin(credentials)

    async def provision() -> None:
        role = nudge_role(cluster, client.username)
        await admin.ensure_client(client.username, client.password, role, client_id="")

    return provision

"""The leader's trigger keeper with a recording fake registry (no slurmctld needed).

The keeper registers the triggers when a term starts, retries while slurmctld refuses,
writes only under a valid lease, checks again later, and clears its own triggers once when
the setting is off. The real strigger calls are the contract and e2e tests' part.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from slonkd.adapters.slurm.triggers import EnsureResult, TriggerEvent
from slonkd.cli.nudge import main as nudge_main
from slonkd.core.errors import TerminalError, TransientError
from slonkd.runtime.coordinating.triggering import TriggerKeeper
from tests.unit.looping import run_for

PROGRAM = "/opt/slonkd/bin/slonkd-nudge"


@dataclass
class FakeRegistry:
    """Records ensure/remove calls; fails the first ``failures`` ensures."""

    failures: int = 0
    ensured: list[str] = field(default_factory=list)
    removed: int = 0

    async def ensure(
        self, program: str, events: Sequence[TriggerEvent] = tuple(TriggerEvent)
    ) -> EnsureResult:
        """Record the program (or fail while failures are left)."""
        if self.failures:
            self.failures -= 1
            raise TransientError("slurmctld away")
        self.ensured.append(program)
        return EnsureResult(added=tuple(events) if len(self.ensured) == 1 else ())

    async def remove(self) -> tuple[int, ...]:
        """Count the call; two triggers were cleared."""
        self.removed += 1
        return (7, 8)


def _valid() -> int:
    return 1


async def test_the_term_installs_at_once_and_checks_again() -> None:
    """ensure() runs when the term starts and again every recheck period, never remove()."""
    registry = FakeRegistry()
    keeper = TriggerKeeper(triggers=registry, program=PROGRAM, check_valid=_valid, recheck_s=0.05)
    await run_for(keeper.run, 0.18)
    assert registry.ensured[0] == PROGRAM
    assert 3 <= len(registry.ensured) <= 4
    assert registry.removed == 0


async def test_a_refused_registration_is_retried() -> None:
    """slurmctld away twice: the keeper retries with its backoff and installs the third time."""
    registry = FakeRegistry(failures=2)
    keeper = TriggerKeeper(
        triggers=registry, program=PROGRAM, check_valid=_valid,
        recheck_s=60, retry_min_s=0.01, retry_max_s=0.02,
    )  # fmt: skip
    await run_for(keeper.run, 0.15)
    assert registry.ensured == [PROGRAM]


async def test_the_nudge_client_is_made_once_before_the_triggers() -> None:
    """The broker client of slurmctld's program is made before the first registration, once.

    A failing first attempt is retried with the registration; later checks leave it alone.
    """
    registry = FakeRegistry()
    calls: list[int] = []

    async def provision() -> None:
        calls.append(len(registry.ensured))
        if len(calls) == 1:
            raise TransientError("broker away")

    keeper = TriggerKeeper(
        triggers=registry, program=PROGRAM, check_valid=_valid, provision=provision,
        recheck_s=0.03, retry_min_s=0.01,
    )  # fmt: skip
    await run_for(keeper.run, 0.12)
    assert calls == [0, 0]
    assert len(registry.ensured) >= 2


async def test_nothing_is_written_without_a_valid_lease() -> None:
    """A term whose lease is not valid registers nothing (and clears nothing)."""

    def not_leading() -> int:
        raise TerminalError("lease not held")

    registry = FakeRegistry()
    keeper = TriggerKeeper(
        triggers=registry, program=PROGRAM, check_valid=not_leading, retry_min_s=0.01
    )
    await run_for(keeper.run, 0.05)
    assert registry.ensured == []
    off = TriggerKeeper(triggers=registry, program="", check_valid=not_leading)
    await off.run()
    assert registry.removed == 0


async def test_turned_off_the_term_clears_its_own_triggers_once() -> None:
    """Without a program the keeper removes the owner's triggers once and returns."""
    registry = FakeRegistry()
    keeper = TriggerKeeper(triggers=registry, program="", check_valid=_valid)
    async with asyncio.timeout(1):
        await keeper.run()
    assert registry.removed == 1
    assert registry.ensured == []


def test_the_nudge_takes_the_owner_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    """slurmctld runs ``slonkd-nudge --by=<owner> EVENT HOSTLIST``: accepted (0), not a usage error.

    No broker is configured, so the publish fails and the nudge still exits 0; bad
    arguments still exit 2.
    """
    monkeypatch.delenv("SLONKD_MQTT_HOST", raising=False)
    assert nudge_main(["--by=slonkd-coordinator", "down", "n[1-2]"]) == 0
    assert nudge_main(["down", "n1"]) == 0
    assert nudge_main(["--by=slonkd-coordinator", "down"]) == 2

"""Runs the health checks on their periods and turns run histories into verdicts.

Each check runs on its own period with a random phase and jitter, so a fleet of agents
does not probe NFS or nvidia-smi in the same second. Every run is appended to the check's
bounded history and judged with the hysteresis policy; when a check's *verdict* changes
(not on every run) the ``on_change`` callback gets the new verdict: the agent publishes it,
the coordinator decides. The agent never drains for health on its own.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

import structlog

from slonkd.adapters.health.checks import Check
from slonkd.core.health import CheckResult, Hysteresis, Verdict, judge, unknown

log = structlog.get_logger("slonkd.health")

OnChange = Callable[[CheckResult], Awaitable[None]]


@dataclass(slots=True)
class _State:
    history: deque[CheckResult]
    verdict: CheckResult | None = None
    runs: int = 0


@dataclass(slots=True)
class HealthLoop:
    """Schedules checks, keeps their histories, reports verdict changes."""

    checks: Sequence[Check]
    policy: Hysteresis
    on_change: OnChange
    jitter: float = 0.1
    """Each wait is the period times a random factor in [1 - jitter, 1 + jitter]."""
    _states: dict[str, _State] = field(default_factory=dict)

    def verdicts(self) -> dict[str, CheckResult]:
        """The current verdict of every check that has run at least once."""
        return {n: s.verdict for n, s in self._states.items() if s.verdict is not None}

    async def run(self) -> None:
        """Run every check forever (cancel to stop)."""
        async with asyncio.TaskGroup() as group:
            for check in self.checks:
                group.create_task(self._loop(check), name=f"health:{check.name}")

    async def run_once(self, check: Check, *, on_demand: bool = False) -> CheckResult:
        """Run ``check`` once, record it, and report if its verdict changed.

        ``on_demand``: asked for now (a recheck): the check's on-demand runner if it has one.
        """
        state = self._states.setdefault(
            check.name, _State(history=deque(maxlen=max(self.policy.window_m, self.policy.clear_k)))
        )
        began = time.monotonic()
        try:
            result = await (check.on_demand if on_demand and check.on_demand else check.run)()
        except Exception as exc:  # noqa: BLE001 - a broken check is unknown, never fatal
            result = unknown(check.name, "check-crashed", f"{type(exc).__name__}: {exc}")
        result = replace(result, check=check.name)
        state.history.append(result)
        state.runs += 1
        failing = state.verdict is not None and state.verdict.verdict is Verdict.FAIL
        verdict = judge(list(state.history), self.policy, failing=failing)
        verdict = replace(verdict, check=check.name)
        changed = state.verdict is None or (state.verdict.verdict, state.verdict.cause) != (
            verdict.verdict,
            verdict.cause,
        )
        state.verdict = verdict
        log.debug(
            "health.check_ran",
            check=check.name,
            verdict=result.verdict.value,
            cause=result.cause,
            duration_ms=round((time.monotonic() - began) * 1000, 1),
        )
        if changed:
            log.info(
                "health.verdict_changed",
                check=check.name,
                verdict=verdict.verdict.value,
                cause=verdict.cause,
                remediation=verdict.remediation.value,
                evidence=verdict.evidence[:300],
            )
            await self.on_change(verdict)
        return verdict

    async def _loop(self, check: Check) -> None:
        await asyncio.sleep(random.uniform(0, check.period_s * self.jitter))  # noqa: S311 - jitter
        while True:
            await self.run_once(check)
            period = check.period_s
            last = self._states[check.name].history[-1]
            if check.retry_period_s is not None and last.verdict is Verdict.FAIL:
                period = min(period, check.retry_period_s)
            factor = random.uniform(1 - self.jitter, 1 + self.jitter)  # noqa: S311 - jitter
            await asyncio.sleep(period * factor)

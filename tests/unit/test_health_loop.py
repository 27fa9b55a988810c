"""The health loop reports verdict changes only, with hysteresis, and survives broken checks."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from slonkd.adapters.health.checks import Check
from slonkd.core.health import CheckResult, Hysteresis, Remediation, Verdict, fail, ok
from slonkd.runtime.agent.health_loop import HealthLoop


def _scripted(results: Iterator[CheckResult | Exception]) -> Check:
    async def run() -> CheckResult:
        item = next(results)
        if isinstance(item, Exception):
            raise item
        return item

    return Check(name="gpu", period_s=1.0, run=run)


async def test_only_verdict_changes_are_reported() -> None:
    """ok, fail x3, ok x3 report ok, warn (one sample), fail (3 of 5), then ok (3 passes)."""
    bad = fail("gpu", "gpu-xid-79", Remediation.REBOOT)
    script = iter([ok("gpu"), bad, bad, bad, ok("gpu"), ok("gpu"), ok("gpu")])
    reported: list[tuple[Verdict, str]] = []

    async def on_change(result: CheckResult) -> None:
        reported.append((result.verdict, result.cause))

    check = _scripted(script)
    loop = HealthLoop(
        checks=[check], policy=Hysteresis(fail_n=3, window_m=5, clear_k=3), on_change=on_change
    )
    for _ in range(7):
        await loop.run_once(check)
    assert reported == [
        (Verdict.OK, ""),
        (Verdict.WARN, "gpu-xid-79"),
        (Verdict.FAIL, "gpu-xid-79"),
        (Verdict.OK, ""),
    ]
    assert loop.verdicts()["gpu"].verdict is Verdict.OK


async def test_a_crashing_check_is_unknown_not_ok() -> None:
    """A check that raises gives unknown (check-crashed), and the loop keeps going."""
    check = _scripted(iter([RuntimeError("boom"), ok("gpu")]))
    seen: list[CheckResult] = []

    async def on_change(result: CheckResult) -> None:
        seen.append(result)

    loop = HealthLoop(checks=[check], policy=Hysteresis(), on_change=on_change)
    first = await loop.run_once(check)
    assert (first.verdict, first.cause) == (Verdict.UNKNOWN, "check-crashed")
    assert "boom" in first.evidence
    assert (await loop.run_once(check)).verdict is Verdict.OK
    assert [r.verdict for r in seen] == [Verdict.UNKNOWN, Verdict.OK]


async def test_a_heavy_check_confirms_a_failure_on_its_retry_period() -> None:
    """An hourly check that fails is re-run on its retry period until the verdict is fail."""
    bad = fail("dcgm-diag", "dcgm-inforom", Remediation.MANUAL)
    runs: list[float] = []
    failed = asyncio.Event()

    async def run() -> CheckResult:
        runs.append(time.monotonic())
        return bad

    async def on_change(result: CheckResult) -> None:
        if result.verdict is Verdict.FAIL:
            failed.set()

    check = Check(name="dcgm-diag", period_s=3600.0, run=run, retry_period_s=0.01)
    loop = HealthLoop(
        checks=[check],
        policy=Hysteresis(fail_n=3, window_m=5, clear_k=3),
        on_change=on_change,
        jitter=0.0,
    )
    task = asyncio.create_task(loop.run())
    try:
        async with asyncio.timeout(10):
            await failed.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert len(runs) == 3
    assert loop.verdicts()["dcgm-diag"].cause == "dcgm-inforom"


async def test_a_passing_heavy_check_keeps_its_long_period() -> None:
    """Without a failure the retry period is not used: one run, then the hourly wait."""
    runs: list[float] = []
    ran = asyncio.Event()

    async def run() -> CheckResult:
        runs.append(time.monotonic())
        ran.set()
        return ok("dcgm-diag")

    async def on_change(result: CheckResult) -> None:
        return None

    check = Check(name="dcgm-diag", period_s=3600.0, run=run, retry_period_s=0.01)
    loop = HealthLoop(checks=[check], policy=Hysteresis(), on_change=on_change, jitter=0.0)
    task = asyncio.create_task(loop.run())
    try:
        async with asyncio.timeout(10):
            await ran.wait()
        await asyncio.sleep(0.2)  # twenty retry periods: a retry would have run by now
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert len(runs) == 1


def _two_runners(ran: list[str]) -> tuple[Check, HealthLoop]:
    """A check whose schedule and on-demand runs note themselves in ``ran``, and its loop."""

    async def scheduled() -> CheckResult:
        ran.append("scheduled")
        return ok("gpu")

    async def deeper() -> CheckResult:
        ran.append("on-demand")
        return ok("gpu")

    async def on_change(result: CheckResult) -> None:
        return None

    check = Check(name="gpu", period_s=1.0, run=scheduled, on_demand=deeper)
    return check, HealthLoop(checks=[check], policy=Hysteresis(), on_change=on_change)


async def test_a_run_asked_for_now_runs_the_checks_on_demand_runner() -> None:
    """A recheck runs a check's on-demand runner (a longer diagnostic); the schedule its own."""
    ran: list[str] = []
    check, loop = _two_runners(ran)
    await loop.run_once(check)
    await loop.run_once(check, on_demand=True)
    plain = Check(name="gpu", period_s=1.0, run=check.run)
    await loop.run_once(plain, on_demand=True)
    assert ran == ["scheduled", "on-demand", "scheduled"]


async def test_the_agents_recheck_runs_every_check_on_demand() -> None:
    """``run_checks_now`` (the recheck command's handler) asks each check for its deeper run."""
    from slonkd.runtime.agent.commands import run_checks_now

    ran: list[str] = []
    _, loop = _two_runners(ran)
    published: list[bool] = []

    async def publish() -> None:
        published.append(True)

    await run_checks_now(loop, publish)
    assert (ran, published) == (["on-demand"], [True])

"""The health loop reports verdict changes only, with hysteresis, and survives broken checks."""

from __future__ import annotations

from collections.abc import Iterator

from slonkd.adapters.health.checks import Check
from slonkd.core.health import CheckResult, Hysteresis, Remediation, Verdict, fail, ok
from slonkd.runtime.health_loop import HealthLoop


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

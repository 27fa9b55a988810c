"""Health verdicts and their hysteresis: what one check run says, and what a node's history means.

A check run gives a :class:`CheckResult`: ``ok``, ``warn``, ``fail`` or ``unknown`` with a
stable cause code (``gpu-xid-79``, ``ib-port-down``, ``disk-full`` ...), a remediation class
and the evidence. Every cause is in the reason grammar (:func:`~slonkd.core.reasons.cause_detail`
maps it there when the result is made), so a verdict always encodes for the bus and a drain
for it is slonkd's own. A missing tool or a missed deadline is never ``ok``: it is ``unknown``
(with ``timed_out`` set for the deadline); enough missed deadlines make one fail with the
stable cause ``<check>-deadline-missed`` (``mount:/home`` -> ``mount-home-deadline-missed``)
and manual repair, for as long as the check keeps missing them. One noisy sample never
drains a node: :func:`judge` turns a history of runs into a verdict with N-of-M hysteresis,
and a slonkd-owned health drain is lifted only after K consecutive passes. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from slonkd.core.reasons import cause_detail

MAX_EVIDENCE: Final = 2000
"""Evidence is truncated to this many characters (it goes into logs and MQTT payloads)."""


class Verdict(StrEnum):
    """The outcome of one run, or of a history of runs."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"


class Remediation(StrEnum):
    """What would fix the failure, in the order the remediation ladder tries."""

    NONE = "none"
    RESTART_POD = "restart-pod"
    REBOOT = "reboot"
    MANUAL = "manual"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """One run of one check."""

    check: str
    verdict: Verdict
    cause: str = ""
    """Stable code of what was found (empty when ok); any text is mapped into the reason
    grammar (:func:`~slonkd.core.reasons.cause_detail`)."""
    remediation: Remediation = Remediation.NONE
    evidence: str = ""
    timed_out: bool = False
    """The probe missed its deadline (or is still stuck from an earlier run)."""

    def __post_init__(self) -> None:
        if self.cause:
            object.__setattr__(self, "cause", cause_detail(self.cause))
        if len(self.evidence) > MAX_EVIDENCE:
            object.__setattr__(self, "evidence", self.evidence[: MAX_EVIDENCE - 3] + "...")


def ok(check: str, evidence: str = "") -> CheckResult:
    """A passing result."""
    return CheckResult(check=check, verdict=Verdict.OK, evidence=evidence)


def unknown(check: str, cause: str, evidence: str = "", *, timed_out: bool = False) -> CheckResult:
    """A result that proves nothing either way (tool missing, unreadable, timed out)."""
    return CheckResult(
        check=check, verdict=Verdict.UNKNOWN, cause=cause, evidence=evidence, timed_out=timed_out
    )


def fail(check: str, cause: str, remediation: Remediation, evidence: str = "") -> CheckResult:
    """A failing result with its cause and remediation class."""
    return CheckResult(
        check=check, verdict=Verdict.FAIL, cause=cause, remediation=remediation, evidence=evidence
    )


def warn(check: str, cause: str, evidence: str = "") -> CheckResult:
    """A result worth reporting that does not take the node out."""
    return CheckResult(check=check, verdict=Verdict.WARN, cause=cause, evidence=evidence)


def worst(check: str, results: Sequence[CheckResult]) -> CheckResult:
    """Fold several findings of one check into one: fail > unknown > warn > ok."""
    order = {Verdict.FAIL: 3, Verdict.UNKNOWN: 2, Verdict.WARN: 1, Verdict.OK: 0}
    if not results:
        return ok(check)
    top = max(results, key=lambda r: order[r.verdict])
    if top.verdict is Verdict.OK:
        return ok(check, "; ".join(r.evidence for r in results if r.evidence))
    same = [r for r in results if r.verdict is top.verdict]
    evidence = "; ".join(r.evidence for r in same if r.evidence)
    return CheckResult(
        check=check,
        verdict=top.verdict,
        cause=top.cause,
        remediation=top.remediation,
        evidence=evidence,
        timed_out=any(r.timed_out for r in same),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Hysteresis:
    """N failures (or missed deadlines) out of the last M runs make a fail; K passes clear it."""

    fail_n: int = 3
    window_m: int = 5
    clear_k: int = 3

    def __post_init__(self) -> None:
        if not 1 <= self.fail_n <= self.window_m or self.clear_k < 1:
            raise ValueError("need 1 <= fail_n <= window_m and clear_k >= 1")


def judge(history: Sequence[CheckResult], policy: Hysteresis, *, failing: bool) -> CheckResult:
    """The verdict of a check over its history (oldest first).

    ``failing`` says whether the check currently holds a fail verdict: then it stays failing
    until the last ``clear_k`` runs all passed. Otherwise it fails once ``fail_n`` of the
    last ``window_m`` runs failed or missed their deadline. A single unknown (tool missing)
    stays unknown, never ok.
    """
    if not history:
        return unknown("", "no-runs")
    last = history[-1]
    window = history[-policy.window_m :]
    bad = [r for r in window if r.verdict is Verdict.FAIL or r.timed_out]
    if failing:
        tail = history[-policy.clear_k :]
        if len(tail) == policy.clear_k and all(r.verdict is Verdict.OK for r in tail):
            return last
        held = bad[-1] if bad else last
        if held.timed_out and held.verdict is not Verdict.FAIL:
            return _deadline_missed(last.check, bad, window)
        return CheckResult(
            check=last.check,
            verdict=Verdict.FAIL,
            cause=held.cause or "deadline-missed",
            remediation=held.remediation,
            evidence=held.evidence,
            timed_out=held.timed_out,
        )
    if len(bad) >= policy.fail_n:
        latest = bad[-1]
        if latest.verdict is Verdict.FAIL:
            return latest
        return _deadline_missed(last.check, bad, window)
    if last.verdict is Verdict.FAIL:
        return warn(
            last.check,
            last.cause,
            f"{len(bad)} of {policy.fail_n} failures needed: {last.evidence}",
        )
    return last


def _deadline_missed(
    check: str, bad: Sequence[CheckResult], window: Sequence[CheckResult]
) -> CheckResult:
    """The one fail that missed deadlines make, the same on every run while they go on."""
    missed = sum(1 for r in window if r.timed_out)
    evidence = f"{missed} of the last {len(window)} runs missed their deadline"
    if bad and bad[-1].evidence:
        evidence = f"{evidence}: {bad[-1].evidence}"
    return fail(check, f"{check}-deadline-missed", Remediation.MANUAL, evidence)


def encode_verdict(result: CheckResult) -> str:
    """``verdict[:cause[:remediation]]`` for the agent's status payload."""
    if not result.cause:
        return result.verdict.value
    if result.remediation is Remediation.NONE:
        return f"{result.verdict.value}:{result.cause}"
    return f"{result.verdict.value}:{result.cause}:{result.remediation.value}"


def decode_verdict(check: str, text: str) -> CheckResult:
    """The inverse of :func:`encode_verdict` (the payload was validated at the boundary)."""
    parts = text.split(":")
    try:
        verdict = Verdict(parts[0])
        remediation = Remediation(parts[2]) if len(parts) > 2 else Remediation.NONE
    except ValueError:
        return unknown(check, "unreadable-verdict", text[:80])
    cause = parts[1] if len(parts) > 1 else ""
    return CheckResult(check=check, verdict=verdict, cause=cause, remediation=remediation)

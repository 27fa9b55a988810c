"""Proof of health before return: when a node that left for a failure may resume.

A node slonkd held for a failure (a SLURM-reported ``slurm-*`` cause or a ``health`` cause),
or one whose failure the remediation ladder acted on, does not resume when the failure ends:
its cause is replaced by ``slonkd:revalidating`` (the drain stays), the leader sends the
fenced ``recheck`` command to the agent of the node's current pod, and the node resumes only
on the agent's answer to *that* command (a status carrying the command's id, measured on the
K8s node the pod runs on now) in which every check passes: every check the answer reports
and every check the policy names (:attr:`RevalidationPolicy.required`, e.g. ``dcgm-diag``).
Only ``ok`` is a pass: ``warn``, ``unknown``, ``fail`` and a missing check are not.

:func:`judge` is the rule, pure: given the pending record (kept in the state ConfigMap, or
derived from SLURM's reason after a failover that lost it), the latest answer and the clock,
it says whether to send (again) the recheck, wait, resume, or give up: past
:attr:`RevalidationPolicy.timeout_s` (counted from the later of the revalidation's start and
the last remediation step) the ladder takes its next rung, never a silent return.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from slonkd.core.config_tree import setting
from slonkd.core.health import CheckResult, Verdict
from slonkd.core.reasons import Cause

REVALIDATING = Cause(name="revalidating")
"""The cause a node is held for while its new pod proves its health."""
TIMED_OUT = Cause(name="revalidating", detail="timeout")
"""The failure a revalidation that ran past its timeout becomes (the ladder's next rung)."""
FAILURE_PREFIXES = ("slurm-", "health")
"""Causes that are failures: their end starts a revalidation rather than a resume."""


def is_failure(cause: Cause) -> bool:
    """Whether ``cause`` is a failure (SLURM-reported or health), not lifecycle/maintenance."""
    return cause.name.startswith(FAILURE_PREFIXES)


@dataclass(frozen=True, slots=True, kw_only=True)
class RevalidationPolicy:
    """Tunables of the revalidation (coordinator settings ``revalidate*``)."""

    enabled: bool = field(default=True, metadata=setting(old_key="revalidate"))
    """A node that left for a failure returns only once rechecked (off without MQTT)."""
    timeout_s: float = field(default=900.0, metadata=setting(old_key="revalidate_timeout_s"))
    """No passing answer this long after the start (or the last ladder step): next rung."""
    recheck_s: float = field(default=30.0, metadata=setting(old_key="revalidate_recheck_s"))
    """A recheck without a passing answer is sent again after this long (a lost command, an
    agent that restarted, a check that failed and may pass now, a new leader)."""
    required: tuple[str, ...] = field(default=(), metadata=setting(old_key="revalidate_checks"))
    """Checks that must be in the answer and pass (heavy ones such as ``dcgm-diag``): a
    check the agent does not report is not a pass."""
    retry_s: float = 2.0
    """... and sooner, this long after the last one, when the agent's own verdicts all pass
    now while the answer to the last one did not (a fixed node returns in seconds). Keep
    ``recheck_s`` above the heavy checks' run time (a ``dcgmi diag``)."""

    def __post_init__(self) -> None:
        if not self.timeout_s > 0 or not self.recheck_s > 0 or not self.retry_s > 0:
            raise ValueError("revalidate_timeout_s and revalidate_recheck_s must be positive")
        if not all(isinstance(c, str) and c for c in self.required):
            raise ValueError("revalidate_checks must be a list of check names")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    """One node's revalidation in progress (the state ConfigMap keeps it per SLURM node)."""

    since: float
    """When the revalidation began (the failure ended, or the ladder acted)."""
    pod_uid: str = ""
    """The pod the last recheck went to ("": none sent yet)."""
    command: str = ""
    """The id of the last recheck sent ("": none yet)."""
    requested_at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """An agent's status that answers a recheck command."""

    command: str
    kube_node: str
    """The K8s node the verdicts were measured on."""
    verdicts: Mapping[str, CheckResult] = field(default_factory=dict)


class Step(StrEnum):
    """What the leader does about one node's revalidation now."""

    REQUEST = "request"
    """Send the recheck (first time, to a new pod, or again after ``recheck_s``)."""
    WAIT = "wait"
    PASSED = "passed"
    """The answer to the last recheck passes every check: the node may resume."""
    TIMED_OUT = "timed-out"


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """The step, the checks still pending and why (for status and explain)."""

    step: Step
    since: float
    pending: tuple[str, ...] = ()
    """Checks not passed yet (``*`` : no answer to the last recheck yet)."""
    command: str = ""
    requested_at: float = 0.0
    why: str = ""
    send: bool = False
    """Send a recheck now (always with REQUEST; with TIMED_OUT too when one is due, so a
    node whose checks pass later still returns once the ladder's step is done)."""


def failed_checks(answer: Answer, required: tuple[str, ...]) -> tuple[str, ...]:
    """The checks of ``answer`` that do not pass, plus the required ones it lacks."""
    bad = {name for name, r in answer.verdicts.items() if r.verdict is not Verdict.OK}
    bad |= {name for name in required if name not in answer.verdicts}
    if not answer.verdicts and not required:
        bad.add("*")  # an answer with no check at all proves nothing
    return tuple(sorted(bad))


def judge(
    pending: Pending,
    answer: Answer | None,
    *,
    pod_uid: str,
    kube_node: str,
    now: float,
    last_step_at: float,
    policy: RevalidationPolicy,
    healthy: bool = False,
) -> Judgement:
    """The revalidation's next step for the node's current pod (see the module docstring).

    ``healthy``: the agent's latest verdicts (not an answer) all pass: after an answer that
    did not pass, a recheck is due after ``retry_s`` rather than ``recheck_s`` (never while
    the last one is unanswered: heavy checks take their time).
    """
    sent = bool(pending.command) and pending.pod_uid == pod_uid
    answered = (
        answer is not None
        and sent
        and answer.command == pending.command
        and bool(kube_node)
        and answer.kube_node == kube_node
    )
    command, requested_at = (pending.command, pending.requested_at) if sent else ("", 0.0)

    wait_s = policy.retry_s if healthy and answered else policy.recheck_s
    due = not sent or now - pending.requested_at >= wait_s

    def made(step: Step, bad: tuple[str, ...], why: str) -> Judgement:
        return Judgement(
            step=step,
            send=step is Step.REQUEST or (step is Step.TIMED_OUT and due),
            since=pending.since,
            pending=bad,
            command=command,
            requested_at=requested_at,
            why=why,
        )

    if answered:
        assert answer is not None  # noqa: S101 - narrowed by ``answered``
        bad = failed_checks(answer, policy.required)
        if not bad:
            return made(Step.PASSED, (), "every check passed")
        why = f"checks not passing in the answer to {pending.command}: {', '.join(bad)}"
    else:
        bad = ("*",)
        why = f"no answer to recheck {pending.command} yet" if sent else "no recheck sent yet"
    if now - max(pending.since, last_step_at) >= policy.timeout_s:
        return made(Step.TIMED_OUT, bad, f"{why}; no pass within {policy.timeout_s:g} s")
    if due:
        return made(Step.REQUEST, bad, why)
    return made(Step.WAIT, bad, why)

"""Outcomes of slonkd's changes to Kubernetes, and references to the objects they touch.

Every change the Kubernetes adapter makes is idempotent and answers with a
:class:`ChangeResult`: done now, already so, left alone because someone else owns the state,
refused for now (a PodDisruptionBudget), or moot because the object is gone. The decision
core reads these without knowing how they were obtained.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ChangeOutcome(StrEnum):
    """What became of one requested change."""

    CHANGED = "changed"
    """slonkd changed the object just now."""
    UNCHANGED = "unchanged"
    """The object was already as asked: nothing was written."""
    FOREIGN = "foreign"
    """Someone else owns that state (an admin's cordon): slonkd left it as it is."""
    REFUSED = "refused"
    """Not now: e.g. an eviction a PodDisruptionBudget forbids. Ask again later."""
    GONE = "gone"
    """The object no longer exists (or was replaced): nothing left to do."""
    DROPPED = "dropped"
    """Not sent on purpose (an Event over its rate limit)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeResult:
    """The outcome of a change, with the server's or slonkd's explanation."""

    outcome: ChangeOutcome
    detail: str = ""

    @property
    def done(self) -> bool:
        """True when the object is now as asked (changed now or already so)."""
        return self.outcome in (ChangeOutcome.CHANGED, ChangeOutcome.UNCHANGED)


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectRef:
    """Which object an Event is about (the involvedObject of a core/v1 Event)."""

    kind: str
    name: str
    uid: str = ""
    namespace: str = ""
    api_version: str = "v1"

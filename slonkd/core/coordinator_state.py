"""The coordinator's small persistent state: breaker, pause, remediation history.

It lives in a Kubernetes object (a ConfigMap the coordinator owns) so that a failover neither
resets nor repeats it. Each leader write carries the writer's fencing token; the store refuses
a write from a leader older than the last writer. Operators change only the fields that are
theirs (pause, breaker reset) through ``slonkd pause`` / ``unpause`` / ``budget reset``,
which keep the token. This module only defines the value and its string encoding
(ConfigMap data is a map of strings); the adapter does the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slonkd.core.errors import ParseError

SCHEMA = "2"
_READABLE = {"1", "2"}
MAX_TEXT = 500
"""Operator-given texts (pause reason, who) are cut to this length."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempts:
    """Remediation steps tried on one K8s node (the hardware, not the pod)."""

    attempts: int = 0
    last_at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorState:
    """What must survive a coordinator failover."""

    nodes_out: frozenset[str] = frozenset()
    """Nodes slonkd has taken out automatically: the disruption budget's count."""
    breaker_open: bool = False
    breaker_reason: str = ""
    breaker_opened_at: float = 0.0
    remediation: Mapping[str, Attempts] = field(default_factory=dict)
    """Per K8s node: remediation steps tried and when the last one was."""
    handled: Mapping[str, str] = field(default_factory=dict)
    """Per SLURM node: fingerprint of the SLURM failure already remediated."""
    paused: bool = False
    paused_by: str = ""
    paused_reason: str = ""
    paused_at: float = 0.0
    fencing_token: int = -1
    """Token of the leader that wrote this state last (operators' writes keep it)."""

    @property
    def remediation_attempts(self) -> dict[str, int]:
        """Attempts per K8s node (without the times)."""
        return {k: v.attempts for k, v in self.remediation.items()}

    def to_data(self) -> dict[str, str]:
        """The ConfigMap ``data`` for this state."""
        remediation = {
            k: {"attempts": v.attempts, "lastAt": v.last_at}
            for k, v in sorted(self.remediation.items())
        }
        return {
            "schema": SCHEMA,
            "nodesOut": json.dumps(sorted(self.nodes_out)),
            "breakerOpen": "true" if self.breaker_open else "false",
            "breakerReason": self.breaker_reason[:MAX_TEXT],
            "breakerOpenedAt": repr(self.breaker_opened_at),
            "remediation": json.dumps(remediation),
            "handled": json.dumps(dict(sorted(self.handled.items()))),
            "paused": "true" if self.paused else "false",
            "pausedBy": self.paused_by[:MAX_TEXT],
            "pausedReason": self.paused_reason[:MAX_TEXT],
            "pausedAt": repr(self.paused_at),
            "fencingToken": str(self.fencing_token),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None) -> CoordinatorState:
        """Read the state back from ConfigMap ``data`` (empty or missing: the initial state)."""
        if not data:
            return cls()
        if data.get("schema") not in _READABLE:
            raise ParseError(f"unknown coordinator state schema {data.get('schema')!r}")
        try:
            nodes = json.loads(data.get("nodesOut", "[]"))
            remediation = _remediation(data)
            handled = json.loads(data.get("handled", "{}"))
            token = int(data.get("fencingToken", "-1"))
            opened_at = float(data.get("breakerOpenedAt", "0"))
            paused_at = float(data.get("pausedAt", "0"))
        except (ValueError, TypeError, AttributeError) as exc:
            raise ParseError(f"unreadable coordinator state: {exc}") from exc
        if not isinstance(nodes, list) or not isinstance(handled, dict):
            raise ParseError("coordinator state has the wrong shape")
        return cls(
            nodes_out=frozenset(str(n) for n in nodes),
            breaker_open=data.get("breakerOpen") == "true",
            breaker_reason=data.get("breakerReason", ""),
            breaker_opened_at=opened_at,
            remediation=remediation,
            handled={str(k): str(v) for k, v in handled.items()},
            paused=data.get("paused") == "true",
            paused_by=data.get("pausedBy", ""),
            paused_reason=data.get("pausedReason", ""),
            paused_at=paused_at,
            fencing_token=token,
        )

    def as_json(self) -> dict[str, Any]:
        """A JSON-able summary for ``slonkd status``."""
        return {
            "paused": self.paused,
            "pausedBy": self.paused_by,
            "pausedReason": self.paused_reason,
            "pausedAt": self.paused_at,
            "breakerOpen": self.breaker_open,
            "breakerReason": self.breaker_reason,
            "breakerOpenedAt": self.breaker_opened_at,
            "remediationAttempts": self.remediation_attempts,
            "fencingToken": self.fencing_token,
        }


def _remediation(data: Mapping[str, str]) -> dict[str, Attempts]:
    """Remediation history of schema 2, or the attempt counts of schema 1."""
    if "remediation" in data:
        raw = json.loads(data["remediation"])
        if not isinstance(raw, dict):
            raise ParseError("coordinator state remediation has the wrong shape")
        return {
            str(k): Attempts(attempts=int(v["attempts"]), last_at=float(v["lastAt"]))
            for k, v in raw.items()
        }
    old = json.loads(data.get("remediationAttempts", "{}"))
    if not isinstance(old, dict):
        raise ParseError("coordinator state remediation has the wrong shape")
    return {str(k): Attempts(attempts=int(v)) for k, v in old.items()}

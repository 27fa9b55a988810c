"""The coordinator's small persistent state: disruption budget use, breaker, remediation history.

It lives in a Kubernetes object (a ConfigMap the coordinator owns) so that a failover neither
resets nor repeats it. Each write carries the writer's fencing token; the store refuses a
write from a leader older than the last writer. This module only defines the value and its
string encoding (ConfigMap data is a map of strings); the adapter does the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from slonkd.core.errors import ParseError

SCHEMA = "1"


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorState:
    """What must survive a coordinator failover."""

    nodes_out: frozenset[str] = frozenset()
    """Nodes slonkd has taken out automatically: the disruption budget's count."""
    breaker_open: bool = False
    breaker_reason: str = ""
    remediation_attempts: Mapping[str, int] = field(default_factory=dict)
    """Remediation steps tried per K8s node (the hardware, not the pod)."""
    fencing_token: int = -1
    """Token of the leader that wrote this state last."""

    def to_data(self) -> dict[str, str]:
        """The ConfigMap ``data`` for this state."""
        return {
            "schema": SCHEMA,
            "nodesOut": json.dumps(sorted(self.nodes_out)),
            "breakerOpen": "true" if self.breaker_open else "false",
            "breakerReason": self.breaker_reason,
            "remediationAttempts": json.dumps(dict(sorted(self.remediation_attempts.items()))),
            "fencingToken": str(self.fencing_token),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None) -> CoordinatorState:
        """Read the state back from ConfigMap ``data`` (empty or missing: the initial state)."""
        if not data:
            return cls()
        if data.get("schema") != SCHEMA:
            raise ParseError(f"unknown coordinator state schema {data.get('schema')!r}")
        try:
            nodes = json.loads(data.get("nodesOut", "[]"))
            attempts = json.loads(data.get("remediationAttempts", "{}"))
            token = int(data.get("fencingToken", "-1"))
        except ValueError as exc:
            raise ParseError(f"unreadable coordinator state: {exc}") from exc
        if not isinstance(nodes, list) or not isinstance(attempts, dict):
            raise ParseError("coordinator state has the wrong shape")
        return cls(
            nodes_out=frozenset(str(n) for n in nodes),
            breaker_open=data.get("breakerOpen") == "true",
            breaker_reason=data.get("breakerReason", ""),
            remediation_attempts={str(k): int(v) for k, v in attempts.items()},
            fencing_token=token,
        )

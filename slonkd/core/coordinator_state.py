"""The coordinator's small persistent state: breaker, pause, pool modes, remediation history.

It lives in a Kubernetes object (a ConfigMap the coordinator owns) so that a failover neither
resets nor repeats it. Each leader write carries the writer's fencing token; the store refuses
a write from a leader older than the last writer. Operators change only the fields that are
theirs (pause, breaker reset, a pool's mode) through ``slonkd pause`` / ``unpause`` /
``budget reset`` / ``mode`` (:mod:`slonkd.core.modes`),
which keep the token. This module only defines the value and its string encoding
(ConfigMap data is a map of strings); the adapter does the I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slonkd.core.errors import ParseError
from slonkd.core.revalidation import Pending


class StateCorrupt(ParseError):
    """The state ConfigMap holds something slonkd did not write: nothing may act on it.

    The coordinator refuses automated actions until it is readable again; ``slonkd state
    reset --yes-discard-state`` replaces it with the initial state.
    """


SCHEMA = "2"
_READABLE = {"1", "2"}
MAX_TEXT = 500
"""Operator-given texts (pause reason, who) are cut to this length."""
MAX_TOKEN = 2**31 - 2
"""The highest fencing token a state may hold: the token is the Lease's ``leaseTransitions``,
an int32, and the next term's must be above it. A higher one is corrupt state (no term could
ever exceed it), and it is not salvaged as a floor."""
MODES = ("observe", "quarantine", "full")
"""The modes a pool may run in (:class:`slonkd.core.modes.Mode`'s values)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempts:
    """Remediation steps tried on one K8s node (the hardware, not the pod).

    Each :class:`~slonkd.core.plan.NodeView` carries its K8s node's (``Remediations``).
    """

    attempts: int = 0
    last_at: float = 0.0
    returned_at: float = 0.0
    """When a person returned the machine (``slonkd return``; 0: not since the last step).
    The history is kept: the attempts still count, so a later failure takes the next rung;
    the next step clears this mark (:mod:`slonkd.core.quarantine`)."""
    returned_by: str = ""
    """Who returned it (cut to :data:`MAX_TEXT`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolMode:
    """An operator's mode for one pool (``slonkd mode POOL MODE``): it wins over the chart's."""

    mode: str
    by: str = ""
    at: float = 0.0


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
    revalidating: Mapping[str, Pending] = field(default_factory=dict)
    """Per SLURM node: its revalidation in progress (since, the last recheck sent)."""
    paused: bool = False
    paused_by: str = ""
    paused_reason: str = ""
    paused_at: float = 0.0
    pool_modes: Mapping[str, PoolMode] = field(default_factory=dict)
    """Per pool: the mode an operator switched it to (absent: the chart's)."""
    fencing_token: int = -1
    """Token of the leader that wrote this state last (operators' writes keep it)."""

    @property
    def remediation_attempts(self) -> dict[str, int]:
        """Attempts per K8s node (without the times)."""
        return {k: v.attempts for k, v in self.remediation.items()}

    def to_data(self) -> dict[str, str]:
        """The ConfigMap ``data`` for this state."""
        remediation = {k: _attempts_data(v) for k, v in sorted(self.remediation.items())}
        return {
            "schema": SCHEMA,
            "nodesOut": json.dumps(sorted(self.nodes_out)),
            "breakerOpen": "true" if self.breaker_open else "false",
            "breakerReason": self.breaker_reason[:MAX_TEXT],
            "breakerOpenedAt": repr(self.breaker_opened_at),
            "remediation": json.dumps(remediation),
            "handled": json.dumps(dict(sorted(self.handled.items()))),
            "revalidating": json.dumps(
                {
                    k: {
                        "since": v.since,
                        "podUid": v.pod_uid,
                        "command": v.command,
                        "requestedAt": v.requested_at,
                    }
                    for k, v in sorted(self.revalidating.items())
                }
            ),
            "paused": "true" if self.paused else "false",
            "pausedBy": self.paused_by[:MAX_TEXT],
            "pausedReason": self.paused_reason[:MAX_TEXT],
            "pausedAt": repr(self.paused_at),
            "poolModes": json.dumps(
                {
                    k: {"mode": v.mode, "by": v.by[:MAX_TEXT], "at": v.at}
                    for k, v in sorted(self.pool_modes.items())
                }
            ),
            "fencingToken": str(self.fencing_token),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None) -> CoordinatorState:
        """Read the state back from ConfigMap ``data`` (empty or missing: the initial state).

        Anything but a state this module wrote (or a person wrote in the same shape) is a
        :class:`StateCorrupt`: never a half-read state, a NaN or an infinity.
        """
        if not data:
            return cls()
        if not isinstance(data, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            raise StateCorrupt("coordinator state data is not a map of strings")
        if data.get("schema") not in _READABLE:
            raise StateCorrupt(f"unknown coordinator state schema {str(data.get('schema'))[:40]!r}")
        try:
            nodes = _json(data, "nodesOut", "[]")
            handled = _json(data, "handled", "{}")
            if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
                raise StateCorrupt("coordinator state nodesOut is not a list of names")
            if not isinstance(handled, dict) or not all(
                isinstance(v, str) for v in handled.values()
            ):
                raise StateCorrupt("coordinator state handled is not a map of texts")
            return cls(
                nodes_out=frozenset(nodes),
                breaker_open=_flag(data, "breakerOpen"),
                breaker_reason=data.get("breakerReason", "")[:MAX_TEXT],
                breaker_opened_at=_time(data.get("breakerOpenedAt", "0"), "breakerOpenedAt"),
                remediation=_remediation(data),
                handled=dict(handled),
                revalidating=_revalidating(data),
                paused=_flag(data, "paused"),
                paused_by=data.get("pausedBy", "")[:MAX_TEXT],
                paused_reason=data.get("pausedReason", "")[:MAX_TEXT],
                paused_at=_time(data.get("pausedAt", "0"), "pausedAt"),
                pool_modes=_pool_modes(data),
                fencing_token=_token(data.get("fencingToken", "-1")),
            )
        except StateCorrupt:
            raise
        except (ValueError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
            raise StateCorrupt(f"unreadable coordinator state: {str(exc)[:200]}") from exc

    def as_json(self) -> dict[str, Any]:
        """A JSON-able summary for ``slonkd status``."""
        return {
            "paused": self.paused,
            "pausedBy": self.paused_by,
            "pausedReason": self.paused_reason,
            "pausedAt": self.paused_at,
            "poolModes": {
                k: {"mode": v.mode, "by": v.by, "at": v.at}
                for k, v in sorted(self.pool_modes.items())
            },
            "breakerOpen": self.breaker_open,
            "breakerReason": self.breaker_reason,
            "breakerOpenedAt": self.breaker_opened_at,
            "remediationAttempts": self.remediation_attempts,
            "revalidating": {
                k: {"since": v.since, "command": v.command, "requestedAt": v.requested_at}
                for k, v in sorted(self.revalidating.items())
            },
            "fencingToken": self.fencing_token,
        }


def salvage_token(data: Mapping[str, str] | None) -> int:
    """The last writer's fencing token from ``data``, even a corrupt one (-1: none readable).

    A new leader's token must exceed it, whatever else the state holds. A token no term could
    exceed (above :data:`MAX_TOKEN`) is not kept: -1.
    """
    try:
        return _token((data or {}).get("fencingToken", "-1"))
    except (StateCorrupt, AttributeError, TypeError):
        return -1


def _attempts_data(a: Attempts) -> dict[str, Any]:
    """One K8s node's history as stored (the return's keys only once it was returned)."""
    out: dict[str, Any] = {"attempts": a.attempts, "lastAt": a.last_at}
    if a.returned_at:
        out.update(returnedAt=a.returned_at, returnedBy=a.returned_by[:MAX_TEXT])
    return out


def _json(data: Mapping[str, str], key: str, default: str) -> Any:
    return json.loads(data.get(key, default))


def _flag(data: Mapping[str, str], key: str) -> bool:
    value = data.get(key, "false")
    if value not in ("true", "false"):
        raise StateCorrupt(f"coordinator state {key} is {value[:40]!r}, not true or false")
    return value == "true"


def _time(value: object, what: str) -> float:
    """A finite, non-negative number of seconds (JSON or text)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise StateCorrupt(f"coordinator state {what} is not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise StateCorrupt(f"coordinator state {what} is {str(value)[:40]!r}")
    return number


def _count(value: object, what: str) -> int:
    """A non-negative integer (JSON, not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StateCorrupt(f"coordinator state {what} is {str(value)[:40]!r}, not a count")
    return value


def _token(value: object) -> int:
    if not isinstance(value, str):
        raise StateCorrupt("coordinator state fencingToken is not a text")
    try:
        token = int(value)
    except ValueError as exc:
        raise StateCorrupt(f"coordinator state fencingToken is {value[:40]!r}") from exc
    if token < -1:
        raise StateCorrupt(f"coordinator state fencingToken is {str(token)[:40]}")
    if token > MAX_TOKEN:
        raise StateCorrupt(
            f"coordinator state fencingToken is {str(token)[:40]}: no term's token can exceed it "
            "(the Lease's leaseTransitions is an int32)"
        )
    return token


def _remediation(data: Mapping[str, str]) -> dict[str, Attempts]:
    """Remediation history of schema 2, or the attempt counts of schema 1."""
    if "remediation" in data:
        raw = json.loads(data["remediation"])
        if not isinstance(raw, dict):
            raise StateCorrupt("coordinator state remediation has the wrong shape")
        done: dict[str, Attempts] = {}
        for k, v in raw.items():
            if not isinstance(v, dict) or not {"attempts", "lastAt"} <= set(v):
                raise StateCorrupt(f"coordinator state remediation of {k[:60]!r} is malformed")
            by = v.get("returnedBy", "")
            if not isinstance(by, str):
                raise StateCorrupt(f"coordinator state returnedBy of {k[:60]!r} is not a text")
            done[k] = Attempts(
                attempts=_count(v["attempts"], "attempts"),
                last_at=_time(v["lastAt"], "lastAt"),
                returned_at=_time(v.get("returnedAt", 0), "returnedAt"),
                returned_by=by[:MAX_TEXT],
            )
        return done
    old = json.loads(data.get("remediationAttempts", "{}"))
    if not isinstance(old, dict):
        raise StateCorrupt("coordinator state remediation has the wrong shape")
    return {k: Attempts(attempts=_count(v, "attempts")) for k, v in old.items()}


def _mapping(data: Mapping[str, str], key: str) -> dict[str, Any]:
    """The JSON object under ``key`` (absent: empty); any other JSON is a corrupt state."""
    raw = json.loads(data.get(key, "{}"))
    if not isinstance(raw, dict):
        raise StateCorrupt(f"coordinator state {key} has the wrong shape")
    return raw


def _revalidating(data: Mapping[str, str]) -> dict[str, Pending]:
    """Revalidations in progress (absent in states written before them: none)."""
    raw = _mapping(data, "revalidating")
    done: dict[str, Pending] = {}
    for k, v in raw.items():
        if (
            not isinstance(v, dict)
            or not {"since", "podUid", "command", "requestedAt"} <= set(v)
            or not isinstance(v["podUid"], str)
            or not isinstance(v["command"], str)
        ):
            raise StateCorrupt(f"coordinator state revalidating of {k[:60]!r} is malformed")
        done[k] = Pending(
            since=_time(v["since"], "since"),
            pod_uid=v["podUid"][:MAX_TEXT],
            command=v["command"][:MAX_TEXT],
            requested_at=_time(v["requestedAt"], "requestedAt"),
        )
    return done


def _pool_modes(data: Mapping[str, str]) -> dict[str, PoolMode]:
    """The operators' modes per pool (absent in states written before them: none)."""
    raw = _mapping(data, "poolModes")
    done: dict[str, PoolMode] = {}
    for k, v in raw.items():
        if not isinstance(v, dict) or v.get("mode") not in MODES:
            raise StateCorrupt(f"coordinator state poolModes of {k[:60]!r} is malformed")
        by = v.get("by", "")
        if not isinstance(by, str):
            raise StateCorrupt(f"coordinator state poolModes by of {k[:60]!r} is not a text")
        done[k] = PoolMode(mode=v["mode"], by=by[:MAX_TEXT], at=_time(v.get("at", 0), "at"))
    return done

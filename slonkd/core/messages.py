"""The bus's topics and versioned JSON payloads, validated at the boundary.

Topics (``<cluster>`` and ``<node>`` are checked names, never wildcards)::

    slonk/v1/<cluster>/nodes/<node>/status     agent -> all, retained (last will: offline)
    slonk/v1/<cluster>/nodes/<node>/events     agent -> coordinator
    slonk/v1/<cluster>/nodes/<node>/commands   coordinator -> that agent
    slonk/v1/<cluster>/coordinator/status      coordinator -> all, retained (last will: offline)
    slonk/v1/<cluster>/slurm/events            slurmctld's triggers (slonkd-nudge) -> coordinator

Every payload is a JSON object with ``"v": 1`` and a ``"kind"`` that must match its topic;
the node named inside must be the node of the topic. Anything else (too large, not UTF-8,
not JSON, wrong version, unknown or missing fields, wrong types, overlong strings, a node
that does not match its topic) raises :class:`~slonkd.core.errors.ParseError` and is never
acted on. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, get_origin, get_type_hints

from slonkd.core.errors import ParseError
from slonkd.core.reasons import SAFE_DETAIL, cause_detail

SCHEMA_VERSION: Final = 1
MAX_PAYLOAD_BYTES: Final = 16 * 1024
MAX_TEXT: Final = 1024
"""Longest free-text field (reasons, details) in characters."""

_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_ID_RE: Final = re.compile(r"[A-Za-z0-9_-]{8,64}")
ROOT: Final = "slonk/v1"


class Channel(StrEnum):
    """What a topic carries."""

    STATUS = "status"
    EVENTS = "events"
    COMMANDS = "commands"
    COORDINATOR = "coordinator"
    SLURM = "slurm"
    """slurmctld's trigger nudges (``slonk/v1/<cluster>/slurm/events``)."""


def check_name(value: str, what: str) -> str:
    """Return ``value`` if it is a safe cluster/node name, else raise ParseError."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise ParseError(f"bad {what} name: {str(value)[:80]!r}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Topic:
    """A parsed topic: cluster, channel and (except for the coordinator's) node."""

    cluster: str
    channel: Channel
    node: str | None = None

    def __str__(self) -> str:
        if self.channel is Channel.COORDINATOR:
            return f"{ROOT}/{self.cluster}/coordinator/status"
        if self.channel is Channel.SLURM:
            return f"{ROOT}/{self.cluster}/slurm/events"
        return f"{ROOT}/{self.cluster}/nodes/{self.node}/{self.channel.value}"


def node_topic(cluster: str, node: str, channel: Channel) -> Topic:
    """The topic of ``channel`` for ``node``; names are validated."""
    if channel in (Channel.COORDINATOR, Channel.SLURM):
        raise ValueError(f"the {channel} channel has no node")
    return Topic(
        cluster=check_name(cluster, "cluster"), channel=channel, node=check_name(node, "node")
    )


def coordinator_topic(cluster: str) -> Topic:
    """The coordinator's retained status topic."""
    return Topic(cluster=check_name(cluster, "cluster"), channel=Channel.COORDINATOR)


def slurm_events_topic(cluster: str) -> Topic:
    """Where slurmctld's triggers nudge the coordinator."""
    return Topic(cluster=check_name(cluster, "cluster"), channel=Channel.SLURM)


def parse_topic(topic: str) -> Topic:
    """Parse a concrete topic string; anything outside the layout raises ParseError."""
    parts = topic.split("/")
    if len(parts) == 6 and parts[:2] == ["slonk", "v1"] and parts[3] == "nodes":
        try:
            channel = Channel(parts[5])
        except ValueError as exc:
            raise ParseError(f"unknown channel in topic {topic[:120]!r}") from exc
        if channel not in (Channel.COORDINATOR, Channel.SLURM):
            return node_topic(parts[2], parts[4], channel)
    if len(parts) == 5 and parts[:2] == ["slonk", "v1"] and parts[3:] == ["coordinator", "status"]:
        return coordinator_topic(parts[2])
    if len(parts) == 5 and parts[:2] == ["slonk", "v1"] and parts[3:] == ["slurm", "events"]:
        return slurm_events_topic(parts[2])
    raise ParseError(f"topic outside the layout: {topic[:120]!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStatus:
    """An agent's retained status: online or offline (the last will), and what it sees."""

    node: str
    online: bool
    pod: str = ""
    kube_node: str = ""
    """The K8s node the verdicts were measured on (health belongs to the hardware)."""
    slurm_state: str = ""
    health: dict[str, str] = field(default_factory=dict)
    """check name -> ``verdict[:cause[:remediation]]`` (see ``slonkd.core.health``)."""
    at: float = 0.0
    answers: str = ""
    """The id of the ``recheck`` command this status answers: every check ran after it
    ("": none; left out of the payload then, so statuses read as before)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentEvent:
    """Something an agent noticed or did (a health verdict changed, a mirror applied)."""

    node: str
    event: str
    cause: str = ""
    detail: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """An order from the coordinator to one agent; ``id`` lets agents drop repeats."""

    id: str
    node: str
    action: str
    cause: str
    fencing_token: int
    detail: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorStatus:
    """The coordinator's retained status (its last will says ``online: false``)."""

    online: bool
    leader: str = ""
    fencing_token: int = 0
    at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmEvent:
    """A trigger fired in slurmctld: which node event, on which nodes (a hostlist)."""

    event: str
    nodes: str
    at: float = 0.0


SLURM_EVENTS: Final = frozenset({"down", "drained", "fail", "up"})
_HOSTLIST_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,\[\]-]{0,1023}")

Payload = AgentStatus | AgentEvent | Command | CoordinatorStatus | SlurmEvent

_KIND: Final[dict[Channel, tuple[str, type[Payload]]]] = {
    Channel.STATUS: ("agent-status", AgentStatus),
    Channel.EVENTS: ("agent-event", AgentEvent),
    Channel.COMMANDS: ("command", Command),
    Channel.COORDINATOR: ("coordinator-status", CoordinatorStatus),
    Channel.SLURM: ("slurm-event", SlurmEvent),
}


def _wire_fields(cls: type[Payload]) -> dict[str, tuple[type, bool]]:
    """field -> (JSON type, required), read from the payload's class in its order.

    A field without a default is required. ``str`` fields are bounded by :data:`MAX_TEXT`,
    names are checked separately (:func:`decode`).
    """
    hints = get_type_hints(cls)
    wire: dict[str, tuple[type, bool]] = {}
    for f in dataclasses.fields(cls):
        kind = get_origin(hints[f.name]) or hints[f.name]
        if kind not in (str, bool, int, float, dict):
            raise TypeError(f"{cls.__name__}.{f.name}: not a type the bus carries")
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        wire[f.name] = (kind, required)
    return wire


_FIELDS: Final = {cls: _wire_fields(cls) for _, cls in _KIND.values()}
"""Each payload's fields as the wire carries them: the classes above are the one list."""


_LEFT_OUT_EMPTY: Final = frozenset({"answers"})
"""Fields newer than their payload: absent when empty, so an older reader accepts it."""


def encode(payload: Payload) -> bytes:
    """Serialise a payload with its version and kind (compact JSON, UTF-8)."""
    channel = next(c for c, (_, cls) in _KIND.items() if isinstance(payload, cls))
    body: dict[str, Any] = {"v": SCHEMA_VERSION, "kind": _KIND[channel][0]}
    for name in _FIELDS[type(payload)]:
        if name in _LEFT_OUT_EMPTY and not getattr(payload, name):
            continue
        body[name] = getattr(payload, name)
    raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload of {len(raw)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    return raw


def _check_value(name: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is int and isinstance(value, bool):
        raise ParseError(f"field {name!r} must be an integer")
    if not isinstance(value, kind):
        raise ParseError(f"field {name!r} must be {kind.__name__}")
    if isinstance(value, float) and value != value:  # NaN
        raise ParseError(f"field {name!r} is not a number")
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise ParseError(f"field {name!r} longer than {MAX_TEXT} characters")
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < 2**63:
        raise ParseError(f"field {name!r} out of range")
    if isinstance(value, dict) and not _short_map(value):
        raise ParseError(f"field {name!r} must map short names to short strings")
    return value


_CHECK_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_VERDICT_RE: Final = re.compile(rf"(ok|warn|fail|unknown)(:{SAFE_DETAIL}(:[a-z-]{{1,16}})?)?")
"""A verdict's cause is a reason detail (``slonkd.core.health`` makes every cause one)."""


def health_key(check: str) -> str:
    """``check`` as a key of a status's ``health`` map, in the grammar the decoder accepts.

    Unchanged when the decoder accepts it, else mapped into the cause grammar
    (``mount:/my home`` -> ``mount-my-home``).
    """
    return check if _CHECK_RE.fullmatch(check) else cause_detail(check)


def _short_map(value: dict[Any, Any]) -> bool:
    """``health``: check name -> ``verdict[:cause[:remediation]]``, at most 64 checks."""
    return len(value) <= 64 and all(
        isinstance(k, str)
        and _CHECK_RE.fullmatch(k)
        and isinstance(v, str)
        and _VERDICT_RE.fullmatch(v)
        for k, v in value.items()
    )


def decode(topic: Topic, raw: bytes) -> Payload:
    """Validate ``raw`` as the payload of ``topic``; raise ParseError on anything amiss."""
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise ParseError(f"payload of {len(raw)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ParseError(f"payload is not UTF-8 JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ParseError("payload is not a JSON object")
    if body.get("v") != SCHEMA_VERSION:
        raise ParseError(f"unsupported schema version {str(body.get('v'))[:20]!r}")
    kind, cls = _KIND[topic.channel]
    if body.get("kind") != kind:
        raise ParseError(f"kind {str(body.get('kind'))[:40]!r} does not belong on {topic.channel}")
    fields = _FIELDS[cls]
    unknown = set(body) - set(fields) - {"v", "kind"}
    if unknown:
        raise ParseError(f"unknown fields {sorted(unknown)[:5]}")
    values: dict[str, Any] = {}
    for name, (ftype, required) in fields.items():
        if name not in body:
            if required:
                raise ParseError(f"missing field {name!r}")
            continue
        values[name] = _check_value(name, body[name], ftype)
    if "node" in values:
        check_name(values["node"], "node")
        if values["node"] != topic.node:
            raise ParseError(f"payload names node {values['node']!r} on {topic.node!r}'s topic")
    if cls is SlurmEvent and (
        values["event"] not in SLURM_EVENTS or not _HOSTLIST_RE.fullmatch(values["nodes"])
    ):
        raise ParseError("a SLURM event names down/drained/fail/up and a hostlist")
    if cls is AgentStatus and values.get("answers") and not _ID_RE.fullmatch(values["answers"]):
        raise ParseError("answers must be a command id (8-64 characters of [A-Za-z0-9_-])")
    if cls is Command and not _ID_RE.fullmatch(values["id"]):
        raise ParseError("command id must be 8-64 characters of [A-Za-z0-9_-]")
    payload: Payload = cls(**values)
    return payload

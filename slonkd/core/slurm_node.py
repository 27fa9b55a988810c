"""The typed model of one SLURM node as slonkd sees it (pure; no I/O).

SLURM describes a node by one base state (idle, mixed, allocated, down, ...) plus a set of
flags (DRAIN, FAIL, NOT_RESPONDING, ...). There is no "drained" or "draining" state in
SLURM's data: DRAIN on an idle/down node is drained, DRAIN on a node with work is draining.
This module owns that derivation. Anything it does not recognise is kept verbatim in
``unrecognised`` and makes the node neither drained nor available: unknown never means
drained and never means healthy. Parsers (in the adapters) build these objects; the core
decides on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import NewType

NodeName = NewType("NodeName", str)


class BaseState(StrEnum):
    """SLURM's base node state (``node_state & NODE_STATE_BASE``), lower case."""

    UNKNOWN = "unknown"
    DOWN = "down"
    IDLE = "idle"
    ALLOCATED = "allocated"
    ERROR = "error"
    MIXED = "mixed"
    FUTURE = "future"
    UNRECOGNISED = "unrecognised"
    """A base state this version of slonkd does not know; the raw token is kept."""


class NodeFlag(StrEnum):
    """Flags SLURM adds to the base state, spelled as SLURM 22.05 and 24.11 print them."""

    DRAIN = "DRAIN"
    FAIL = "FAIL"
    NOT_RESPONDING = "NOT_RESPONDING"
    COMPLETING = "COMPLETING"
    REBOOT_REQUESTED = "REBOOT_REQUESTED"
    REBOOT_ISSUED = "REBOOT_ISSUED"
    MAINTENANCE = "MAINTENANCE"
    RESERVED = "RESERVED"
    CLOUD = "CLOUD"
    POWER_DOWN = "POWER_DOWN"
    POWERED_DOWN = "POWERED_DOWN"
    POWERING_DOWN = "POWERING_DOWN"
    POWERING_UP = "POWERING_UP"
    POWER_UP = "POWER_UP"
    PLANNED = "PLANNED"
    DYNAMIC_FUTURE = "DYNAMIC_FUTURE"
    DYNAMIC_NORM = "DYNAMIC_NORM"
    INVALID_REG = "INVALID_REG"
    PERFCTRS = "PERFCTRS"
    BLOCKED = "BLOCKED"


_FLAG_ALIASES = {"MAINT": NodeFlag.MAINTENANCE, "POWER": NodeFlag.POWERED_DOWN}

# Flags that take a node out of service by themselves (beyond DRAIN and FAIL).
_OUT_OF_SERVICE = frozenset(
    {
        NodeFlag.NOT_RESPONDING,
        NodeFlag.REBOOT_REQUESTED,
        NodeFlag.REBOOT_ISSUED,
        NodeFlag.MAINTENANCE,
        NodeFlag.POWER_DOWN,
        NodeFlag.POWERED_DOWN,
        NodeFlag.POWERING_DOWN,
        NodeFlag.POWERING_UP,
        NodeFlag.INVALID_REG,
        NodeFlag.DYNAMIC_FUTURE,
    }
)
_BUSY_BASES = frozenset({BaseState.ALLOCATED, BaseState.MIXED})
_UP_BASES = frozenset({BaseState.IDLE, BaseState.MIXED, BaseState.ALLOCATED})
_RESTING_BASES = frozenset({BaseState.IDLE, BaseState.DOWN, BaseState.UNKNOWN, BaseState.FUTURE})


class DrainStatus(StrEnum):
    """Derived drain status: SLURM prints no such word, slonkd derives it."""

    NONE = "none"
    DRAINING = "draining"
    DRAINED = "drained"
    UNKNOWN = "unknown"
    """The state holds something slonkd does not recognise: neither drained nor not."""


_HOLDING_DRAIN = frozenset({DrainStatus.DRAINING, DrainStatus.DRAINED})


def parse_base(token: str) -> BaseState:
    """The :class:`BaseState` for one SLURM token (any case); UNRECOGNISED when unknown."""
    try:
        return BaseState(token.strip().lower())
    except ValueError:
        return BaseState.UNRECOGNISED


def parse_flag(token: str) -> NodeFlag | None:
    """The :class:`NodeFlag` for one SLURM token (any case), or None when unknown."""
    up = token.strip().upper()
    if up in _FLAG_ALIASES:
        return _FLAG_ALIASES[up]
    try:
        return NodeFlag(up)
    except ValueError:
        return None


def _drain_status(base: BaseState, flags: frozenset[NodeFlag], recognised: bool) -> DrainStatus:
    if not recognised:
        return DrainStatus.UNKNOWN
    if NodeFlag.DRAIN not in flags:
        return DrainStatus.NONE
    if base in _BUSY_BASES or NodeFlag.COMPLETING in flags:
        return DrainStatus.DRAINING
    if base in _RESTING_BASES:
        return DrainStatus.DRAINED
    return DrainStatus.UNKNOWN


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    """Base state plus flags, with what was not recognised kept verbatim."""

    base: BaseState
    flags: frozenset[NodeFlag] = frozenset()
    unrecognised: tuple[str, ...] = ()
    """Raw tokens (base or flags) this version does not know, in the order read."""

    @classmethod
    def from_tokens(cls, base: str, flags: tuple[str, ...] | list[str]) -> NodeState:
        """Build from SLURM's tokens, keeping unknown ones in ``unrecognised``."""
        parsed_base = parse_base(base)
        unknown: list[str] = [base] if parsed_base is BaseState.UNRECOGNISED else []
        known: set[NodeFlag] = set()
        for token in flags:
            flag = parse_flag(token)
            if flag is None:
                unknown.append(token)
            else:
                known.add(flag)
        return cls(base=parsed_base, flags=frozenset(known), unrecognised=tuple(unknown))

    fully_recognised: bool = field(init=False, repr=False, compare=False)
    """Whether every token of the state is known to slonkd."""
    drain: DrainStatus = field(init=False, repr=False, compare=False)
    """Drained (no work left), draining (work still running), none, or unknown."""
    down: bool = field(init=False, repr=False, compare=False)
    """Base state DOWN (admin down, or not responding long enough)."""
    failed: bool = field(init=False, repr=False, compare=False)
    """FAIL flag set (``scontrol update state=fail``)."""
    available: bool = field(init=False, repr=False, compare=False)
    """Fully recognised, up, and carrying no flag that withholds it from jobs."""

    def __post_init__(self) -> None:
        # Derived once here: a pass asks each node these questions many times (issue 17's
        # decide-phase profile), and the state never changes after it is read.
        recognised = not self.unrecognised and self.base is not BaseState.UNRECOGNISED
        setattr_ = object.__setattr__
        setattr_(self, "fully_recognised", recognised)
        setattr_(self, "drain", _drain_status(self.base, self.flags, recognised))
        setattr_(self, "down", self.base is BaseState.DOWN)
        setattr_(self, "failed", NodeFlag.FAIL in self.flags)
        setattr_(
            self,
            "available",
            recognised
            and self.base in _UP_BASES
            and not self.flags & {NodeFlag.DRAIN, NodeFlag.FAIL}
            and not self.flags & _OUT_OF_SERVICE,
        )

    @property
    def reboot_pending(self) -> bool:
        """A reboot is requested or issued and has not completed yet."""
        return bool(self.flags & {NodeFlag.REBOOT_REQUESTED, NodeFlag.REBOOT_ISSUED})

    @property
    def out_of_service(self) -> bool:
        """Drained, draining, down, failed or otherwise withheld: not a healthy node."""
        return not self.available

    def __str__(self) -> str:
        parts = [self.base.value.upper(), *sorted(f.value for f in self.flags)]
        return "+".join([*parts, *self.unrecognised])


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmNode:
    """One node as read from slurmctld, in a single consistent read."""

    name: NodeName
    state: NodeState
    reason: str = ""
    """The reason text without the ``[user@time]`` suffix of the text format."""
    reason_user: str | None = None
    reason_time: datetime | None = None
    comment: str = ""
    extra: str = ""
    features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    cpus: int = 0
    alloc_cpus: int = 0
    partitions: tuple[str, ...] = field(default=())
    running_jobs: int | None = None
    """Jobs holding resources on the node (running, completing, suspended, configuring),
    from a separate ``squeue`` read; None when that read was not asked for."""

    held: bool = field(init=False, repr=False, compare=False)
    """Drained, draining, down or failed: a state someone's reason holds it in."""
    live_reason: str = field(init=False, repr=False, compare=False)
    """The reason while it holds the node, else "".

    SLURM 24.11 keeps the old reason text on a node after ``resume``/``undrain``
    (22.05 clears it): such a leftover holds nothing and belongs to nobody.
    """

    def __post_init__(self) -> None:
        st = self.state
        held = st.down or st.failed or st.drain in _HOLDING_DRAIN
        object.__setattr__(self, "held", held)
        object.__setattr__(self, "live_reason", self.reason if held else "")

    @property
    def busy(self) -> bool:
        """Whether any CPU of the node is allocated to a job."""
        return self.alloc_cpus > 0 or self.state.base in _BUSY_BASES


def failure_fingerprint(slurm: SlurmNode) -> str:
    """Identifies one SLURM-reported failure: its reason and when SLURM set it."""
    return f"{slurm.reason}|{slurm.reason_time.isoformat() if slurm.reason_time else ''}"

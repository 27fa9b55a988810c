"""slurmctld event triggers (``strigger``) that nudge slonkd when nodes change.

slurmctld checks its triggers only every 15 s or so, so these are a backstop next to the
cheap periodic reasons read, not the fast path. Triggers are permanent (``--flags=PERM``)
and live in slurmctld's StateSaveLocation: they survive restarts, so registration must be
idempotent. slonkd's triggers carry its owner tag: the program line is ``<program>
--by=<owner> <event>``, so slurmctld runs ``<program> --by=<owner> <event> <hostlist>``
(slonkd-nudge takes the tag and ignores it). The tag, not the program's path, says whose a
trigger is: a trigger an operator set by hand, even one running slonkd-nudge, is never
touched, and a trigger slonkd set with an older program path is still its own to replace.
:meth:`Triggers.ensure` keeps exactly one trigger per event for the owner's program line
(adding what is missing, clearing duplicates and stale lines) and :meth:`Triggers.remove`
clears the owner's triggers. The program must reach the coordinator over the network
(slurmctld and the coordinator are different pods).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from slonkd.adapters.slurm.runner import CommandRunner
from slonkd.core.errors import ParseError

_ROW = re.compile(
    r"\s*(?P<id>\d+)\s+(?P<res_type>\S+)\s+(?P<res_id>\S+)\s+(?P<type>\S+)\s+"
    r"(?P<offset>-?\d+)\s+(?P<user>\S+)\s+(?:(?P<flags>PERM)\s+)?(?P<program>.*?)\s*"
)


class TriggerEvent(StrEnum):
    """Node events slonkd wants to hear of (``strigger --node --<event>``)."""

    DOWN = "down"
    DRAINED = "drained"
    FAIL = "fail"
    UP = "up"


@dataclass(frozen=True, slots=True, kw_only=True)
class Trigger:
    """One row of ``strigger --get``."""

    trig_id: int
    res_type: str
    res_id: str
    event: str
    user: str
    permanent: bool
    program: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EnsureResult:
    """What :meth:`Triggers.ensure` did."""

    added: tuple[TriggerEvent, ...] = ()
    cleared: tuple[int, ...] = ()
    kept: tuple[int, ...] = ()


def parse_strigger_get(text: str) -> list[Trigger]:
    """Rows of ``strigger --get`` (22.05 layout: a header line, then one row a trigger)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    if not lines[0].lstrip().startswith("TRIG_ID"):
        raise ParseError(f"strigger --get without its header: {lines[0][:80]!r}")
    triggers = []
    for line in lines[1:]:
        match = _ROW.fullmatch(line)
        if match is None:
            raise ParseError(f"strigger row does not parse: {line[:120]!r}")
        triggers.append(
            Trigger(
                trig_id=int(match["id"]),
                res_type=match["res_type"],
                res_id=match["res_id"],
                event=match["type"],
                user=match["user"],
                permanent=match["flags"] == "PERM",
                program=match["program"],
            )
        )
    return triggers


OWNER = "slonkd-coordinator"
"""The owner tag of the coordinator's triggers."""

_OWNER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def owner_tag(owner: str) -> str:
    """The program's first argument that marks ``owner``'s triggers: ``--by=<owner>``."""
    if not _OWNER_NAME.fullmatch(owner):
        raise ValueError(f"trigger owner must be a plain name: {owner!r}")
    return f"--by={owner}"


def program_line(program: str, event: TriggerEvent, owner: str = OWNER) -> str:
    """The ``--program`` value for ``event``: ``<program> --by=<owner> <event>``."""
    if not program or any(ch.isspace() for ch in program):
        raise ValueError(f"trigger program must be one path without spaces: {program!r}")
    return f"{program} {owner_tag(owner)} {event.value}"


def owned(trigger: Trigger, owner: str = OWNER) -> bool:
    """True for a node trigger whose program line carries ``owner``'s tag as its first argument."""
    words = trigger.program.split()
    return trigger.res_type == "node" and len(words) >= 2 and words[1] == owner_tag(owner)


class Triggers:
    """Registers, lists and removes one owner's permanent node triggers."""

    def __init__(self, runner: CommandRunner, *, owner: str = OWNER) -> None:
        owner_tag(owner)  # a bad owner fails here, not at the first registration
        self._runner = runner
        self.owner = owner

    async def read(self) -> list[Trigger]:
        """Every trigger slurmctld holds (anyone's)."""
        return parse_strigger_get(await self._runner.run("strigger", "--get"))

    def _ours(self, triggers: Iterable[Trigger]) -> list[Trigger]:
        return sorted((t for t in triggers if owned(t, self.owner)), key=lambda t: t.trig_id)

    async def ensure(
        self, program: str, events: Sequence[TriggerEvent] = tuple(TriggerEvent)
    ) -> EnsureResult:
        """Exactly one permanent trigger per event runs ``program``; returns what changed.

        Every other trigger of this owner (a duplicate, a one-shot one, another program path,
        an event not asked for) is cleared; nobody else's is touched.
        """
        ours = self._ours(await self.read())
        added: list[TriggerEvent] = []
        kept: list[Trigger] = []
        for event in events:
            line = program_line(program, event, self.owner)
            same = [t for t in ours if t.event == event.value and t.program == line]
            if same and same[0].permanent:
                kept.append(same[0])
                continue
            await self._runner.run(
                "strigger",
                "--set",
                "--node",
                f"--{event.value}",
                "--flags=PERM",
                f"--program={line}",
            )
            added.append(event)
        cleared = [t.trig_id for t in ours if t not in kept]
        for trig_id in cleared:
            await self._clear(trig_id)
        return EnsureResult(
            added=tuple(added), cleared=tuple(cleared), kept=tuple(t.trig_id for t in kept)
        )

    async def remove(self) -> tuple[int, ...]:
        """Clear every trigger of this owner; returns the ids cleared."""
        ids = [t.trig_id for t in self._ours(await self.read())]
        for trig_id in ids:
            await self._clear(trig_id)
        return tuple(ids)

    async def _clear(self, trig_id: int) -> None:
        await self._runner.run("strigger", "--clear", f"--id={trig_id}")

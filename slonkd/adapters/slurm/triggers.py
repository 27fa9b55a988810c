"""slurmctld event triggers (``strigger``) that nudge slonkd when nodes change.

slurmctld checks its triggers only every 15 s or so, so these are a backstop next to the
cheap periodic reasons read, not the fast path. Triggers are permanent (``--flags=PERM``)
and live in slurmctld's StateSaveLocation: they survive restarts, so registration must be
idempotent. :meth:`Triggers.ensure` keeps exactly one trigger per event for slonkd's
program (adding what is missing, clearing duplicates) and :meth:`Triggers.remove` clears
them on uninstall. The program is run by slurmctld as ``<program> <event> <hostlist>``; it
must reach the coordinator over the network (slurmctld and the coordinator are different
pods). Triggers of anyone else are never touched.
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


def program_line(program: str, event: TriggerEvent) -> str:
    """The ``--program`` value for ``event``: ``<program> <event>``."""
    if not program or any(ch.isspace() for ch in program):
        raise ValueError(f"trigger program must be one path without spaces: {program!r}")
    return f"{program} {event.value}"


class Triggers:
    """Registers, lists and removes slonkd's permanent node triggers."""

    def __init__(self, runner: CommandRunner) -> None:
        self._runner = runner

    async def read(self) -> list[Trigger]:
        """Every trigger slurmctld holds (anyone's)."""
        return parse_strigger_get(await self._runner.run("strigger", "--get"))

    def _ours(self, triggers: Iterable[Trigger], program: str) -> dict[TriggerEvent, list[Trigger]]:
        mine: dict[TriggerEvent, list[Trigger]] = {}
        for event in TriggerEvent:
            line = program_line(program, event)
            mine[event] = sorted(
                (
                    t
                    for t in triggers
                    if t.res_type == "node" and t.event == event.value and t.program == line
                ),
                key=lambda t: t.trig_id,
            )
        return mine

    async def ensure(
        self, program: str, events: Sequence[TriggerEvent] = tuple(TriggerEvent)
    ) -> EnsureResult:
        """Exactly one permanent trigger per event runs ``program``; returns what changed."""
        mine = self._ours(await self.read(), program)
        added: list[TriggerEvent] = []
        cleared: list[int] = []
        kept: list[int] = []
        for event in events:
            existing = mine[event]
            if existing and existing[0].permanent:
                kept.append(existing[0].trig_id)
                extra = existing[1:]
            else:
                await self._runner.run(
                    "strigger",
                    "--set",
                    "--node",
                    f"--{event.value}",
                    "--flags=PERM",
                    f"--program={program_line(program, event)}",
                )
                added.append(event)
                extra = existing
            for dup in extra:
                await self._clear(dup.trig_id)
                cleared.append(dup.trig_id)
        return EnsureResult(added=tuple(added), cleared=tuple(cleared), kept=tuple(kept))

    async def remove(self, program: str) -> tuple[int, ...]:
        """Clear every trigger of slonkd's ``program``; returns the ids cleared."""
        mine = self._ours(await self.read(), program)
        ids = [t.trig_id for found in mine.values() for t in found]
        for trig_id in ids:
            await self._clear(trig_id)
        return tuple(ids)

    async def _clear(self, trig_id: int) -> None:
        await self._runner.run("strigger", "--clear", f"--id={trig_id}")

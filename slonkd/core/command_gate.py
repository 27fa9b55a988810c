"""Which coordinator commands an agent obeys: its own, new, and from the newest leader.

An agent receives commands on its own commands topic (QoS 1, persistent session), so a
command can arrive twice (a redelivery after a reconnect or a broker restart) or late, from
a leader that has since lost the Lease. :class:`CommandGate` admits a command only if

- it names this agent's node (the topic and the payload; the bus already drops a payload
  whose node differs from its topic's, this is the second lock),
- its action is one the agent knows,
- its id has not been seen (the last ``memory`` ids are kept: bounded memory),
- its fencing token is not older than the newest this agent has seen, from commands or from
  the coordinator's retained status.

Pure: no I/O, no clock; the caller logs the returned reason.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Set
from dataclasses import dataclass, field
from enum import StrEnum

from slonkd.core.messages import Command, CoordinatorStatus

RECHECK = "recheck"
"""Run every health check now and republish the status."""
KNOWN_ACTIONS: frozenset[str] = frozenset({RECHECK})


class Refusal(StrEnum):
    """Why a command was not obeyed."""

    OTHER_NODE = "other-node"
    UNKNOWN_ACTION = "unknown-action"
    REPEAT = "repeat"
    STALE_TOKEN = "stale-fencing-token"  # noqa: S105 - a refusal reason, not a secret


@dataclass(slots=True)
class CommandGate:
    """The agent's memory of command ids and of the newest fencing token."""

    node: str
    memory: int = 1024
    actions: Set[str] = KNOWN_ACTIONS
    newest_token: int = 0
    _seen: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        if self.memory < 1:
            raise ValueError("memory must be at least 1")

    def observe(self, status: CoordinatorStatus) -> bool:
        """Learn a leader's token from its status; True if it is newer than any seen."""
        if status.fencing_token > self.newest_token:
            self.newest_token = status.fencing_token
            return True
        return False

    def admit(self, command: Command, *, topic_node: str | None) -> Refusal | None:
        """None if ``command`` is to be obeyed (it is remembered), else why not."""
        if command.node != self.node or topic_node != self.node:
            return Refusal.OTHER_NODE
        if command.id in self._seen:
            return Refusal.REPEAT
        if command.fencing_token < self.newest_token:
            return Refusal.STALE_TOKEN
        if command.action not in self.actions:
            return Refusal.UNKNOWN_ACTION
        self.newest_token = command.fencing_token
        self._seen[command.id] = None
        while len(self._seen) > self.memory:
            self._seen.popitem(last=False)
        return None

    def seen(self, command_id: str) -> bool:
        """Whether ``command_id`` was obeyed (and is still remembered)."""
        return command_id in self._seen

"""The coordinator's persistent state in a ConfigMap, written with optimistic concurrency.

Reads and writes the :class:`~slonkd.core.coordinator_state.CoordinatorState` of one
ConfigMap. An update is a read-modify-write with the resourceVersion as precondition, retried
on conflict; it is fenced: a writer whose token is older than the state's last writer gets a
:class:`FencedError` and nothing is written, so an old leader that wakes up late cannot undo
what the new one recorded. A :class:`FencedError` is a
:class:`~slonkd.adapters.kube.lease.Superseded`: the elector ends the term and campaigns again
above the newer token. The bare reads and writes of the ConfigMap are
:class:`~slonkd.adapters.kube.configmaps.NamedConfigMap`'s.

A state that does not parse (:class:`~slonkd.core.coordinator_state.StateCorrupt`) is never
overwritten by an update: only :meth:`StateStore.discard` replaces it, on an operator's word.
Its last token is still read (:meth:`StateStore.last_token`), so fencing stays monotonic.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from slonkd.adapters.kube.configmaps import NamedConfigMap
from slonkd.adapters.kube.errors import KubeConflict
from slonkd.adapters.kube.lease import Superseded
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.coordinator_state import CoordinatorState, salvage_token
from slonkd.core.errors import TransientError


class FencedError(Superseded):
    """A newer leader has written the state: this writer must stop acting."""


class StateStore:
    """One ConfigMap holding the coordinator's state."""

    def __init__(
        self, transport: KubeTransport, namespace: str, name: str, *, conflict_retries: int = 8
    ) -> None:
        self._cm = NamedConfigMap(transport, namespace, name, conflict_retries=conflict_retries)

    async def load(self) -> CoordinatorState:
        """The stored state (the initial state if none was written yet)."""
        obj = await self._cm.read()
        return CoordinatorState.from_data(obj.get("data") if obj else None)

    async def last_token(self) -> int:
        """The token of the state's last leader write, even from a corrupt state (-1: none)."""
        obj = await self._cm.read()
        return salvage_token(obj.get("data") if obj else None)

    async def discard(self, by: str) -> tuple[dict[str, str], CoordinatorState]:
        """Replace the stored state, readable or not, by the initial state (an operator's word).

        Only the last writer's token is kept. Returns the discarded data and the new state.
        """
        for _attempt in range(self._cm.retries):
            obj = await self._cm.read()
            old = dict((obj.get("data") if obj else None) or {})
            new = CoordinatorState(
                breaker_reason=f"state discarded by {by}", fencing_token=salvage_token(old)
            )
            if obj is None:
                return old, await self._write(functools.partial(_replaced, new), None)
            obj["data"] = new.to_data()
            try:
                await self._cm.replace(obj)
            except KubeConflict:
                continue
            return old, new
        raise self._conflicting()

    async def update(
        self, token: int, change: Callable[[CoordinatorState], CoordinatorState]
    ) -> CoordinatorState:
        """Apply ``change`` to the stored state as the leader holding ``token``."""
        return await self._write(change, token)

    async def operator_update(
        self, change: Callable[[CoordinatorState], CoordinatorState]
    ) -> CoordinatorState:
        """Apply an operator's ``change`` (pause, breaker reset): the leader's token is kept."""
        return await self._write(change, None)

    async def _write(
        self, change: Callable[[CoordinatorState], CoordinatorState], token: int | None
    ) -> CoordinatorState:
        for _attempt in range(self._cm.retries):
            obj = await self._cm.read()
            state = CoordinatorState.from_data(obj.get("data") if obj else None)
            if token is not None and state.fencing_token > token:
                raise FencedError(
                    f"state {self._cm.namespace}/{self._cm.name} was written by a newer leader "
                    f"(token {state.fencing_token} > {token})"
                )
            kept = state.fencing_token if token is None else token
            new = replace(change(state), fencing_token=kept)
            try:
                if obj is None:
                    await self._cm.create(new.to_data())
                else:
                    obj["data"] = new.to_data()
                    await self._cm.replace(obj)
            except KubeConflict:
                continue
            return new
        raise self._conflicting()

    def _conflicting(self) -> TransientError:
        cm = self._cm
        return TransientError(f"state {cm.name}: still conflicting after {cm.retries} tries")


def _replaced(new: CoordinatorState, _old: CoordinatorState) -> CoordinatorState:
    return new

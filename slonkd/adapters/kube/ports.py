"""What the coordinator writes to Kubernetes, as protocols (the kube adapter's ports).

:class:`~slonkd.adapters.kube.nodes.NodeWriter`, :class:`~slonkd.adapters.kube.pods.PodWriter`,
:class:`~slonkd.adapters.kube.events.EventRecorder` and
:class:`~slonkd.adapters.kube.state.StateStore` implement them against the apiserver; a unit
test hands the coordinator (:mod:`slonkd.runtime.coordinating`) recording fakes instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.kube_changes import ChangeResult, ObjectRef
from slonkd.core.kube_objects import TaintEffect


class NodeWrites(Protocol):
    """Marks on a K8s node: cordon, slonkd's taints, the SlurmHealthy condition, annotations."""

    async def cordon(self, name: str, *, cause: str) -> ChangeResult:
        """Cordon the node (recorded as slonkd's)."""
        ...

    async def uncordon(self, name: str) -> ChangeResult:
        """Uncordon it, if slonkd cordoned it."""
        ...

    async def cordon_and_taint(
        self, name: str, *, cause: str, key: str, effect: TaintEffect, value: str = ""
    ) -> tuple[ChangeResult, ChangeResult]:
        """Cordon and taint in one write (each with its own result)."""
        ...

    async def set_taint(
        self, name: str, key: str, effect: TaintEffect, value: str = ""
    ) -> ChangeResult:
        """Make slonkd's taint ``key`` present."""
        ...

    async def remove_taint(
        self, name: str, key: str, effect: TaintEffect | None = None
    ) -> ChangeResult:
        """Remove slonkd's taint ``key``."""
        ...

    async def set_slurm_healthy(
        self, name: str, *, healthy: bool, reason: str, message: str = ""
    ) -> ChangeResult:
        """Set the ``SlurmHealthy`` condition."""
        ...

    async def set_annotations(
        self, name: str, annotations: Mapping[str, str | None]
    ) -> ChangeResult:
        """Set (None: remove) slonkd's annotations."""
        ...


class PodWrites(Protocol):
    """Evictions of worker pods."""

    async def evict(
        self, namespace: str, name: str, *, uid: str = "", grace_s: int | None = None
    ) -> ChangeResult:
        """Evict the pod through the Eviction API (REFUSED while a PDB forbids it)."""
        ...


class EventWrites(Protocol):
    """Kubernetes Events about an object."""

    async def record(
        self, target: ObjectRef, *, type_: str, reason: str, message: str
    ) -> ChangeResult:
        """Record one Event (Normal or Warning)."""
        ...


class StateStorage(Protocol):
    """The coordinator's state ConfigMap: breaker, pause, remediation history."""

    async def load(self) -> CoordinatorState:
        """The stored state (StateCorrupt when unreadable)."""
        ...

    async def update(
        self, token: int, change: Callable[[CoordinatorState], CoordinatorState]
    ) -> CoordinatorState:
        """Apply ``change`` as the leader holding ``token`` (FencedError past a newer one)."""
        ...

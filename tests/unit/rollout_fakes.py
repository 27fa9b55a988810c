"""Fakes of the rollout's inputs for unit tests: workers of StatefulSet ``w`` and their SLURM nodes.

:data:`STS` (an OnDelete StatefulSet mid-rollout, ``w-old`` to ``w-new``), :func:`pod`,
:func:`node`, :func:`view` (a :class:`~slonkd.core.rollout_phase.WorkerView`) and
:func:`fleet` (``n`` outdated, Ready, idle workers); :data:`DRAINED` (the rollout's reason)
and :data:`ROOMY` (a budget with room). One shared module beside
:mod:`tests.unit.coordinator_fakes` (the coordinator's parts and the views decide() is given;
its names ``pod`` and ``view`` mean other things there), used by ``test_rollout``,
``test_rollout_pause`` and ``test_budget_gate``; no test lives here.
"""

from __future__ import annotations

import json

from slonkd.core.budget import BudgetPolicy
from slonkd.core.kube_objects import KubeNodeName, Pod, PodName, PodPhase
from slonkd.core.rollout_phase import REVISION_LABEL, StatefulSetRevision, WorkerView
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode

STS = StatefulSetRevision(
    name="w",
    namespace="slonk",
    update_revision="w-new",
    current_revision="w-old",
    replicas=4,
    on_delete=True,
    selector={"slonk.dev/pool": "w"},
)


def pod(
    name: str, revision: str = "w-old", *, ready: bool = True, terminating: bool = False
) -> Pod:
    """Worker pod ``name`` of StatefulSet w made from ``revision``."""
    return Pod(
        name=PodName(name),
        namespace="slonk",
        uid=f"uid-{name}-{revision}",
        resource_version="1",
        node_name=KubeNodeName("kn-0"),
        phase=PodPhase.RUNNING,
        ready=ready,
        deletion_timestamp="2026-11-30T00:00:00Z" if terminating else None,
        labels={"slonk.dev/pool": "w", REVISION_LABEL: revision},
    )


def node(
    name: str, state: str = "IDLE", reason: str = "", causes: tuple[str, ...] = ()
) -> SlurmNode:
    """SLURM node ``name``."""
    base, *flags = state.split("+")
    extra = json.dumps({"slonkd": list(causes)}) if causes else ""
    return SlurmNode(
        name=NodeName(name), state=NodeState.from_tokens(base, flags), reason=reason, extra=extra
    )


def view(name: str, p: Pod | None, s: SlurmNode | None) -> WorkerView:
    """A worker of StatefulSet w."""
    return WorkerView(node=name, pod=p, statefulset=STS, slurm=s)


def fleet(n: int = 4) -> list[WorkerView]:
    """``n`` outdated, Ready, idle workers."""
    return [view(f"w-{i}", pod(f"w-{i}"), node(f"w-{i}")) for i in range(n)]


DRAINED = "slonkd:rollout replacing pod"
ROOMY = BudgetPolicy(max_out_percent=100.0)
"""A budget with room for every worker of a small fleet."""

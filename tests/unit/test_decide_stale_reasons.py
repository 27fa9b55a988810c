"""decide() on SLURM 24.11's leftover reasons: a reason that holds nothing is nobody's.

SLURM 24.11 keeps a node's reason text after ``resume``/``undrain`` (22.05 clears it). Such a
leftover must neither stop slonkd from draining, nor count as slonkd's own cause, nor count as
a SLURM-reported failure (issue 15 item 1).
"""

from __future__ import annotations

from datetime import datetime

from slonkd.core.decide import decide
from slonkd.core.plan import Writer
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from tests.unit.coordinator_fakes import NOW, POLICY, kinds, knode, pod, view


def leftover(reason: str, *, state: str = "IDLE", at: float = NOW - 60) -> SlurmNode:
    """A node w-0 in ``state`` that still carries ``reason`` (set at ``at``) after a resume."""
    base, *flags = state.split("+")
    return SlurmNode(
        name=NodeName("w-0"),
        state=NodeState.from_tokens(base, flags),
        reason=reason,
        reason_user="root",
        reason_time=datetime.fromtimestamp(at),
    )


def test_leftover_operator_reason_does_not_stop_the_pod_terminating_drain() -> None:
    """An IDLE node with an operator's old reason text: its terminating pod still drains it."""
    plan = decide(view(slurm=leftover("maintenance by alice"), pod=pod(terminating=True)), POLICY)
    assert kinds(plan, Writer.AGENT) == [("drain", "pod-terminating")]


def test_leftover_slonkd_reason_does_not_count_as_held() -> None:
    """A leftover ``slonkd:k8s-cordoned`` text on an IDLE node: the next cordon drains again."""
    plan = decide(
        view(slurm=leftover("slonkd:k8s-cordoned by slonkd"), kube_node=knode(cordoned=True)),
        POLICY,
    )
    assert ("drain", "k8s-cordoned") in kinds(plan, Writer.COORDINATOR)


def test_leftover_slurm_failure_text_is_not_a_failure() -> None:
    """After an operator's resume, SLURM's old failure text marks and evicts nothing."""
    plan = decide(view(slurm=leftover("Not responding")), POLICY)
    assert plan.failure is None
    assert plan.actions == ()


def test_live_slurm_failure_still_counts() -> None:
    """The same reason on a node that is DOWN is a SLURM-reported failure (the fix keeps it)."""
    plan = decide(view(slurm=leftover("Not responding", state="DOWN")), POLICY)
    assert plan.failure is not None
    assert plan.failure.name == "slurm-failure"

"""The pyslurm backend's compare-and-set rule for an empty ``extra`` (pyslurm_writes.py).

pyslurm sends an empty text as "unchanged": a release that drops slonkd's last cause would
leave the old causes in ``extra``. The planners are wrapped to write ``{}`` instead, in the
first plan and in a later chunk's recheck alike (else the recheck would see another group
and skip the node as changed). The whole backend runs against real SLURM in
tests/contract/test_pyslurm_writes.py.
"""

from __future__ import annotations

from slonkd.adapters.slurm.pyslurm_writes import EMPTY_EXTRA, with_empty_extra
from slonkd.core.reasons import Cause, decode_causes, encode_causes, format_reason
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.core.slurm_plan import HoldState, ReleaseState, Update, plan_hold, plan_release

POD = Cause.parse("pod-terminating")
HEALTH = Cause.parse("health:gpu-xid-79")


def _held(*causes: Cause) -> SlurmNode:
    return SlurmNode(
        name=NodeName("n1"),
        state=NodeState.from_tokens("IDLE", ["DRAIN"]),
        reason=format_reason(causes[0], ""),
        extra=encode_causes("", frozenset(causes)),
    )


def test_a_release_that_clears_extra_writes_braces_and_plans_alike_twice() -> None:
    """Two causes, one released: scontrol would send extra=""; pyslurm sends {}."""
    node = _held(POD, HEALTH)

    def release(n: SlurmNode) -> Update:
        got = plan_release(n, ReleaseState.RESUME, HEALTH)
        assert isinstance(got, Update)
        return got

    plain = release(node)
    assert plain.extra == ""  # what the scontrol backend sends: it clears
    planner = with_empty_extra(release)
    first, again = planner(node), planner(node)
    assert isinstance(first, Update)
    assert isinstance(again, Update)
    assert first.extra == EMPTY_EXTRA
    assert first.group_key == again.group_key  # a later chunk's recheck keeps the node
    assert decode_causes(EMPTY_EXTRA) == frozenset()


def test_other_plans_pass_unchanged() -> None:
    """A hold's extra (slonkd's causes) and a skip are the planner's own."""
    node = SlurmNode(name=NodeName("n1"), state=NodeState.from_tokens("IDLE", []))

    def hold(n: SlurmNode) -> Update:
        got = plan_hold(n, HoldState.DRAIN, POD, "bye")
        assert isinstance(got, Update)
        return got

    assert with_empty_extra(hold)(node) == hold(node)

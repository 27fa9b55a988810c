"""The rollout takes the coordinator's just-read node table instead of reading its own (fakes).

A new term's first pass reads SLURM's whole table as the rollout starts; the rollout's own
read of the same table took one more of that second's reads (``max_reads_per_s``), and the
change poll's read of a failure waited for it (issue 21). The e2e rollout tests
(``tests/e2e/test_rollout.py``) drive the controller against real services.
"""

from __future__ import annotations

from typing import Any

from slonkd.core.budget import POOL_LABEL, BudgetPolicy
from slonkd.core.kube_objects import KubeNodeName, Pod, PodName, PodPhase
from slonkd.core.rollout import RolloutSettings, plan_rollout
from slonkd.core.rollout_phase import REVISION_LABEL, StatefulSetRevision
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.runtime.coordinating.admitting import Gate
from slonkd.runtime.coordinating.node_table import NodeTable
from slonkd.runtime.coordinating.rolling import RolloutController
from slonkd.runtime.coordinating.slurm_watch import ReadLimiter
from slonkd.runtime.kit.metrics import Metrics

IDLE = NodeState.from_tokens("IDLE", [])
NODE = SlurmNode(name=NodeName("n1"), state=IDLE)


class _Table(NodeTable):
    """The coordinator's node table: ``kept`` (or none), each ask recorded."""

    def __init__(self, kept: list[SlurmNode] | None) -> None:
        super().__init__()
        self.kept = kept
        self.asked: list[float] = []

    def recent(self, max_age_s: float) -> list[SlurmNode] | None:
        self.asked.append(max_age_s)
        return self.kept


class _Slurm:
    """A SLURM port that counts its own reads, beside a table that may hold one."""

    def __init__(self, kept: list[SlurmNode] | None) -> None:
        self.table = _Table(kept)
        self.reads = 0

    @property
    def asked(self) -> list[float]:
        return self.table.asked

    async def read_nodes(self) -> list[SlurmNode]:
        self.reads += 1
        return [NODE]


class _Any:
    """Whatever the controller's constructor only stores or registers with."""

    dry_run = False

    def add_handler(self, handler: Any) -> None:
        pass

    def check_valid(self) -> None:
        pass


def _controller(slurm: _Slurm, reads: ReadLimiter, table_age_s: float) -> RolloutController:
    anything: Any = _Any()
    return RolloutController(
        RolloutSettings(), namespace="ns", transport=anything, pods=anything,
        slurm=slurm,  # type: ignore[arg-type]
        elector=anything, gate=Gate(BudgetPolicy(), block_label="", memory=anything,
                                    auditor=anything),
        reads=reads, auditor=anything,
        metrics=Metrics("coordinator"), table=slurm.table, table_age_s=table_age_s,
    )  # fmt: skip


async def test_the_rollout_takes_the_table_the_coordinator_just_read_at_the_terms_start() -> None:
    """A kept table serves the rollout's first look: no read of its own, no turn of the limit.

    Only the first: later looks follow a pod's change (an eviction, a replacement's agent
    resuming its node) that a table read before it does not show (the e2e
    ``test_a_new_leader_carries_on_a_rollout_from_slurms_state`` replaced each worker twice).
    """
    slurm, reads = _Slurm([NODE]), ReadLimiter(2.0)
    controller = _controller(slurm, reads, 0.7)
    assert await controller.read.table() == [NODE]
    assert slurm.asked == [0.7]
    assert (slurm.reads, reads.reads) == (0, 0)
    controller.read.slurm_read = True  # what a look does once it has its table
    assert await controller.read.table() == [NODE]
    assert (slurm.reads, reads.reads) == (1, 1)


async def test_without_a_kept_table_the_rollout_reads_within_the_limit() -> None:
    """No table (a write of slonkd's dropped it, or none was read): its own read, a turn."""
    for slurm, age in ((_Slurm(None), 0.7), (_Slurm([NODE]), 0.0)):
        reads = ReadLimiter(2.0)
        assert await _controller(slurm, reads, age).read.table() == [NODE]
        assert (slurm.reads, reads.reads) == (1, 1)


class _Items:
    """An informer's cache, as ``RolloutRead.views`` reads it."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects

    def items(self) -> dict[str, Any]:
        return self.objects


def _pod(i: int) -> Pod:
    return Pod(
        name=PodName(f"w-{i}"), namespace="ns", uid=f"uid-{i}", resource_version="1",
        node_name=KubeNodeName(f"kn-{i}"), phase=PodPhase.RUNNING, ready=True,
        labels={POOL_LABEL: "w", REVISION_LABEL: "w-old"},
    )  # fmt: skip


def test_a_worker_whose_pod_is_gone_is_in_the_rollouts_views_in_its_pool() -> None:
    """w-3 drained for health, its pod gone: its StatefulSet wants it, it counts in pool w.

    The old views held a pod-less node only when the rollout held it, so a pool with its
    room taken by w-3 let the rollout start w-0 (limit 1, two out).
    """
    sts = StatefulSetRevision(
        name="w", namespace="ns", update_revision="w-new", current_revision="w-old",
        replicas=4, on_delete=True, selector={POOL_LABEL: "w"},
    )  # fmt: skip
    pods = {f"uid-{i}": _pod(i) for i in range(3)}
    ctl = _controller(_Slurm(None), ReadLimiter(100.0), table_age_s=1.0)
    ctl.read.pods = _Items(pods)  # type: ignore[assignment]
    ctl.read.statefulsets = _Items({"w": sts})  # type: ignore[assignment]
    slurm = {f"w-{i}": SlurmNode(name=NodeName(f"w-{i}"), state=IDLE) for i in range(4)}
    slurm["w-3"] = SlurmNode(
        name=NodeName("w-3"), state=NodeState.from_tokens("IDLE", ["DRAIN"]),
        reason="slonkd:health:mount-missing by slonkd agent",
    )  # fmt: skip
    views = ctl.read.views(slurm, ())
    assert [(v.node, v.pool, v.statefulset is not None) for v in views] == [
        ("w-0", "w", True), ("w-1", "w", True), ("w-2", "w", True), ("w-3", "w", True),
    ]  # fmt: skip
    plan = plan_rollout(views, RolloutSettings(), policy=BudgetPolicy(max_out=1))
    assert plan.start == ()

"""One budget for every task: the pass, the fast path and the rollout admit through one gate.

Issue 37 item 3. Each of the three admitted against its own read: the rollout on the table it
had just read, a pass on the table it read before it awaited the state ConfigMap, the fast
path on the last pass's table with the poll's failures patched in; and all three on the K8s
node cache, which shows a cordon only once its watch event arrives. A pool with room for one
node lost two: the rollout started w-0 while a pass on an older read admitted w-5. Now a
node a task is admitted for is reserved in one ledger (:mod:`slonkd.core.reservations`,
kept by :class:`~slonkd.runtime.coordinating.admitting.Gate`) until what the task did shows
in the reads, and every task counts the others' reservations as out.

A real :class:`~slonkd.runtime.coordinating.Coordinator` with its rollout runs over the fakes
of ``test_coordinator_pass``; the interleavings are made by hand at the awaits where they
happen in a leader (the pass's state read, the rollout's own task between two passes).
Neighbours: ``test_coordinator_pass.py`` (one pass), ``test_rollout.py`` (the rollout's
plans), ``test_reservations.py`` (the ledger's rules).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import cast

from slonkd.adapters.slurm.results import UpdateResult
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.kube_changes import ChangeResult
from slonkd.core.plan import Policy
from slonkd.core.reasons import Cause
from slonkd.core.rollout import RolloutSettings
from slonkd.core.rollout_phase import REVISION_LABEL
from slonkd.core.slurm_node import NodeFlag, NodeName, NodeState, SlurmNode
from slonkd.runtime.coordinating import Coordinator, CoordinatorSettings
from tests.unit.coordinator_fakes import (
    FakeNodeWriter,
    FakeSlurm,
    FakeStore,
    kube_node,
    leader_on,
    saw,
)
from tests.unit.pods import running_pod
from tests.unit.rollout_fakes import STS

WORKERS = 6
"""Pool ``w`` of six workers, limit one: ``max_out`` 1 (the percentage allows all)."""
FAILED = "Kill task failed"


def _slurm(i: int, state: str = "IDLE", reason: str = "") -> SlurmNode:
    base, *flags = state.split("+")
    return SlurmNode(
        name=NodeName(f"w-{i}"), state=NodeState.from_tokens(base, flags), reason=reason
    )


class _Slurm(FakeSlurm):
    """SLURM whose drains show in the next read, as slurmctld's do."""

    async def drain(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Drain: recorded, and the nodes' state and reason changed."""
        result = await super().drain(names, cause, text)
        self.nodes = [
            replace(
                n,
                state=replace(n.state, flags=n.state.flags | {NodeFlag.DRAIN}),
                reason=f"slonkd:{cause} {text}".strip(),
            )
            if n.name in names
            else n
            for n in self.nodes
        ]
        return result


class _Store(FakeStore):
    """The state ConfigMap; ``meanwhile``, when set, runs while a pass reads it (once)."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: Callable[[], Awaitable[object]] | None = None

    async def load(self) -> CoordinatorState:
        """The state, after whatever ran meanwhile."""
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            await meanwhile()
        return await super().load()


class _LaggingWriter(FakeNodeWriter):
    """K8s node writes that the informer cache does not show yet (the watch event is late)."""

    async def cordon(self, name: str, *, cause: str) -> ChangeResult:
        """Cordon; the cache keeps the node as it was."""
        node = self.cache[name]
        result = await super().cordon(name, cause=cause)
        self.cache[name] = node
        return result


def _leader(writer: FakeNodeWriter | None = None) -> tuple[Coordinator, _Slurm, FakeNodeWriter]:
    """A leader over pool ``w`` (limit 1) whose six workers all run the old revision."""
    settings = CoordinatorSettings(
        namespace="slonk", identity="c-0", poll_s=0, max_out=1, max_out_percent=100,
        mass_percent=100, policy=Policy(remediate=False), rollout=RolloutSettings(),
    )  # fmt: skip
    slurm, writer = _Slurm([_slurm(i) for i in range(WORKERS)], failing=set()), writer
    writer = writer or FakeNodeWriter()
    c = leader_on(settings, slurm, writer, store=_Store())
    assert c.rollout is not None
    labels = {"slonk.dev/pool": "w", REVISION_LABEL: "w-old"}
    c.pods._cache = {
        f"slonk/w-{i}": replace(
            running_pod(f"w-{i}", uid=f"u{i}", on=f"kn-{i}", ready_since="2026-01-01T00:00:00Z"),
            labels=labels,
        )
        for i in range(WORKERS)
    }
    c.nodes._cache = {f"kn-{i}": kube_node(i) for i in range(WORKERS)}
    writer.cache = c.nodes._cache
    c.rollout.statefulsets._cache = {"slonk/w": replace(STS, replicas=WORKERS)}
    return c, slurm, writer


def _out(slurm: _Slurm, writer: FakeNodeWriter) -> list[str]:
    """The workers out of service now: drained in SLURM, or their K8s node cordoned/tainted."""
    drained = {str(n.name) for n in slurm.nodes if NodeFlag.DRAIN in n.state.flags}
    marked = {
        f"w-{name.removeprefix('kn-')}"
        for what, name in writer.calls
        if what == "cordon" or what.startswith("taint ")
    }
    return sorted(drained | marked)


def _fail(slurm: _Slurm, i: int) -> SlurmNode:
    failed = _slurm(i, "IDLE+FAIL", FAILED)
    slurm.nodes = [failed if n.name == failed.name else n for n in slurm.nodes]
    return failed


async def test_a_rollout_start_during_a_pass_on_an_older_read_leaves_room_for_one_node() -> None:
    """The rollout drains w-0 while a pass awaits its state read; the pass planned on the old table.

    The pass read SLURM (w-0 in service, w-5 failed), then awaited the state ConfigMap; the
    rollout's task ran meanwhile, read its own table, saw the pool's one slot free and
    drained w-0. The pass then weighed w-5 on its older table: one slot free, cordoned kn-5.
    """
    c, slurm, writer = _leader()
    assert c.rollout is not None
    await c.reconcile_all()  # the term's first pass: the state is known, nothing to do
    assert _out(slurm, writer) == []
    _fail(slurm, 5)
    store = cast(_Store, c.memory.store)
    store.meanwhile = c.rollout.reconcile  # the rollout's task between the read and the plan
    await c.reconcile_all()
    assert slurm.drained[0] == ("rollout", ["w-0"])  # the rollout went first
    out = _out(slurm, writer)
    assert len(out) <= 1, f"{len(out)} nodes of pool w out against a limit of 1: {out}"


async def test_the_fast_path_on_the_last_pass_read_counts_the_rollouts_node() -> None:
    """Between passes: the rollout drains w-0, then the poll sees w-5 fail.

    The fast path patches the poll's failure into the last pass's table, from before the
    rollout's drain: on the old code w-0 was in service there, and kn-5 was cordoned too.
    """
    c, slurm, writer = _leader()
    assert c.rollout is not None
    await c.reconcile_all()
    await c.rollout.reconcile()
    assert slurm.drained == [("rollout", ["w-0"])]
    saw(c, [_fail(slurm, 5)])
    await c.fast_path.mark()
    out = _out(slurm, writer)
    assert len(out) <= 1, f"{len(out)} nodes of pool w out against a limit of 1: {out}"


async def test_the_rollout_counts_a_cordon_its_cache_does_not_show_yet() -> None:
    """The fast path cordons kn-5; before the watch shows it, the rollout looks for room.

    On the old code the rollout weighed the K8s node cache as it stood (kn-5 schedulable, w-5
    not drained): one slot free, and it drained w-0 beside the cordon.
    """
    c, slurm, writer = _leader(_LaggingWriter())
    assert c.rollout is not None
    await c.reconcile_all()
    saw(c, [_fail(slurm, 5)])
    await c.fast_path.mark()
    assert ("cordon", "kn-5") in writer.calls
    assert not c.nodes._cache["kn-5"].unschedulable  # the watch has not shown it yet
    await c.rollout.reconcile()
    out = _out(slurm, writer)
    assert len(out) <= 1, f"{len(out)} nodes of pool w out against a limit of 1: {out}"

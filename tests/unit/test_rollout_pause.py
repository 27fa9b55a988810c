"""A paused, corrupt or not yet read state stops every write of a rollout, one in progress too.

Issue 37 item 8. The rollout (:mod:`slonkd.runtime.coordinating.rolling`, one worker's
replacement in :mod:`~slonkd.runtime.coordinating.replacing`) took a pause or an open breaker
as "no new node": a worker already drained for the rollout went on to its requeue and its
eviction while slonkd was paused, or while its state ConfigMap was corrupt. Nor did it wait
for the state at all: until a pass or the term's claim read it, the state was the default
(not paused), and a corrupt state made the claim return without reading it.

Now a pause (an operator's, or a corrupt state's) stops every write of the rollout: no drain,
no requeue, no eviction, no release, checked on the plan and again right before each write;
the rollout does nothing until the term has read its state; it carries on once unpaused. An
open breaker still stops only new drains. A real :class:`~slonkd.runtime.coordinating.Coordinator`
runs over the fakes of ``test_coordinator_pass``; its rollout's caches are filled by hand.
Neighbours: ``test_rollout.py`` (the plans), ``test_rollout_replacing.py`` (one replacement).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from slonkd.adapters.slurm.results import RequeueResult
from slonkd.core.coordinator_state import CoordinatorState, StateCorrupt
from slonkd.core.errors import TransientError
from slonkd.core.rollout import RolloutSettings, plan_rollout
from slonkd.core.rollout_phase import Phase
from slonkd.core.slurm_job import JobId, SlurmJob
from slonkd.core.slurm_node import NodeName
from slonkd.runtime.coordinating import Coordinator, CoordinatorSettings
from tests.unit.coordinator_fakes import (
    TOKEN,
    FakePodWriter,
    FakeSlurm,
    FakeStore,
    leader_on,
)
from tests.unit.rollout_fakes import DRAINED, ROOMY, STS, fleet, node, pod, view

NAME = "w-0"


class _Slurm(FakeSlurm):
    """w-0 drained for the rollout with one requeueable job; requeues recorded.

    ``meanwhile``, when set, runs while the job read is in flight (a pass that ran then).
    """

    def __init__(self) -> None:
        super().__init__([node(NAME, "MIXED+DRAIN", DRAINED)], failing=set())
        self.requeued: list[str] = []
        self.meanwhile: Callable[[], Any] | None = None

    async def jobs_on(self, name: str) -> list[SlurmJob]:
        """One running, requeueable batch job."""
        if self.meanwhile is not None:
            await self.meanwhile()
        job = SlurmJob(
            job_id=JobId(11), states=("RUNNING",), nodes=(NodeName(name),), batch=True, requeue=True
        )
        return [job]

    async def requeue_jobs(self, name: str, *, all_or_none: bool = False) -> RequeueResult:
        """Requeue (recorded)."""
        self.requeued.append(name)
        return RequeueResult(requeued=(JobId(11),))


class _Store(FakeStore):
    """The state ConfigMap; ``corrupt`` or ``down`` make every read and write fail so."""

    def __init__(self, state: CoordinatorState | None = None) -> None:
        super().__init__()
        self.state = state or CoordinatorState()
        self.corrupt = False
        self.down = False

    def _check(self) -> None:
        if self.corrupt:
            raise StateCorrupt("state: pausedAt is not a number")
        if self.down:
            raise TransientError("apiserver unreachable")

    async def load(self) -> CoordinatorState:
        """The state, or the failure."""
        self._check()
        return await super().load()

    async def update(
        self, token: int, change: Callable[[CoordinatorState], CoordinatorState]
    ) -> CoordinatorState:
        """Apply ``change``, or the failure."""
        self._check()
        return await super().update(token, change)


PAUSED = CoordinatorState(paused=True, paused_by="alice", paused_reason="network maintenance")


def _coordinator(tmp_path: Path, store: _Store) -> tuple[Coordinator, _Slurm, FakePodWriter]:
    """A leader whose rollout finds w-0 drained for it, its pod outdated, its job waited for."""
    settings = CoordinatorSettings(
        namespace="slonk", identity="c-0", poll_s=0, max_out_percent=100,
        rollout=RolloutSettings(job_wait_s=0.0),
    )  # fmt: skip
    slurm, pods = _Slurm(), FakePodWriter()
    c = leader_on(settings, slurm, store=store)
    assert c.rollout is not None
    worker = pod(NAME)  # revision w-old; the StatefulSet's update revision is w-new
    c.pods._cache = {f"slonk/{NAME}": worker}
    c.rollout.statefulsets._cache = {"slonk/w": STS}
    c.rollout.replacer.pods = pods
    return c, slurm, pods


async def _paused(tmp_path: Path) -> tuple[_Store, Coordinator, _Slurm, FakePodWriter]:
    """A coordinator whose term has claimed a state that says paused."""
    store = _Store(PAUSED)
    c, slurm, pods = _coordinator(tmp_path, store)
    await c.memory.claim(TOKEN)
    return store, c, slurm, pods


def _writes(c: Coordinator, slurm: _Slurm, pods: FakePodWriter) -> list[str]:
    return [
        *(f"requeue {n}" for n in slurm.requeued),
        *(f"evict {n}" for n in pods.evicted),
        *(f"drain {n}" for _, names in slurm.drained for n in names),
        *(f"resume {n}" for _, names in slurm.resumed for n in names),
    ]


async def test_a_pause_stops_a_rollout_in_progress_and_unpausing_resumes_it(
    tmp_path: Path,
) -> None:
    """Paused (read by the claim): w-0's job stays, its pod too; unpaused: requeued, evicted."""
    store, c, slurm, pods = await _paused(tmp_path)
    assert c.rollout is not None
    await c.rollout.reconcile()
    assert _writes(c, slurm, pods) == [], "a paused coordinator requeued or evicted"
    assert "network maintenance" in json.dumps(c.rollout.status())
    store.state = replace(store.state, paused=False)
    await c.memory.load()  # what the next pass reads
    await c.rollout.reconcile()
    assert _writes(c, slurm, pods) == [f"requeue {NAME}", f"evict {NAME}"]


async def test_a_pause_that_lands_during_the_step_stops_its_writes(tmp_path: Path) -> None:
    """A pass reads the pause while the rollout waits for the node's jobs: nothing is written."""
    store = _Store()
    c, slurm, pods = _coordinator(tmp_path, store)
    await c.memory.claim(TOKEN)

    async def paused_meanwhile() -> None:
        store.state = PAUSED
        await c.memory.load()

    slurm.meanwhile = paused_meanwhile
    assert c.rollout is not None
    await c.rollout.reconcile()
    assert _writes(c, slurm, pods) == [], "the pause that came during the step was not heeded"


async def test_a_corrupt_state_stops_the_rollout_from_the_claim_on(tmp_path: Path) -> None:
    """The claim meets a corrupt state: the rollout writes nothing, before any pass ran."""
    store = _Store()
    store.corrupt = True
    c, slurm, pods = _coordinator(tmp_path, store)
    await c.memory.claim(TOKEN)
    assert c.state.paused, "a corrupt state seen by the claim does not pause"
    assert c.rollout is not None
    await c.rollout.reconcile()
    assert _writes(c, slurm, pods) == [], "a corrupt state requeued or evicted"
    store.corrupt = False  # `slonkd state reset`
    await c.memory.load()
    await c.rollout.reconcile()
    assert _writes(c, slurm, pods) == [f"requeue {NAME}", f"evict {NAME}"]


async def test_nothing_is_written_before_the_term_has_read_its_state(tmp_path: Path) -> None:
    """The claim could not reach the state: the rollout waits for a pass's read of it."""
    store = _Store(PAUSED)
    store.down = True
    c, slurm, pods = _coordinator(tmp_path, store)
    await c.memory.claim(TOKEN)
    assert c.rollout is not None
    await c.rollout.reconcile()
    assert _writes(c, slurm, pods) == [], "the rollout acted on a state it never read"
    store.down = False
    await c.memory.load()  # paused, as the ConfigMap says
    await c.rollout.reconcile()
    assert _writes(c, slurm, pods) == []
    store.state = replace(store.state, paused=False)
    await c.memory.load()
    await c.rollout.reconcile()
    assert _writes(c, slurm, pods) == [f"requeue {NAME}", f"evict {NAME}"]


def test_a_pause_plans_no_write_in_any_phase_and_the_breaker_only_stops_starts() -> None:
    """Paused: no start, no wait-and-evict, no release; breaker open: only no start."""
    views = fleet()
    views[0] = view("w-0", pod("w-0", "w-new"), node("w-0", "DOWN+DRAIN", DRAINED))  # done
    views[1] = view("w-1", pod("w-1"), node("w-1", "MIXED+DRAIN", DRAINED))  # draining
    settings = RolloutSettings(max_parallel=3)
    plan = plan_rollout(views, settings, policy=ROOMY, paused="slonkd is paused: maint")
    assert (plan.start, plan.draining, plan.release) == ((), (), ())
    assert plan.phases["w-1"] is Phase.DRAINING  # where it stands is still shown
    assert plan.waiting["w-2"] == "slonkd is paused: maint"
    assert plan.paused == "slonkd is paused: maint"
    plan = plan_rollout(views, settings, policy=ROOMY, hold="breaker open: mass event")
    assert (plan.start, plan.draining, plan.release) == ((), ("w-1",), ("w-0",))


async def test_a_pass_that_reads_an_unpause_or_a_reset_makes_the_rollout_look_again(
    tmp_path: Path,
) -> None:
    """A paused rollout waits for a change; the pass that reads the unpause pokes it at once."""
    store, c, _slurm, _pods = await _paused(tmp_path)
    assert c.rollout is not None
    dirty = c.rollout._dirty
    await c.reconcile_all()
    assert not dirty.is_set()  # still paused: nothing to look at again
    store.state = replace(store.state, paused=False, breaker_open=True, breaker_reason="mass")
    await c.reconcile_all()
    assert dirty.is_set(), "the unpause did not wake the rollout"
    dirty.clear()
    store.state = replace(store.state, breaker_open=False)
    await c.reconcile_all()
    assert dirty.is_set(), "the breaker's reset did not wake the rollout"

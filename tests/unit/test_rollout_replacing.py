"""A rollout requeues nothing it cannot finish: all the node's jobs, or none (fake SLURM).

Issue 37 item 5. Once ``job_wait_s`` is over, the replacer of one worker
(:class:`~slonkd.runtime.coordinating.replacing.Replacer`) judges every job on the node: if
any cannot be requeued (``--no-requeue``, or a state such as STOPPED), it requeues none of
the others, says why (log and audit, with the job ids) and leaves the node drained until
those jobs end; then it requeues the rest and evicts the pod. Requeueing the others at once
would send them back to the queue, unsignalled, for a node that may stay blocked for days.

The real SLURM backend runs here on a fake runner: ``squeue --json`` answers the recorded
22.05 output (``tests/data/slurm/22.05/squeue.json``) rewritten to this test's jobs, every
other call is recorded. The rollout against real services: ``tests/e2e/test_rollout.py``;
the job states: ``test_slurm_job_states.py``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.rollout import RolloutSettings
from slonkd.core.rollout_phase import WorkerView
from slonkd.runtime.coordinating.audit_log import AuditLog
from slonkd.runtime.coordinating.auditing import Auditor
from slonkd.runtime.coordinating.replacing import Replacer
from slonkd.runtime.kit.metrics import Metrics
from tests.unit.coordinator_fakes import FakePodWriter
from tests.unit.pods import running_pod
from tests.unit.recorded import recorded

NODE = "w-0"
TOKEN = 7


class _Slurm:
    """The SLURM side: the node's jobs (id -> (state, requeue flag)), writes recorded.

    ``then``, when set, is what every ``squeue`` after the next one answers (a job that
    changed between two reads).
    """

    def __init__(self, jobs: dict[int, tuple[str, bool]]) -> None:
        self.jobs = dict(jobs)
        self.then: dict[int, tuple[str, bool]] | None = None
        self.writes: list[tuple[str, ...]] = []
        self.reads = 0

    def _squeue(self, jobs: dict[int, tuple[str, bool]]) -> str:
        data: dict[str, Any] = json.loads(recorded("22.05", "squeue.json"))
        template = next(j for j in data["jobs"] if j["job_id"] == 1)
        data["jobs"] = [
            {
                **copy.deepcopy(template),
                "job_id": job_id,
                "job_state": state,
                "requeue": requeue,
                "nodes": NODE,
            }
            for job_id, (state, requeue) in jobs.items()
        ]
        return json.dumps(data)

    async def run(self, tool: str, *args: str, retry: bool = True) -> str:
        if (tool, *args) == ("squeue", "--json", "-w", NODE):
            self.reads += 1
            if self.reads > 1 and self.then is not None:
                self.jobs = self.then
            return self._squeue(self.jobs)
        self.writes.append((tool, *args))
        return ""

    async def write(self, tool: str, *args: str, retry: bool = True) -> str:
        """A write: answered as :meth:`run` answers it."""
        return await self.run(tool, *args, retry=retry)


async def _no_wait() -> None:
    return None


def _replacer(slurm: _Slurm, pods: FakePodWriter, audit: Path, **settings: Any) -> Replacer:
    backend = ScontrolBackend()
    backend.runner = slurm  # type: ignore[assignment]
    return Replacer(
        settings=RolloutSettings(job_wait_s=0.0, **settings),
        slurm=backend,
        pods=pods,
        auditor=Auditor(AuditLog(audit, identity="c-0"), dry_run=False),
        metrics=Metrics("coordinator"),
        check_valid=lambda: TOKEN,
        read_turn=_no_wait,
    )


VIEW = WorkerView(
    node=NODE, pod=running_pod(NODE, uid="u0", on="kn-0"), statefulset=None, slurm=None
)


def _audit(replacer: Replacer, path: Path) -> list[dict[str, Any]]:
    """The audit records written so far (the writer thread drained first)."""
    assert replacer.auditor.log.flush(timeout_s=5)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(
    "stuck",
    [("RUNNING", False), ("STOPPED", True)],
    ids=["no-requeue", "stopped"],
)
async def test_one_job_that_cannot_be_requeued_holds_back_the_others(
    tmp_path: Path, stuck: tuple[str, bool]
) -> None:
    """Nothing requeued, no eviction, why logged and audited once; once it ends, the rest."""
    slurm, pods, audit = _Slurm({11: ("RUNNING", True), 12: stuck}), FakePodWriter(), tmp_path / "a"
    replacer = _replacer(slurm, pods, audit)
    await replacer.step(VIEW, "draining")
    await replacer.step(VIEW, "draining")
    assert slurm.writes == []  # no `scontrol requeue 11`
    assert pods.evicted == []
    assert "[12]" in replacer.blocked[NODE]
    blocked = [r for r in _audit(replacer, audit) if r["action"] == "requeue"]
    assert len(blocked) == 1, blocked  # said once, not every pass
    assert blocked[0]["outcome"] == "blocked"
    assert (blocked[0]["jobs"], blocked[0]["not_requeueable"]) == ([], ["12"])
    assert blocked[0]["held_back"] == ["11"]
    assert blocked[0]["after"] is None

    del slurm.jobs[12]  # it ended
    await replacer.step(VIEW, "draining")
    assert slurm.writes == [("scontrol", "requeue", "11")]
    assert pods.evicted == [NODE]
    assert NODE not in replacer.blocked


async def test_left_to_the_prestop_hook_nothing_goes_while_one_job_cannot(tmp_path: Path) -> None:
    """``requeue_in_prestop``: neither a requeue nor the eviction while job 12 cannot go."""
    slurm, pods = _Slurm({11: ("RUNNING", True), 12: ("RUNNING", False)}), FakePodWriter()
    replacer = _replacer(slurm, pods, tmp_path / "a", requeue_in_prestop=True)
    await replacer.step(VIEW, "draining")
    assert (slurm.writes, pods.evicted) == ([], [])
    assert "[12]" in replacer.blocked[NODE]
    del slurm.jobs[12]
    await replacer.step(VIEW, "draining")
    assert slurm.writes == []  # the hook signals and requeues job 11 itself
    assert pods.evicted == [NODE]


async def test_a_job_that_turns_unrequeueable_before_the_requeue_holds_back_the_others(
    tmp_path: Path,
) -> None:
    """All requeueable at the judgement, one stopped by the requeue's own read: none goes."""
    slurm, pods = _Slurm({11: ("RUNNING", True), 12: ("RUNNING", True)}), FakePodWriter()
    slurm.then = {11: ("RUNNING", True), 12: ("STOPPED", True)}
    replacer = _replacer(slurm, pods, tmp_path / "a")
    await replacer.step(VIEW, "draining")
    assert (slurm.writes, pods.evicted) == ([], [])
    assert "[12]" in replacer.blocked[NODE]


async def test_all_requeueable_are_requeued_together_then_the_pod_is_evicted(
    tmp_path: Path,
) -> None:
    """The other side: every job may be requeued, so all are, in one call, then the eviction."""
    slurm, pods = _Slurm({11: ("RUNNING", True), 12: ("SUSPENDED", True)}), FakePodWriter()
    replacer = _replacer(slurm, pods, tmp_path / "a")
    await replacer.step(VIEW, "draining")
    assert slurm.writes == [("scontrol", "requeue", "11,12")]
    assert pods.evicted == [NODE]
    assert NODE not in replacer.blocked


async def test_a_pod_evicted_once_is_not_evicted_again_while_the_cache_lags(
    tmp_path: Path,
) -> None:
    """CI stop 51: the next pass saw the evicted pod not yet terminating and evicted it again.

    The watch cache may lag the eviction by a pass; the same pod (same uid) is evicted once.
    Its replacement (another uid under the same name) is a new pod, and the node's release
    (``forget``) starts afresh.
    """
    slurm, pods = _Slurm({}), FakePodWriter()
    replacer = _replacer(slurm, pods, tmp_path / "a")
    await replacer.step(VIEW, "draining")
    await replacer.step(VIEW, "replacing")  # the cache still shows the pod Running
    assert pods.evicted == [NODE]
    replacement = WorkerView(
        node=NODE, pod=running_pod(NODE, uid="u1", on="kn-0"), statefulset=None, slurm=None
    )
    await replacer.step(replacement, "replacing")
    assert pods.evicted == [NODE, NODE]
    replacer.forget(NODE)
    await replacer.step(VIEW, "draining")
    assert pods.evicted == [NODE, NODE, NODE]

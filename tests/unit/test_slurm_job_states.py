"""Every job state SLURM prints reads as gone, live, or on the node and not requeueable.

Issue 37 item 6. A job state slonkd does not know as ended (or pending) must never read as
"not on the node": the preStop hook would set the node DOWN under a live job, the rollout
would evict its pod without a requeue. Both shapes of ``squeue --json`` are tested, on the
recorded outputs (``tests/data/slurm/<release>/squeue.json``, job 1: a batch job that may be
requeued, running on n3) with job 1's ``job_state`` replaced:

- 22.05 (openapi v0.0.38) prints ONE word, ``job_state_string()``: the first flag set of
  COMPLETING, STAGE_OUT, CONFIGURING, RESIZING, REQUEUED, REQUEUE_FED, REQUEUE_HOLD,
  SPECIAL_EXIT, STOPPED, REVOKED, RESV_DEL_HOLD, SIGNALING, in that order, else the base
  state, else ``?`` (read from the disassembly of Debian's 22.05.8 ``libslurmfull.so``: no
  source tree was at hand);
- 24.11 (data_parser v0.0.42) prints a LIST: the base state, then every flag set, named as
  in its ``JOB_STATE`` flag table (strings of the trixie root's
  ``data_parser_v0_0_42.so``: the same flags plus LAUNCH_FAILED, RECONFIG_FAIL and
  POWER_UP_NODE; UPDATE_DB is not in it).

Neighbours: the parser tests of each release (``test_slurm_parsing.py``,
``test_slurm_parsing_v42.py``); the preStop hook's use of the classification
(``test_prestop_job_states.py``).
"""

from __future__ import annotations

import pytest

from slonkd.adapters.slurm.parsing import parse_squeue_json
from slonkd.adapters.slurm.parsing_v42 import parse_squeue_json_v42
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.slurm_job import SlurmJob
from tests.unit.recorded import squeue_json_with

BASES_LIVE = ("RUNNING", "SUSPENDED")
"""Base states of a job that runs (or is suspended) on its nodes: requeueable."""
BASES_GONE = (
    "PENDING",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)
"""Base states of a job that holds no node: waiting to run, or ended."""
FLAGS = (
    "LAUNCH_FAILED",
    "UPDATE_DB",
    "REQUEUED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "RESIZING",
    "CONFIGURING",
    "COMPLETING",
    "STOPPED",
    "RECONFIG_FAIL",
    "POWER_UP_NODE",
    "REVOKED",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
    "SIGNALING",
    "STAGE_OUT",
)
"""SLURM's job state flags (``JOB_STATE_FLAGS``), as both releases name them."""
NEVER_SEEN = ("?", "", "EXPEDITING", "running", "RUNNING,STOPPED", "UNRECOGNISED")
"""22.05's word for a base state it does not know, and words no release prints (yet)."""
LIVE_WORDS = (*BASES_LIVE, "CONFIGURING")
"""One word of 22.05 for a job slonkd may requeue (CONFIGURING: nodes booting for it)."""
HELD_WORDS = tuple(f for f in FLAGS if f != "CONFIGURING") + NEVER_SEEN
"""One word of 22.05 for a job on its nodes that slonkd must not requeue nor take for gone."""


def _job_22_05(word: str) -> SlurmJob:
    return next(j for j in parse_squeue_json(squeue_json_with("22.05", word)) if j.job_id == 1)


def _job_24_11(states: list[str]) -> SlurmJob:
    return next(
        j for j in parse_squeue_json_v42(squeue_json_with("24.11", states)) if j.job_id == 1
    )


def _reads(job: SlurmJob) -> tuple[bool, bool]:
    return job.on_node, job.requeueable


# -- 22.05: one word ----------------------------------------------------------------------


@pytest.mark.parametrize("word", LIVE_WORDS)
def test_22_05_a_live_word_is_on_the_node_and_requeueable(word: str) -> None:
    """RUNNING, SUSPENDED, CONFIGURING: on the node, and requeued at a deadline."""
    assert _reads(_job_22_05(word)) == (True, True)


@pytest.mark.parametrize("word", BASES_GONE)
def test_22_05_a_pending_or_ended_job_is_gone(word: str) -> None:
    """Pending or ended: it holds nothing on the node."""
    assert _reads(_job_22_05(word)) == (False, False)


@pytest.mark.parametrize("word", HELD_WORDS)
def test_22_05_a_flag_or_unknown_word_is_on_the_node_and_not_requeueable(word: str) -> None:
    """STOPPED, SIGNALING, RESIZING, ``?``...: never gone, never requeued by slonkd."""
    job = _job_22_05(word)
    assert _reads(job) == (True, False), job.raw_state


# -- 24.11: base state, then the flags ----------------------------------------------------


@pytest.mark.parametrize("base", BASES_LIVE)
def test_24_11_a_live_base_alone_is_on_the_node_and_requeueable(base: str) -> None:
    """``["RUNNING"]``, ``["SUSPENDED"]``."""
    assert _reads(_job_24_11([base])) == (True, True)


def test_24_11_running_while_its_nodes_boot_is_requeueable() -> None:
    """``["RUNNING", "CONFIGURING"]`` is 22.05's ``CONFIGURING``."""
    assert _reads(_job_24_11(["RUNNING", "CONFIGURING"])) == (True, True)


@pytest.mark.parametrize("base", BASES_GONE)
def test_24_11_a_pending_or_ended_base_alone_is_gone(base: str) -> None:
    """``["COMPLETED"]``, ``["PENDING"]``...: nothing held."""
    assert _reads(_job_24_11([base])) == (False, False)


@pytest.mark.parametrize(
    ("base", "flag"),
    [
        pytest.param(base, flag, id=f"{base}+{flag}")
        for base in BASES_LIVE + BASES_GONE
        for flag in FLAGS
        if (base, flag) != ("RUNNING", "CONFIGURING")  # requeueable: tested above
    ],
)
def test_24_11_any_flag_beside_a_base_is_on_the_node_and_not_requeueable(
    base: str, flag: str
) -> None:
    """Every base state beside every flag: on the node, not requeueable.

    ``["RUNNING", "STOPPED"]``, ``["COMPLETED", "COMPLETING"]``, ``["PENDING", "REQUEUED"]``...
    all but ``["RUNNING", "CONFIGURING"]``.
    """
    job = _job_24_11([base, flag])
    assert _reads(job) == (True, False), job.raw_state


@pytest.mark.parametrize(
    "states",
    [
        ["RUNNING", "SIGNALING", "STOPPED"],
        ["RUNNING", "CONFIGURING", "POWER_UP_NODE"],
        ["CANCELLED", "COMPLETING", "STAGE_OUT"],
        ["STOPPED"],
        ["?"],
        ["EXPEDITING"],
        ["RUNNING", "EXPEDITING"],
        ["COMPLETED", "EXPEDITING"],
        ["running"],
    ],
)
def test_24_11_several_flags_or_unknown_words_are_on_the_node_and_not_requeueable(
    states: list[str],
) -> None:
    """Flags without a base, several flags, words no release prints: never gone."""
    job = _job_24_11(states)
    assert _reads(job) == (True, False), job.raw_state


# -- what the backend hands on ------------------------------------------------------------


class _Runner:
    """``squeue --json -w NODE`` answers ``text``; other calls are recorded and answer ""."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.writes: list[tuple[str, ...]] = []

    async def run(self, tool: str, *args: str, retry: bool = True) -> str:
        if (tool, *args[:1]) == ("squeue", "--json"):
            return self.text
        self.writes.append((tool, *args))
        return ""

    async def write(self, tool: str, *args: str, retry: bool = True) -> str:
        """A write: answered as :meth:`run` answers it."""
        return await self.run(tool, *args, retry=retry)


@pytest.mark.parametrize(
    ("release", "state"),
    [("22.05", "STOPPED"), ("22.05", "SIGNALING"), ("24.11", ["RUNNING", "STOPPED"])],
)
async def test_a_stopped_job_is_listed_on_its_node_and_not_requeued(
    release: str, state: str | list[str]
) -> None:
    """``jobs_on`` lists it (the preStop hook waits for it); ``requeue_jobs`` leaves it."""
    backend = ScontrolBackend()
    runner = _Runner(squeue_json_with(release, state))
    backend.runner = runner  # type: ignore[assignment]
    jobs = await backend.jobs_on("n3")
    assert [(j.job_id, j.on_node, j.requeueable) for j in jobs] == [(1, True, False)]
    result = await backend.requeue_jobs("n3")
    assert (result.requeued, result.not_requeueable) == ((), (1,))
    assert runner.writes == []

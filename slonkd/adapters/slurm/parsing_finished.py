"""Pure parser of the finished-jobs read (``squeue`` of ended jobs, one line a job); no I/O.

slurmctld keeps a finished job in memory for ``MinJobAge`` seconds (300 by default) with its
state, exit code and the nodes it ran on; ``squeue`` lists them with the states asked for.
This is the job-outcome source of the job-failure blame (:mod:`slonkd.core.job_blame`):
it needs neither slurmdbd nor a change to slurm.conf, and works on 22.05 and 24.11 alike. The
exit code is ``code:signal`` on 24.11 and the raw wait status on 22.05 (``10752`` for an exit
code of 42); both are read. Fields are separated by ``|`` (the suffix of each ``--Format``
field; blanks around a field are stripped); a job id, state, exit code or node list never holds
a blank or a ``|``, and the job name (which a user chooses) is not read at all, so no job can
forge another's line.

A malformed line, a state not asked for, a bad exit code or hostlist, or a cut-off output is
a :class:`~slonkd.core.errors.ParseError`: the whole read is refused, nothing is guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slonkd.adapters.slurm.parsing import expand_hostlist, output_lines, squeue_args
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import JobId, JobState
from slonkd.core.slurm_node import NodeName

FINISHED_STATES = (
    JobState.COMPLETED,
    JobState.FAILED,
    JobState.NODE_FAIL,
    JobState.BOOT_FAIL,
    JobState.CANCELLED,
    JobState.TIMEOUT,
    JobState.OUT_OF_MEMORY,
    JobState.PREEMPTED,
    JobState.DEADLINE,
)
"""Ended job states read: the failures, and every other end (successes are evidence too)."""

SQUEUE_FINISHED_ARGS = squeue_args(
    FINISHED_STATES,
    # ``type:|``: width 0 (squeue neither pads nor cuts; any width would cut longer values)
    # and the suffix ``|``
    "--Format=" + ",".join(f"{f}:|" for f in ("JobID", "State", "exit_code", "NodeList")),
)
"""``squeue`` arguments of the finished-jobs read: id, state, exit code and nodes, nothing else."""

_JOB_ID = re.compile(r"[0-9]{1,12}")
_STATE = re.compile(r"[A-Z_]{1,32}")
_EXIT = re.compile(r"(?P<code>[0-9]{1,3}):(?P<signal>[0-9]{1,3})|(?P<status>[0-9]{1,5})")
_NODES = re.compile(r"[A-Za-z0-9._,\[\]-]*")
_WANTED = frozenset(FINISHED_STATES)


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedJob:
    """One ended job as slurmctld still remembers it."""

    job_id: JobId
    state: JobState
    exit_code: int
    """The batch script's exit code (0..255); the signal that ended it is not kept."""
    nodes: tuple[NodeName, ...]
    """The nodes it ran on (empty: it never started, e.g. cancelled while pending)."""


def _exit_code(text: str) -> int | None:
    """The exit code of ``code:signal`` (24.11) or of a raw wait status (22.05); None: bad."""
    match = _EXIT.fullmatch(text)
    if match is None:
        return None
    if match["status"] is not None:
        status = int(match["status"])
        return (status >> 8) & 0xFF if status <= 0xFFFF else None
    code = int(match["code"])
    return code if code <= 255 and int(match["signal"]) <= 255 else None


def parse_finished_jobs(text: str) -> list[FinishedJob]:
    """Ended jobs from ``squeue`` with :data:`SQUEUE_FINISHED_ARGS`, in the order listed."""
    jobs: list[FinishedJob] = []
    seen: set[int] = set()
    for line in output_lines(text, "squeue"):
        parts = line.split("|")
        if len(parts) != 5 or parts[4].strip():
            raise ParseError(f"not a squeue id|state|exit|nodes| line: {line[:80]!r}")
        job_id, state, exit_code, nodes = (p.strip() for p in parts[:4])
        if not _JOB_ID.fullmatch(job_id):
            raise ParseError(f"bad job id {job_id[:40]!r} in squeue line {line[:80]!r}")
        if not _STATE.fullmatch(state) or JobState.parse(state) not in _WANTED:
            raise ParseError(f"squeue listed job {job_id} in state {state[:40]!r}")
        code = _exit_code(exit_code)
        if code is None:
            raise ParseError(f"bad exit code {exit_code[:40]!r} of job {job_id}")
        if nodes == "(null)":  # a job that never ran, as some releases print it
            nodes = ""
        if not _NODES.fullmatch(nodes):
            raise ParseError(f"bad node list {nodes[:80]!r} of job {job_id}")
        if int(job_id) in seen:
            raise ParseError(f"job {job_id} listed twice")
        seen.add(int(job_id))
        jobs.append(
            FinishedJob(
                job_id=JobId(int(job_id)),
                state=JobState.parse(state),
                exit_code=code,
                nodes=expand_hostlist(nodes),
            )
        )
    return jobs

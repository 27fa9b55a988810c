"""Pure parser of the finished-jobs read (``squeue`` of ended jobs, one line a job); no I/O.

slurmctld keeps a finished job in memory for ``MinJobAge`` seconds (300 by default) with its
state, exit code and the nodes it ran on; ``squeue`` lists them with the states asked for.
This is the job-outcome source of the job-failure blame (:mod:`slonkd.core.job_blame`):
it needs neither slurmdbd nor a change to slurm.conf, and works on 22.05 and 24.11 alike. The
exit code is ``code:signal`` on 24.11 and the raw wait status on 22.05 (``10752`` for an exit
code of 42); both are read. Fields are separated by ``|`` (the suffix of each ``--Format``
field; blanks around a field are stripped); a job id, state, exit code or node list never holds
a blank or a ``|``, and the job name (which a user chooses) is not read at all, so no job can
forge another's line. Each job's start and end (where it ran when: the pods behind its nodes
then, :mod:`slonkd.core.job_places`) are SLURM's standard time stamps, printed in UTC
because every client runs with ``TZ=UTC0`` and ``SLURM_TIME_FORMAT=standard`` (``runner.py``)
and read as UTC like every SLURM time slonkd reads (``Unknown``, ``N/A`` or ``None``: not
known); the user is the numeric uid (the
bound on exit-code blame counts different users, :mod:`slonkd.core.job_blame`).

A malformed line, a state not asked for, a bad exit code or hostlist, or a cut-off output is
a :class:`~slonkd.core.errors.ParseError`: the whole read is refused, nothing is guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

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
    "--Format="
    + ",".join(
        f"{f}:|"
        for f in ("JobID", "State", "exit_code", "NodeList", "StartTime", "EndTime", "UserID")
    ),
)
"""``squeue`` arguments of the finished-jobs read: id, state, exit code, nodes, start, end and
the numeric user id, nothing else."""

_FIELDS = 7

_JOB_ID = re.compile(r"[0-9]{1,12}")
_STATE = re.compile(r"[A-Z_]{1,32}")
_EXIT = re.compile(r"(?P<code>[0-9]{1,3}):(?P<signal>[0-9]{1,3})|(?P<status>[0-9]{1,5})")
_NODES = re.compile(r"[A-Za-z0-9._,\[\]-]*")
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")
_EPOCH = re.compile(r"[0-9]{1,12}")
_NO_TIME = frozenset({"Unknown", "N/A", "None", "NONE", ""})
_USER = re.compile(r"[0-9]{1,10}")
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
    start: float | None = None
    """When it started (seconds since the epoch; None: not known)."""
    end: float | None = None
    """When it ended (seconds since the epoch; None: not known)."""
    user: int | None = None
    """The numeric uid it ran as (None: not known)."""


def _time(text: str, job_id: str) -> float | None:
    """Seconds since the epoch of a SLURM time stamp of job ``job_id``; None: none given.

    The standard form is UTC without a zone (the clients run with ``TZ=UTC0``:
    :func:`~slonkd.adapters.slurm.parsing.utc_time`); digits alone are seconds since the epoch
    (``SLURM_TIME_FORMAT=%s``). Anything else is a ParseError.
    """
    if text in _NO_TIME:
        return None
    if _EPOCH.fullmatch(text):
        return float(text)
    if _TIME.fullmatch(text):
        try:
            return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
        except ValueError:
            pass
    raise ParseError(f"bad time {text[:30]!r} of job {job_id}")


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
        if len(parts) != _FIELDS + 1 or parts[_FIELDS].strip():
            raise ParseError(f"not a squeue id|state|exit|nodes|start|end|uid| line: {line[:80]!r}")
        job_id, state, exit_code, nodes, start, end, user = (p.strip() for p in parts[:_FIELDS])
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
        began, ended = _time(start, job_id), _time(end, job_id)
        if not _USER.fullmatch(user):
            raise ParseError(f"bad user id {user[:20]!r} of job {job_id}")
        if int(job_id) in seen:
            raise ParseError(f"job {job_id} listed twice")
        seen.add(int(job_id))
        jobs.append(
            FinishedJob(
                job_id=JobId(int(job_id)),
                state=JobState.parse(state),
                exit_code=code,
                nodes=expand_hostlist(nodes),
                start=began,
                end=ended,
                user=int(user),
            )
        )
    return jobs

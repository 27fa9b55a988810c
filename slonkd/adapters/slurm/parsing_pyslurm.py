"""Pure builders of core types from the rows pyslurm's child answers with; its errors; no I/O.

:mod:`slonkd.adapters.slurm.pyslurm_child` reads slurmctld through pyslurm's object API
(``pyslurm.Nodes``/``Node``/``Jobs``, alike in the 22.5 and 24.11 branches) and answers with
one JSON array per node or job, the properties of :data:`NODE_FIELDS` and :data:`JOB_FIELDS`
in that order; :mod:`slonkd.adapters.slurm.pyslurm_reads` (the parent) builds
:class:`~slonkd.core.slurm_node.SlurmNode`, :class:`~slonkd.core.slurm_job.SlurmJob`,
:class:`~slonkd.adapters.slurm.parsing_finished.FinishedJob` and
:class:`~slonkd.adapters.slurm.parsing.ReasonGroup` from them here. Unit tests run these on
rows recorded from both harness releases (``tests/data/pyslurm/{22.05,24.11}/``,
``tests/data/pyslurm/record_rows.py``).

Fields are exact (no text to split, no ``[user@time]`` suffix): times are epoch seconds (None
for 0/NO_VAL, pyslurm's ``_raw_time``) read as UTC, whatever any zone. Differences from the
scontrol backend's reads, by design:

- a node's state is pyslurm's ``slurm_node_state_string_complete`` of its own MIXED rule;
- a job's state is one word (``slurm_job_state_string``: its first flag, else its base), as
  22.05's ``squeue --json`` prints it; 24.11's scontrol backend gives a list, so compare
  ``presence``/``requeueable``, never ``states``;
- a reason group is one node, its state slonkd's spelling (``IDLE+DRAIN`` lower-cased), not
  sinfo's compact word (as the scontrol backend's JSON fallback does), and its user the name
  alone (``root``; ``sinfo -R`` writes ``root(0)``);
- pyslurm reports an exit code of 128 or more less 128 (its ``_get_exit_code``);
- ``reason_user`` of a reason pyslurm wrote may be None (plan F7; writes are not here).

A row of the wrong shape is a :class:`~slonkd.core.errors.ParseError`: nothing is guessed.
The child's errors arrive as an error number, mapped by :func:`error_kind` (the child) and
:func:`error_for` (the parent) as the scontrol backend's runner maps its clients' messages.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

from slonkd.adapters.slurm.parsing import (
    cached_state,
    check_unique,
    expand_hostlist,
    node_name,
)
from slonkd.adapters.slurm.parsing_finished import FINISHED_STATES, FinishedJob
from slonkd.adapters.slurm.parsing_jobs import ON_NODE_STATES
from slonkd.adapters.slurm.runner import (
    InvalidNodeStateError,
    NodeNotFoundError,
    NotReachedError,
    PermissionDeniedError,
)
from slonkd.core.errors import (
    OutcomeUnknownError,
    ParseError,
    SlonkdError,
    TerminalError,
    TransientError,
)
from slonkd.core.slurm_job import JobId, JobState, SlurmJob
from slonkd.core.slurm_node import NodeName, SlurmNode

NODE_FIELDS = (
    "name",
    "state",
    "reason",
    "reason_user",
    "reason_time",
    "comment",
    "extra",
    "available_features",
    "active_features",
    "total_cpus",
    "allocated_cpus",
    "partitions",
)
"""``pyslurm.Node`` properties of a node row, in order."""
JOB_FIELDS = (
    "id",
    "state",
    "allocated_nodes",
    "is_batch_job",
    "is_requeueable",
    "exit_code",
    "start_time",
    "end_time",
    "user_id",
)
"""``pyslurm.Job`` properties of a job row, in order."""

# slurm_errno.h, the same numbers in 22.05 and 24.11
SLURM_COMMUNICATIONS_ERRNOS = frozenset({1001, 1002, 1003, 1004})
SLURM_PROTOCOL_VERSION_ERROR = 1005
SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR = 1800
SLURMCTLD_COMMUNICATIONS_LOST_ERRNOS = frozenset({1801, 1802, 1803})
ESLURM_ACCESS_DENIED = 2002
ESLURM_INVALID_JOB_ID = 2017
ESLURM_INVALID_NODE_NAME = 2018
ESLURM_IN_STANDBY_MODE = 2027
ESLURM_ALREADY_DONE = 2021
ESLURM_JOB_PENDING = 2024
ESLURM_INVALID_NODE_STATE = 2028
ESLURM_DISABLED = 2037
ESLURM_BATCH_ONLY = 2039
ESLURM_IN_STANDBY_USE_BACKUP = 2131
SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT = 5004

NOT_REQUEUEABLE_ERRNOS = frozenset(
    {
        ESLURM_INVALID_JOB_ID,
        ESLURM_ALREADY_DONE,
        ESLURM_JOB_PENDING,
        ESLURM_DISABLED,
        ESLURM_BATCH_ONLY,
    }
)
"""A requeue refused for the job (it ended, pends, cannot be requeued): reported, not raised."""

_NOT_REACHED = frozenset(
    {
        SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR,
        ESLURM_IN_STANDBY_MODE,
        ESLURM_IN_STANDBY_USE_BACKUP,
    }
)
"""The request never reached an acting slurmctld: nothing was applied."""
_LOST = (
    SLURMCTLD_COMMUNICATIONS_LOST_ERRNOS
    | SLURM_COMMUNICATIONS_ERRNOS
    | {SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT}
)
"""The request may have arrived and its answer was lost."""
_BY_ERRNO = {
    ESLURM_INVALID_NODE_NAME: "not-found",
    ESLURM_INVALID_NODE_STATE: "refused",
    ESLURM_ACCESS_DENIED: "denied",
    SLURM_PROTOCOL_VERSION_ERROR: "terminal",
}
_ERRORS: dict[str, type[SlonkdError]] = {
    "not-reached": NotReachedError,
    "outcome-unknown": OutcomeUnknownError,
    "transient": TransientError,
    "not-found": NodeNotFoundError,
    "refused": InvalidNodeStateError,
    "denied": PermissionDeniedError,
    "terminal": TerminalError,
}


def error_kind(errno: int | None, *, write: bool = False) -> str:
    """The child's word for a SLURM error number (None: not a SLURM error, a terminal one).

    A lost answer is ``outcome-unknown`` for a write (never sent again) and ``transient``
    for a read; a number not in the plan's table is ``transient``, as libslurm's child says.
    """
    if errno is None:
        return "terminal"
    if errno in _NOT_REACHED:
        return "not-reached"
    if errno in _LOST:
        return "outcome-unknown" if write else "transient"
    return _BY_ERRNO.get(errno, "transient")


def error_for(kind: str, detail: str) -> SlonkdError:
    """slonkd's error for the child's word (an unknown word: TransientError)."""
    return _ERRORS.get(kind, TransientError)(detail)


def _text(raw: object, what: str) -> str:
    """A text property: None (pyslurm's empty or unset) is ""."""
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise ParseError(f"{what} is not text: {str(raw)[:40]!r}")
    return raw


def _count(raw: object, what: str) -> int:
    """A count property: None (NO_VAL) is 0."""
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ParseError(f"{what} is not a count: {str(raw)[:40]!r}")
    return raw


def _epoch(raw: object, what: str) -> int | None:
    """Epoch seconds, None when not set."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ParseError(f"{what} is not a time: {str(raw)[:40]!r}")
    return raw


def _words(raw: object, what: str) -> tuple[str, ...]:
    """A list property (features, partitions) without empty items and ``(null)``."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise ParseError(f"{what} is not a list of text: {str(raw)[:60]!r}")
    return tuple(x for x in raw if x and x != "(null)")


def _flag(raw: object, what: str) -> bool:
    if raw is None:
        return False
    if not isinstance(raw, bool):
        raise ParseError(f"{what} is not a flag: {str(raw)[:40]!r}")
    return raw


def _row(raw: object, fields: Sequence[str], what: str) -> list[object]:
    if not isinstance(raw, list) or len(raw) != len(fields):
        raise ParseError(f"not a {what} row of {len(fields)} fields: {str(raw)[:80]!r}")
    return raw


def parse_node_row(raw: object) -> SlurmNode:
    """One node row (:data:`NODE_FIELDS`)."""
    row = _row(raw, NODE_FIELDS, "node")
    name = node_name(row[0])
    state = _text(row[1], f"state of {name}")
    base, *flags = state.split("+")
    if not base:
        raise ParseError(f"empty state of {name}")
    if row[3] is not None and not isinstance(row[3], str):
        raise ParseError(f"reason user of {name} is not text: {str(row[3])[:40]!r}")
    reason = _text(row[2], f"reason of {name}")
    # the reason's setter and time, only with a reason (24.11 keeps a uid of 0 without one)
    user = row[3] if isinstance(row[3], str) and reason else None
    when = _epoch(row[4], f"reason time of {name}")
    when = when if reason else None
    return SlurmNode(
        name=name,
        state=cached_state(base, tuple(flags)),
        reason=reason,
        reason_user=user or None,
        reason_time=None if when is None else datetime.fromtimestamp(when, UTC),
        comment=_text(row[5], f"comment of {name}"),
        extra=_text(row[6], f"extra of {name}"),
        features=_words(row[7], f"features of {name}"),
        active_features=_words(row[8], f"active features of {name}"),
        cpus=_count(row[9], f"cpus of {name}"),
        alloc_cpus=_count(row[10], f"allocated cpus of {name}"),
        partitions=_words(row[11], f"partitions of {name}"),
    )


def parse_nodes(rows: object, job_rows: object = None) -> list[SlurmNode]:
    """Node rows, in the order read; ``job_rows`` (not None) gives each ``running_jobs``."""
    if not isinstance(rows, list):
        raise ParseError(f"node rows are not a list: {str(rows)[:80]!r}")
    return with_running_jobs([parse_node_row(r) for r in rows], job_rows)


class NodeRows:
    """The rows of the last whole read, parsed: a row unchanged since is not parsed again.

    A 5,000-node read spent 120-140 ms building the same nodes from the same rows each time
    (the scontrol backend skips its unchanged lines alike, :mod:`.parsing_show_node`). A
    row's key is its ``repr`` (JSON's values: exact); only the last read's rows are kept,
    and only once the whole read parsed (a refused read keeps nothing of its own).
    """

    def __init__(self) -> None:
        self._last: dict[str, SlurmNode] = {}

    def parse(self, rows: object, job_rows: object = None) -> list[SlurmNode]:
        """What :func:`parse_nodes` returns for these rows."""
        if not isinstance(rows, list):
            raise ParseError(f"node rows are not a list: {str(rows)[:80]!r}")
        last, kept = self._last, {}
        nodes = []
        for raw in rows:
            key = repr(raw)
            node = last.get(key)
            if node is None:
                node = parse_node_row(raw)
            kept[key] = node
            nodes.append(node)
        nodes = with_running_jobs(nodes, job_rows)
        self._last = kept
        return nodes


def with_running_jobs(nodes: list[SlurmNode], job_rows: object) -> list[SlurmNode]:
    """Each node's ``running_jobs`` from ``job_rows`` (None: left as read); names unique."""
    check_unique(nodes)
    if job_rows is None:
        return nodes
    counts = running_counts(job_rows)
    return [dataclasses.replace(n, running_jobs=counts.get(n.name, 0)) for n in nodes]


def _job_state(raw: object, job_id: int) -> str:
    state = _text(raw, f"state of job {job_id}")
    if not state:
        raise ParseError(f"empty state of job {job_id}")
    return state


def _job_id(raw: object) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise ParseError(f"not a job id: {str(raw)[:40]!r}")
    return raw


def _job_rows(raw: object) -> list[list[object]]:
    if not isinstance(raw, list):
        raise ParseError(f"job rows are not a list: {str(raw)[:80]!r}")
    return [_row(r, JOB_FIELDS, "job") for r in raw]


def running_counts(job_rows: object) -> dict[NodeName, int]:
    """Jobs holding resources on each node (a state of ``ON_NODE_STATES``); others absent."""
    counts: Counter[NodeName] = Counter()
    wanted = frozenset(ON_NODE_STATES)
    for row in _job_rows(job_rows):
        job_id = _job_id(row[0])
        if JobState.parse(_job_state(row[1], job_id)) in wanted:
            counts.update(set(expand_hostlist(_text(row[2], f"nodes of job {job_id}"))))
    return dict(counts)


def parse_job_row(row: list[object]) -> SlurmJob:
    """One job row as the port's :class:`SlurmJob` (its one state word)."""
    job_id = _job_id(row[0])
    return SlurmJob(
        job_id=JobId(job_id),
        states=(_job_state(row[1], job_id),),
        nodes=expand_hostlist(_text(row[2], f"nodes of job {job_id}")),
        batch=_flag(row[3], f"batch flag of job {job_id}"),
        requeue=_flag(row[4], f"requeue flag of job {job_id}"),
    )


def jobs_on(job_rows: object, name: str) -> list[SlurmJob]:
    """The jobs that may hold resources on node ``name`` now."""
    jobs = (parse_job_row(r) for r in _job_rows(job_rows))
    return [j for j in jobs if name in j.nodes and j.on_node]


def finished_jobs(job_rows: object) -> list[FinishedJob]:
    """Jobs in an ended state (``FINISHED_STATES``), in the order read."""
    wanted = frozenset(FINISHED_STATES)
    jobs: list[FinishedJob] = []
    for row in _job_rows(job_rows):
        job_id = _job_id(row[0])
        state = JobState.parse(_job_state(row[1], job_id))
        if state not in wanted:
            continue
        code = _count(row[5], f"exit code of job {job_id}")
        if code > 255:
            raise ParseError(f"bad exit code {code} of job {job_id}")
        start = _epoch(row[6], f"start of job {job_id}")
        end = _epoch(row[7], f"end of job {job_id}")
        if row[8] is not None and (isinstance(row[8], bool) or not isinstance(row[8], int)):
            raise ParseError(f"bad user id {str(row[8])[:20]!r} of job {job_id}")
        user = row[8] if isinstance(row[8], int) else None
        jobs.append(
            FinishedJob(
                job_id=JobId(job_id),
                state=state,
                exit_code=code,
                nodes=expand_hostlist(_text(row[2], f"nodes of job {job_id}")),
                start=None if start is None else float(start),
                end=None if end is None else float(end),
                user=user,
            )
        )
    return jobs

"""Pure parsers of SLURM 22.05 client output into core types (no I/O, no subprocess).

- ``sinfo --json`` (openapi v0.0.38): unambiguous, slower. The fast read, ``scontrol -o
  show node`` (text, :mod:`slonkd.adapters.slurm.parsing_show_node`), raises
  :class:`AmbiguousOutput` whenever its fields do not split in one way only, and the caller
  reads JSON instead.
- ``sinfo -R -h -o '%N|%T|%H|%U|%E'``: only the nodes that carry a reason, grouped.
- ``squeue --json``: jobs and their nodes.

A time in text output has no zone: it is read as UTC (:func:`utc_time`), which is what the
runner makes every client print.

Anything of the wrong shape raises :class:`slonkd.core.errors.ParseError`; nothing here
ever returns a node whose state or reason it had to guess.

The readers the other parsers share start here too: JSON fields, node lists and what both
JSON schemas write alike of a node and a job (:mod:`slonkd.adapters.slurm.parsing_v42`),
the size check and the node fields of the text node read
(:mod:`slonkd.adapters.slurm.parsing_show_node`), and the checked lines and ``squeue``
arguments of the one-line-a-record reads (:mod:`slonkd.adapters.slurm.parsing_jobs`,
:mod:`slonkd.adapters.slurm.parsing_finished`, :mod:`slonkd.adapters.slurm.parsing_cas`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

import hostlist

from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import JobId, JobState, SlurmJob
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode

MAX_OUTPUT_BYTES = 256 * 1024 * 1024
MAX_LINES_CHARS = 64 * 1024 * 1024
"""Largest output of a read of ``|``-separated lines (:func:`output_lines`)."""
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_REASON_LINE = re.compile(
    r"(?P<nodes>[A-Za-z0-9][A-Za-z0-9._,\[\]-]*)\|(?P<state>[a-z]+[*~#!%$@^+-]*)\|"
    r"(?P<time>[0-9T:-]{19}|Unknown)\|(?P<user>[^|]*)\|(?P<reason>.*)"
)


class AmbiguousOutput(ParseError):
    """Text output whose fields cannot be split in only one way; read JSON instead."""


class ReportedErrors(ParseError):
    """JSON output whose ``errors`` list is not empty.

    With slurmctld down, 22.05's ``sinfo --json`` exits 0 with ``"errors": [{"error":
    "Unspecified error"}]`` and an empty node list: that is no answer, not "no nodes".
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasonGroup:
    """One line of ``sinfo -R``: nodes sharing a reason, its setter and time."""

    nodes: tuple[NodeName, ...]
    state: str
    """sinfo's compact state word, e.g. ``drained``, ``draining@``, ``down*``."""
    reason: str
    user: str
    time: datetime | None


def reason_groups(nodes: Iterable[SlurmNode]) -> list[ReasonGroup]:
    """One group a node whose reason holds it, the state in slonkd's spelling.

    The exact reads' groups (a node table instead of ``sinfo -R``'s compact ones): the scontrol
    backend's JSON fallback and the pyslurm backend's reads.
    """
    return [
        ReasonGroup(
            nodes=(n.name,),
            state=str(n.state).lower(),
            reason=n.reason,
            user=n.reason_user or "",
            time=n.reason_time,
        )
        for n in nodes
        if n.live_reason
    ]


@functools.lru_cache(maxsize=1024)
def cached_state(base: str, flags: tuple[str, ...]) -> NodeState:
    """The state for SLURM's tokens; few distinct ones exist, so each is built once."""
    return NodeState.from_tokens(base, flags)


def check_size(data: str) -> None:
    """ParseError when a client's output is over :data:`MAX_OUTPUT_BYTES`."""
    if len(data) > MAX_OUTPUT_BYTES:
        raise ParseError(f"output of {len(data)} bytes is over the limit")


def output_lines(text: str, command: str) -> list[str]:
    """The lines of ``command``'s output (each without its newline), or ParseError.

    An output over :data:`MAX_LINES_CHARS`, or one whose last line has no newline (cut
    off), is refused whole. The one-line-a-record reads (running jobs, finished jobs, the
    compare-and-set read) start here.
    """
    if len(text) > MAX_LINES_CHARS:
        raise ParseError(f"{command} output of {len(text)} characters is over the limit")
    if text and not text.endswith("\n"):
        raise ParseError(f"{command} output does not end with a newline: cut off?")
    return text.split("\n")[:-1]


def squeue_args(states: Iterable[JobState], output_format: str) -> tuple[str, ...]:
    """``squeue`` arguments listing every job (hidden partitions too) in ``states``.

    No header line; ``output_format`` (``--format=...`` or ``--Format=...``) says what of
    each job is printed.
    """
    return (
        "--all",
        "--noheader",
        "--states=" + ",".join(s.value for s in states),
        output_format,
    )


def node_name(raw: object) -> NodeName:
    """A node name as SLURM allows it, or ParseError."""
    if not isinstance(raw, str) or _NODE_NAME.fullmatch(raw) is None:
        raise ParseError(f"not a node name: {str(raw)[:80]!r}")
    return NodeName(raw)


def comma_list(raw: str) -> tuple[str, ...]:
    """The items of a comma-separated text field, without empty ones and ``(null)``."""
    return tuple(x for x in raw.split(",") if x and x != "(null)")


def int_field(raw: object, what: str) -> int:
    """An integer (JSON number or decimal text), or ParseError naming ``what``."""
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ParseError(f"{what} is not an integer: {str(raw)[:40]!r}")
    try:
        return int(raw)
    except ValueError as exc:
        raise ParseError(f"{what} is not an integer: {str(raw)[:40]!r}") from exc


def utc_time(naive: datetime | None) -> datetime | None:
    """A time SLURM's text output printed without a zone, read as UTC.

    The client prints in its own process's zone, and slonkd runs every client with
    ``TZ=UTC0`` and ``SLURM_TIME_FORMAT=standard`` (``runner.py``'s ``CLIENT_TIME_ENV``), so
    the text is UTC whatever the zone of this process, the client's host or slurmctld.
    """
    return naive.replace(tzinfo=UTC) if naive is not None else None


def check_unique(nodes: list[SlurmNode]) -> None:
    """ParseError when one read names a node twice."""
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ParseError("the same node twice in one read")


def load_json(text: str) -> Mapping[str, Any]:
    """A JSON object whose ``errors`` list is empty (ReportedErrors otherwise)."""
    check_size(text)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ParseError("JSON output is not an object")
    errors = doc.get("errors")
    if errors:
        raise ReportedErrors(f"SLURM reported errors: {str(errors)[:200]}")
    return doc


def json_list(text: str, key: str, command: str) -> list[Any]:
    """The list under ``key`` of ``command``'s JSON object (:func:`load_json`), or ParseError.

    Both SLURM versions' JSON node and job reads start here.
    """
    raw = load_json(text).get(key)
    if not isinstance(raw, list):
        raise ParseError(f"{command} has no {key.removesuffix('s')} list")
    return raw


def str_field(obj: Mapping[str, Any], key: str, *, nullable: bool = False) -> str:
    """``obj[key]`` as a string (null as "" when ``nullable``), or ParseError."""
    value = obj.get(key)
    if value is None and nullable:
        return ""
    if not isinstance(value, str):
        raise ParseError(f"{key} is not a string: {str(value)[:40]!r}")
    return value


def str_list_field(obj: Mapping[str, Any], key: str) -> list[str]:
    """``obj[key]`` as a list of strings, or ParseError."""
    value = obj.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ParseError(f"{key} is not a list of strings")
    return value


def reason_user_field(raw: Mapping[str, Any]) -> str | None:
    """``reason_set_by_user`` of a JSON node: a string, None when null, or ParseError."""
    user = raw.get("reason_set_by_user")
    if user is not None and not isinstance(user, str):
        raise ParseError("reason_set_by_user is not a string")
    return user


def json_nodes(
    text: str, command: str, parse_node: Callable[[object], SlurmNode]
) -> list[SlurmNode]:
    """Every element of ``nodes`` in ``command``'s JSON, each by ``parse_node``, none twice."""
    nodes = [parse_node(n) for n in json_list(text, "nodes", command)]
    check_unique(nodes)
    return nodes


class JsonNodeFields(TypedDict):
    """The fields of a :class:`SlurmNode` both JSON schemas write alike (after its reason)."""

    comment: str
    extra: str
    features: tuple[str, ...]
    active_features: tuple[str, ...]
    cpus: int
    alloc_cpus: int
    partitions: tuple[str, ...]


def json_node_fields(
    raw: Mapping[str, Any], features: Callable[[Mapping[str, Any], str], tuple[str, ...]]
) -> JsonNodeFields:
    """``comment``, ``extra``, the feature lists, ``cpus``, ``alloc_cpus``, ``partitions``.

    ``features`` reads ``features`` and ``active_features`` (a comma list in v0.0.38, a list
    in v0.0.42); the rest reads the same in both schemas, in this order (so the first bad
    field is the one a ParseError names, as when each parser read them itself).
    """
    return {
        "comment": str_field(raw, "comment"),
        "extra": str_field(raw, "extra"),
        "features": features(raw, "features"),
        "active_features": features(raw, "active_features"),
        "cpus": int_field(raw.get("cpus"), "cpus"),
        "alloc_cpus": int_field(raw.get("alloc_cpus"), "alloc_cpus"),
        "partitions": tuple(str_list_field(raw, "partitions")),
    }


def _csv_field(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    return comma_list(str_field(raw, key))


def parse_sinfo_json_node(raw: object) -> SlurmNode:
    """One element of ``nodes`` in ``sinfo --json`` (openapi v0.0.38)."""
    if not isinstance(raw, dict):
        raise ParseError("node entry is not an object")
    changed = int_field(raw.get("reason_changed_at"), "reason_changed_at")
    user = reason_user_field(raw)
    return SlurmNode(
        name=node_name(raw.get("name")),
        state=cached_state(str_field(raw, "state"), tuple(str_list_field(raw, "state_flags"))),
        reason=str_field(raw, "reason"),
        reason_user=user,
        reason_time=datetime.fromtimestamp(changed, UTC) if changed > 0 else None,
        **json_node_fields(raw, _csv_field),
    )


def parse_sinfo_json(text: str) -> list[SlurmNode]:
    """All nodes of ``sinfo --json`` (22.05 always prints every node: filter yourself)."""
    return json_nodes(text, "sinfo --json", parse_sinfo_json_node)


def expand_hostlist(text: str) -> tuple[NodeName, ...]:
    """Node names of a SLURM hostlist expression such as ``n[1-3],x7``."""
    if not text:
        return ()
    try:
        names = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as exc:
        raise ParseError(f"bad hostlist {text[:80]!r}: {exc}") from exc
    if len(names) > 1_000_000:
        raise ParseError("hostlist expands to too many names")
    return tuple(node_name(n) for n in names)


def json_job(
    raw: Mapping[str, Any], job_states: Callable[[Mapping[str, Any]], list[str]]
) -> SlurmJob:
    """A job of ``squeue --json`` in either schema; ``job_states`` reads ``job_state``.

    v0.0.38 writes one word (the first flag set, else the base state), v0.0.42 a list (the
    base state, then every flag): the job keeps them all, as printed, and
    :func:`slonkd.core.slurm_job.presence` reads them (a word it does not know keeps the job
    on its nodes).
    """
    batch, requeue = raw.get("batch_flag"), raw.get("requeue")
    if not isinstance(batch, bool) or not isinstance(requeue, bool):
        raise ParseError("batch_flag/requeue are not booleans")
    return SlurmJob(
        job_id=JobId(int_field(raw.get("job_id"), "job_id")),
        states=tuple(job_states(raw)),
        nodes=expand_hostlist(str_field(raw, "nodes", nullable=True)),
        batch=batch,
        requeue=requeue,
    )


def _job_state(raw: Mapping[str, Any]) -> list[str]:
    return [str_field(raw, "job_state")]


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """Jobs of ``squeue --json`` (openapi v0.0.38) with the nodes each holds."""
    jobs: list[SlurmJob] = []
    for raw in json_list(text, "jobs", "squeue --json"):
        if not isinstance(raw, dict):
            raise ParseError("job entry is not an object")
        jobs.append(json_job(raw, _job_state))
    return jobs


def parse_sinfo_reasons(text: str) -> list[ReasonGroup]:
    """``sinfo -R -h -o '%N|%T|%H|%U|%E'``; a reason with a newline is ambiguous."""
    check_size(text)
    groups: list[ReasonGroup] = []
    if text.strip() and not text.endswith("\n"):
        raise ParseError("sinfo output does not end with a newline: cut off?")
    for line in text.splitlines():
        if not line:
            continue
        match = _REASON_LINE.fullmatch(line)
        if match is None:
            raise AmbiguousOutput(
                f"sinfo -R line does not parse (reason with newline?): {line[:80]!r}"
            )
        stamp = match["time"]
        naive = None if stamp == "Unknown" else datetime.fromisoformat(stamp)
        groups.append(
            ReasonGroup(
                nodes=expand_hostlist(match["nodes"]),
                state=match["state"],
                reason=match["reason"],
                user=match["user"],
                time=utc_time(naive),
            )
        )
    return groups

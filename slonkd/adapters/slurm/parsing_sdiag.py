"""Pure parser of ``sdiag``: slurmctld's own statistics (22.05 and 24.11 print the same).

Also the same statistics from the pyslurm child's fields (:func:`stats_from_fields`).

What slonkd exports of it: the server thread count, the agent queue, the job counters
(submitted, started, ...) and the current pending and running jobs, the main scheduler's
last cycle, and the RPC statistics by message type (count and total time). RPC statistics by
user are left out (user names are not a bounded label set). A missing server thread count
means this is not sdiag's output: a ParseError, never a guessed zero.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from slonkd.core.errors import ParseError

JOB_COUNTERS = ("submitted", "started", "completed", "canceled", "failed")
"""``Jobs <event>:`` lines: counters since the statistics were last reset."""
JOB_STATES = ("pending", "running")
"""``Jobs <state>:`` lines: jobs in that state at the last job-state snapshot."""

_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ()]*?):\s+(?P<value>\d+)\s*$", re.M)
_RPC = re.compile(
    r"^\s*(?P<type>[A-Z][A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(?P<count>\d+)\s+"
    r"ave_time:\d+\s+total_time:(?P<total>\d+)\s*$",
    re.M,
)
_BY_TYPE = "Remote Procedure Call statistics by message type"


@dataclass(frozen=True, slots=True, kw_only=True)
class RpcStats:
    """One RPC type's count and total time (microseconds) since the statistics' reset."""

    count: int
    total_us: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmctldStats:
    """slurmctld's health as ``sdiag`` reports it."""

    server_threads: int
    agent_queue: int
    agent_count: int = 0
    dbd_agent_queue: int = 0
    jobs: Mapping[str, int] = field(default_factory=dict)
    """Counters of :data:`JOB_COUNTERS` since the reset."""
    jobs_now: Mapping[str, int] = field(default_factory=dict)
    """Jobs in each of :data:`JOB_STATES` at the last snapshot."""
    main_cycle_last_us: int = 0
    rpcs: Mapping[str, RpcStats] = field(default_factory=dict)
    """By message type (e.g. ``REQUEST_NODE_INFO``), since the reset."""


def parse_sdiag(text: str) -> SlurmctldStats:
    """The statistics of one ``sdiag`` output; ParseError when it is not one."""
    fields: dict[str, int] = {}
    main_cycle = 0
    section = ""
    for line in text.splitlines():
        match = _FIELD.match(line)
        if match is None:
            if line.strip() and not line[0].isspace():
                section = line.strip()  # e.g. "Main schedule statistics (microseconds):"
            continue
        key, value = match["key"].strip(), int(match["value"])
        if section.startswith("Main schedule statistics") and key == "Last cycle":
            main_cycle = value
        elif not line[0].isspace():
            fields.setdefault(key, value)  # a top-level line (threads, queues, jobs)
    if "Server thread count" not in fields or "Agent queue size" not in fields:
        raise ParseError(f"not sdiag's output: {text[:80]!r}")
    by_type, _, _ = text.partition(_BY_TYPE)[2].partition(
        "Remote Procedure Call statistics by user"
    )
    rpcs = {
        m["type"]: RpcStats(count=int(m["count"]), total_us=int(m["total"]))
        for m in _RPC.finditer(by_type)
    }
    return SlurmctldStats(
        server_threads=fields["Server thread count"],
        agent_queue=fields["Agent queue size"],
        agent_count=fields.get("Agent count", 0),
        dbd_agent_queue=fields.get("DBD Agent queue size", 0),
        jobs={j: fields.get(f"Jobs {j}", 0) for j in JOB_COUNTERS},
        jobs_now={j: fields.get(f"Jobs {j}", 0) for j in JOB_STATES},
        main_cycle_last_us=main_cycle,
        rpcs=rpcs,
    )


def stats_from_fields(said: object) -> SlurmctldStats:
    """The statistics the pyslurm child answers ``diag`` with (its fields are sdiag's).

    ``said``: ``server_thread_count``, ``agent_queue_size``, ``agent_count``,
    ``dbd_agent_queue_size``, ``jobs_<counter>``, ``jobs_<state>``, ``schedule_cycle_last`` and
    ``rpcs`` (type -> [count, total microseconds]); anything else is a ParseError.
    """
    if not isinstance(said, Mapping) or not isinstance(said.get("rpcs"), Mapping):
        raise ParseError(f"not slurmctld's statistics: {str(said)[:80]!r}")

    def count(key: str) -> int:
        value = said.get(key, 0)
        if not _is_count(value):
            raise ParseError(f"statistics: {key} is not a count: {str(value)[:20]!r}")
        return int(value)

    rpcs: dict[str, RpcStats] = {}
    for name, pair in said["rpcs"].items():
        if not (isinstance(pair, list) and len(pair) == 2 and all(map(_is_count, pair))):
            raise ParseError(f"statistics: RPC {str(name)[:40]!r} is not [count, time]")
        rpcs[str(name)] = RpcStats(count=pair[0], total_us=pair[1])
    if "server_thread_count" not in said:
        raise ParseError("statistics: no server_thread_count")
    return SlurmctldStats(
        server_threads=count("server_thread_count"),
        agent_queue=count("agent_queue_size"),
        agent_count=count("agent_count"),
        dbd_agent_queue=count("dbd_agent_queue_size"),
        jobs={j: count(f"jobs_{j}") for j in JOB_COUNTERS},
        jobs_now={j: count(f"jobs_{j}") for j in JOB_STATES},
        main_cycle_last_us=count("schedule_cycle_last"),
        rpcs=rpcs,
    )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

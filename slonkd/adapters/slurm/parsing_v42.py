"""Pure parsers of SLURM 24.11 JSON output (data_parser v0.0.42); no I/O.

24.11 speaks JSON in ``scontrol show node --json`` (22.05 has no such thing), with another
schema than 22.05's ``sinfo --json``: base state and flags in one list (``["IDLE",
"DRAIN"]``), times as ``{"set", "infinite", "number"}``, features as lists. Its
``sinfo --json`` returns groups, not nodes, so slonkd reads nodes through scontrol here.
Errors are typed as in :mod:`slonkd.adapters.slurm.parsing`, which also reads what both
schemas write alike (a node's fields after its reason, a job but for its state list).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from slonkd.adapters.slurm.parsing import (
    cached_state,
    int_field,
    json_job,
    json_list,
    json_node_fields,
    json_nodes,
    node_name,
    reason_user_field,
    str_field,
    str_list_field,
)
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import SlurmJob
from slonkd.core.slurm_node import SlurmNode


def _number(raw: object, what: str) -> int | None:
    """A v0.0.42 ``{"set", "infinite", "number"}``; None when unset or infinite."""
    if not isinstance(raw, Mapping):
        raise ParseError(f"{what} is not a number object")
    is_set, infinite = raw.get("set"), raw.get("infinite")
    if not isinstance(is_set, bool) or not isinstance(infinite, bool):
        raise ParseError(f"{what} has no set/infinite booleans")
    if not is_set or infinite:
        return None
    return int_field(raw.get("number"), what)


def _list_field(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    return tuple(str_list_field(raw, key))


def parse_scontrol_json_node(raw: object) -> SlurmNode:
    """One element of ``nodes`` in ``scontrol show node --json`` (v0.0.42)."""
    if not isinstance(raw, Mapping):
        raise ParseError("node entry is not an object")
    tokens = str_list_field(raw, "state")
    if not tokens:
        raise ParseError("node without a state")
    changed = _number(raw.get("reason_changed_at"), "reason_changed_at")
    user = reason_user_field(raw)
    reason = str_field(raw, "reason")
    # 24.11 names a setter even when there is no reason; the text format does not.
    return SlurmNode(
        name=node_name(raw.get("name")),
        state=cached_state(tokens[0], tuple(tokens[1:])),
        reason=reason,
        reason_user=(user or None) if reason else None,
        reason_time=datetime.fromtimestamp(changed, UTC) if changed and reason else None,
        **json_node_fields(raw, _list_field),
    )


def parse_scontrol_json(text: str) -> list[SlurmNode]:
    """All nodes of ``scontrol show node [NODES] --json`` (24.11)."""
    return json_nodes(text, "scontrol --json", parse_scontrol_json_node)


def _job_states(raw: Mapping[str, Any]) -> list[str]:
    states = str_list_field(raw, "job_state")
    if not states:
        raise ParseError("job without a state")
    return states


def parse_squeue_json_v42(text: str) -> list[SlurmJob]:
    """Jobs of 24.11's ``squeue --json`` (``job_state`` is a list there)."""
    raw_jobs = json_list(text, "jobs", "squeue --json")
    if not all(isinstance(j, Mapping) for j in raw_jobs):
        raise ParseError("squeue --json has no job list")
    return [json_job(j, _job_states) for j in raw_jobs]

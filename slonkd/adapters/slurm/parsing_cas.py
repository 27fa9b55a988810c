"""Pure parser of the compare-and-set read of one node (``sinfo -N -n NODE -O ...``); no I/O.

Before every write slonkd re-reads the nodes it touches. ``scontrol show node NAME`` asks
slurmctld for its whole node table (REQUEST_NODE_INFO) and the partitions, and prints
every field; ``sinfo -n NAME`` asks for that one node (REQUEST_NODE_INFO_SINGLE): at 5,004
nodes slurmctld spent 0.18 ms on it instead of 38 ms in the benchmark. The compare-and-set
decisions need only the state with all its flags, the reason and ``extra``, so that is all
this read prints, one node a line::

    n2|idle+drain|2026-11-30T06:29:15|root|(null)|slonkd:pod-terminating bye

sinfo prints no difference between no reason and a reason of ``none``, and a ``|`` may sit
in both free-text fields. Such a node is not guessed: it is listed in
:attr:`CasRead.unsure`, and so is a node the output does not show (a node in no partition)
or shows twice differently (a node in two partitions); the caller reads those exactly
(``scontrol``). A line that does not parse at all (a reason with a newline) makes the whole
output :class:`AmbiguousOutput`.

Nor does sinfo tell an empty ``extra`` from one of literally ``(null)``. Both decide alike
except when slonkd adds a cause to a node it holds already (it then writes its cause set
into ``extra``, and refuses to overwrite foreign text): such nodes are listed in
:attr:`CasRead.null_extra` for the caller to read exactly before a hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from slonkd.adapters.slurm.parsing import (
    AmbiguousOutput,
    cached_state,
    node_name,
    output_lines,
    utc_time,
)
from slonkd.core.reasons import ReasonOwner, reason_owner
from slonkd.core.slurm_node import NodeName, SlurmNode

CAS_FIELDS = ("NodeList", "StateComplete", "Timestamp", "User", "Extra", "Reason")
CAS_FORMAT = ",".join(f"{f}:0|" for f in CAS_FIELDS[:-1]) + f",{CAS_FIELDS[-1]}:0"
"""``sinfo -O``: width 0 (never padded nor cut), ``|`` between fields, the reason last."""

_HEAD = re.compile(
    r"(?P<name>[^|]+)\|(?P<state>[a-z_]+(?:\+[a-z_]+)*)\|"
    r"(?P<time>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}|Unknown)\|"
    r"(?P<user>[^|]*)\|(?P<rest>.*)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CasRead:
    """Nodes read unambiguously, and the names that must be read exactly instead."""

    nodes: dict[str, SlurmNode] = field(default_factory=dict)
    """Partial nodes: state, reason with its setter and time, and extra; nothing else."""
    unsure: frozenset[str] = frozenset()
    null_extra: frozenset[str] = frozenset()
    """Nodes slonkd holds whose ``extra`` sinfo printed as ``(null)`` (read as empty).

    Only held nodes: 24.11 keeps slonkd's old reason on a resumed node, where it holds
    nothing (``SlurmNode.live_reason``) and a drain writes no extra.
    """


def _line(line: str) -> SlurmNode | NodeName:
    """One node, or its name when the free-text fields cannot be told apart."""
    match = _HEAD.fullmatch(line)
    if match is None:
        raise AmbiguousOutput(f"sinfo line does not parse (newline in a field?): {line[:80]!r}")
    name = node_name(match["name"])
    rest = match["rest"]
    if rest.count("|") != 1:
        return name  # a '|' in extra or reason: the split is not unique
    extra, reason = rest.split("|")
    stamp = match["time"]
    if reason == "none":
        if stamp != "Unknown":
            return name  # a reason of that very text, or a cleared one: read exactly
        reason = ""  # sinfo's word for no reason
    elif stamp == "Unknown" or not reason:
        return name  # a reason without its time: not what SLURM prints, read exactly
    if extra == "(null)":
        extra = ""  # or literally "(null)": see CasRead.null_extra
    base, *flags = match["state"].split("+")
    when = None
    if stamp != "Unknown":
        when = utc_time(datetime.fromisoformat(stamp))  # printed in UTC: see utc_time
    return SlurmNode(
        name=name,
        state=cached_state(base, tuple(flags)),
        reason=reason,
        reason_user=(match["user"] or None) if reason else None,
        reason_time=when if reason else None,
        extra=extra,
    )


def parse_cas_read(text: str, names: Iterable[str]) -> CasRead:
    """The nodes ``names`` from ``sinfo -N -h -n ... -O CAS_FORMAT`` output."""
    lines = output_lines(text, "sinfo")
    wanted = {NodeName(n) for n in names}
    nodes: dict[NodeName, SlurmNode] = {}
    unsure: set[NodeName] = set()
    for line in lines:
        got = _line(line)
        if isinstance(got, str):
            unsure.add(got)
        elif got.name in nodes and nodes[got.name] != got:
            unsure.add(got.name)  # shown twice (two partitions), differently
        else:
            nodes[got.name] = got
    unsure |= wanted - nodes.keys()
    sure: dict[str, SlurmNode] = {k: v for k, v in nodes.items() if k in wanted and k not in unsure}
    return CasRead(
        nodes=sure,
        unsure=frozenset(unsure & wanted),
        null_extra=frozenset(
            k
            for k, v in sure.items()
            if not v.extra and reason_owner(v.live_reason) is ReasonOwner.SLONKD
        ),
    )

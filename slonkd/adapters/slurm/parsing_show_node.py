"""Pure parser of ``scontrol -o show node`` (text, one node a line) into core types; no I/O.

The fast node read, printed alike by 22.05 and 24.11; but free-text fields (``Reason``,
``Comment``, ``Extra``) are printed unquoted at the end of the line, and a reason with a
newline is printed with its ``[user@time]`` suffix in the middle. Whenever the split into
fields is not unique, :class:`~slonkd.adapters.slurm.parsing.AmbiguousOutput` is raised and
the caller reads JSON instead (``sinfo --json``, :mod:`slonkd.adapters.slurm.parsing`;
``scontrol show node --json``, :mod:`slonkd.adapters.slurm.parsing_v42`): a guess could
show a foreign reason as slonkd's.

:class:`NodeLines` keeps the lines of the last full read, so that an unchanged line is not
parsed again (the coordinator's poll reads the whole table every ``poll_s``). The errors,
the size limit and the field readers are those of :mod:`slonkd.adapters.slurm.parsing`; the
backend's reads that run it are in :mod:`slonkd.adapters.slurm.scontrol_reads`.
"""

from __future__ import annotations

import re

from slonkd.adapters.slurm.parsing import (
    AmbiguousOutput,
    cached_state,
    check_size,
    check_unique,
    comma_list,
    int_field,
    node_name,
    utc_time,
)
from slonkd.core.errors import ParseError
from slonkd.core.reasons import split_text_suffix
from slonkd.core.slurm_node import SlurmNode

_FREE_TEXT_KEYS = ("Reason", "Comment", "Extra")
_FREE_MARKER = re.compile(r" (Reason|Comment|Extra)=")
_HEAD_FIELD = re.compile(
    r"(?:^| )(NodeName|State|CPUAlloc|CPUTot|AvailableFeatures|ActiveFeatures|Partitions)=(\S*)"
)
_REQUIRED_HEAD = ("NodeName", "State", "CPUAlloc", "CPUTot")
_TAIL = re.compile(
    r"(?: Reason=(?P<reason>.*?) \[(?P<user>[^\[\]@\s]+)@(?P<time>[0-9T:-]{19}|Unknown)\])?"
    r"(?: Comment=(?P<comment>.*?))?"
    r"(?: Extra=(?P<extra>.*?))?",
    re.DOTALL,
)
_SUFFIX_AT_END = re.compile(r"\[[^\[\]@\s]+@[^\]]*\]\s*$")


def parse_show_node_line(line: str) -> SlurmNode:
    """One line of ``scontrol -o show node``."""
    marker = _FREE_MARKER.search(line)
    head, tail = (line[: marker.start()], line[marker.start() :]) if marker else (line, "")
    fields: dict[str, str] = {}
    for key, value in _HEAD_FIELD.findall(head):
        if key in fields:
            raise AmbiguousOutput(f"field {key} twice in one node line")
        fields[key] = value
    missing = [k for k in _REQUIRED_HEAD if k not in fields]
    if missing or not line.startswith("NodeName="):
        raise ParseError(f"node line without {missing or 'NodeName first'}: {line[:80]!r}")
    match = _TAIL.fullmatch(tail)
    if match is None:
        raise AmbiguousOutput(f"free-text fields of {fields['NodeName']} do not split")
    present = [k for k in _FREE_TEXT_KEYS if match[k.lower()] is not None]
    # A comment holding " Extra=..." on a node without extra cannot be told apart from a real
    # extra. That is safe: slonkd's causes are the extra's plus the reason's own, so a fake
    # extra can only keep a node held longer, never release one or claim a foreign one.
    if len(_FREE_MARKER.findall(tail)) != len(present):
        raise AmbiguousOutput(f"free-text fields of {fields['NodeName']} are ambiguous")
    for key in ("comment", "extra"):
        if match[key] is not None and _SUFFIX_AT_END.search(match[key]):
            raise AmbiguousOutput(f"{key} of {fields['NodeName']} looks like a reason suffix")
    base, *flags = fields["State"].split("+")
    if not base:
        raise ParseError(f"empty state of {fields['NodeName']}")
    reason, user, when = "", None, None
    if match["reason"] is not None:
        stamp = match["time"]
        reason, user, naive = split_text_suffix(f"{match['reason']} [{match['user']}@{stamp}]")
        when = utc_time(naive)
    return SlurmNode(
        name=node_name(fields["NodeName"]),
        state=cached_state(base, tuple(flags)),
        reason=reason,
        reason_user=user,
        reason_time=when,
        comment=match["comment"] or "",
        extra=match["extra"] or "",
        features=comma_list(fields.get("AvailableFeatures", "")),
        active_features=comma_list(fields.get("ActiveFeatures", "")),
        cpus=int_field(fields["CPUTot"], "CPUTot"),
        alloc_cpus=int_field(fields["CPUAlloc"], "CPUAlloc"),
        partitions=comma_list(fields.get("Partitions", "")),
    )


def parse_show_node(text: str, known: NodeLines | None = None) -> list[SlurmNode]:
    """All of ``scontrol -o show node``; a cut-off or ambiguous output raises.

    ``known``: the lines of an earlier read; a line found there unchanged is not parsed
    again, and ``known`` then holds this read's lines (nothing changes when this raises).
    """
    check_size(text)
    if not text.strip():
        return []
    if not text.endswith("\n"):
        raise ParseError("scontrol output does not end with a newline: cut off?")
    lines = [line for line in text.splitlines() if line.strip()]
    last = known.lines if known is not None else {}
    nodes = [last.get(line) or parse_show_node_line(line) for line in lines]
    check_unique(nodes)
    if known is not None:
        known.lines = dict(zip(lines, nodes, strict=True))
    return nodes


class NodeLines:
    """The lines of the last full node read and what they parsed to.

    Between two resyncs most nodes' lines are the same to the byte, and a line's node is a
    function of the line alone: at 5,000 nodes parsing them all again took about 200 ms of
    each pass (issue 21). Holds one read's lines (a few MB at 5,000 nodes).
    """

    def __init__(self) -> None:
        self.lines: dict[str, SlurmNode] = {}

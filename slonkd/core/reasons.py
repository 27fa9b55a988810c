"""SLURM node reasons: slonkd's grammar, who owns a reason, sanitising, causes in ``extra``.

slonkd writes reasons as ``slonkd:<cause>[:<detail>] <text>``. Every other reason is
foreign (an operator's) or SLURM-reported (slurmctld's own, e.g. ``Not responding``): slonkd
never clears those and never overwrites them. When slonkd holds a node for several causes,
the reason shows the highest-priority one and the whole set lives in the node's ``extra``
field as JSON under the key ``slonkd`` (one cause alone lives in the reason only); the drain
is lifted only when that set is empty.

Health causes come from check names and probes (``mount:/home``, ``Xid 79``): every one of
them goes through :func:`cause_detail` on its way into a verdict, a bus payload or a reason,
so what an agent publishes, the coordinator accepts and what slonkd drains for, it lifts.

Pure functions only: this module neither reads nor writes SLURM.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import lru_cache

from slonkd.core.errors import ParseError

SLONKD_PREFIX = "slonkd:"
EXTRA_KEY = "slonkd"
MAX_REASON_CHARS = 200
"""Longest reason slonkd writes; SLURM stores 10 kB, but logs and tables do not want it."""

_CAUSE_NAME = r"[a-z0-9][a-z0-9._-]{0,47}"
_CAUSE_DETAIL = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
SAFE_DETAIL = r"[a-z0-9][a-z0-9._-]{0,47}"
"""A cause detail every reader accepts: a reason's detail, a verdict's cause on the bus (and
a cause name): what :func:`cause_detail` returns."""
_SAFE_DETAIL_RE = re.compile(SAFE_DETAIL)
_UNSAFE_RUN = re.compile(r"[^a-z0-9._-]+")
_MAX_SAFE_DETAIL = 48
_UNNAMED = "unnamed"
_CAUSE_RE = re.compile(rf"(?P<name>{_CAUSE_NAME})(?::(?P<detail>{_CAUSE_DETAIL}))?")
_SUFFIX_RE = re.compile(
    r"^(?P<text>.*) \[(?P<user>[^\[\]@\s]+)@(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown)\]$",
    re.DOTALL,
)

# Reasons slurmctld itself sets when something failed, matched case-insensitively at the
# start of the reason. A reason that merely resembles these is still SLURM's: slonkd only
# uses this to classify, never to clear.
SLURM_REASON_PREFIXES = (
    "not responding",
    "kill task failed",
    "prolog error",
    "epilog error",
    "batch job complete failure",
    "reboot timed out",
    "reboot asap",
    "reboot requested",
    "node unexpectedly rebooted",
    "low realmemory",
    "low socket*core*thread count",
    "low cpus",
    "low tmpdisk",
    "gres/",
    "node configuration differs from hardware",
    "duplicate jobid",
    "job credential",
    "slurmdspooldir is full",
    "launch failed requeued held",
)

# Priority ladder of docs/architecture.md for slonkd's own causes (lower wins). Rungs 1
# (foreign) and 6 (healthy) are not causes slonkd holds a node for.
# A rollout replaces a pod on purpose: pod lifecycle (rung 5), released by the rollout itself.
_PRIORITY_BY_PREFIX = (
    ("slurm-", 2),
    ("health", 3),
    ("revalidating", 3),  # a failure's aftermath: held like one until the checks passed
    ("k8s-", 4),
    ("pod-", 5),
    ("prestop", 5),
    ("rollout", 5),
)
_UNRANKED = 6


class ReasonOwner(StrEnum):
    """Who a node's reason belongs to."""

    NONE = "none"
    SLONKD = "slonkd"
    SLURM = "slurm"
    FOREIGN = "foreign"


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Cause:
    """One reason slonkd holds a node for, e.g. ``health:gpu-xid-79``."""

    name: str
    detail: str = ""

    @classmethod
    def parse(cls, text: str) -> Cause:
        """Parse ``name[:detail]``; :class:`ParseError` when it is not slonkd's grammar."""
        match = _CAUSE_RE.fullmatch(text)
        if match is None:
            raise ParseError(f"not a slonkd cause: {text[:80]!r}")
        return cls(name=match["name"], detail=match["detail"] or "")

    @property
    def priority(self) -> int:
        """Rung on the priority ladder (2 highest ... 6 lowest)."""
        for prefix, rank in _PRIORITY_BY_PREFIX:
            if self.name.startswith(prefix):
                return rank
        return _UNRANKED

    def __str__(self) -> str:
        return f"{self.name}:{self.detail}" if self.detail else self.name


@dataclass(frozen=True, slots=True, kw_only=True)
class Reason:
    """A node reason read back from SLURM and classified."""

    text: str
    owner: ReasonOwner
    cause: Cause | None = None
    """slonkd's cause named in the reason (only when ``owner`` is SLONKD)."""
    message: str = ""


@lru_cache(maxsize=4096)
def parse_reason(text: str) -> Reason:
    """Classify a reason text (without the ``[user@time]`` suffix). Never raises.

    Cached: a pass asks about each node's reason several times, and a fleet holds few
    distinct texts (the result is immutable, the cache bounded).
    """
    stripped = text.strip()
    if not stripped:
        return Reason(text=text, owner=ReasonOwner.NONE)
    if stripped.startswith(SLONKD_PREFIX):
        head, _, message = stripped[len(SLONKD_PREFIX) :].partition(" ")
        match = _CAUSE_RE.fullmatch(head)
        if match is not None:
            cause = Cause(name=match["name"], detail=match["detail"] or "")
            return Reason(text=text, owner=ReasonOwner.SLONKD, cause=cause, message=message)
        # Looks like ours but is not in our grammar: someone else wrote it.
        return Reason(text=text, owner=ReasonOwner.FOREIGN)
    lowered = stripped.lower()
    if lowered.startswith(SLURM_REASON_PREFIXES):
        return Reason(text=text, owner=ReasonOwner.SLURM)
    return Reason(text=text, owner=ReasonOwner.FOREIGN)


def reason_owner(text: str) -> ReasonOwner:
    """Who owns a reason text: nobody, slonkd, SLURM itself, or someone else."""
    return parse_reason(text).owner


def split_text_suffix(raw: str) -> tuple[str, str | None, datetime | None]:
    """Split ``<reason> [<user>@<time>]`` of ``scontrol show node`` into its parts.

    Returns ``(raw, None, None)`` when there is no suffix. The time is naive (the client's
    local time, which slonkd makes UTC) and None when SLURM printed ``Unknown``.
    """
    match = _SUFFIX_RE.match(raw)
    if match is None:
        return raw, None, None
    stamp = match["time"]
    when = None if stamp == "Unknown" else datetime.fromisoformat(stamp)
    return match["text"], match["user"], when


def sanitise_text(text: str, *, limit: int = MAX_REASON_CHARS) -> str:
    """Make free text safe for a SLURM reason or comment.

    Control characters and newlines become spaces (a newline splits SLURM's text output),
    double quotes become single quotes (scontrol strips them), ``=`` becomes ``:`` and
    brackets become parentheses (so text cannot fake a ``Key=`` field or a
    ``[user@time]`` suffix), whitespace collapses, and the result is cut to ``limit``.
    """
    table = {'"': "'", "`": "'", "=": ":", "[": "(", "]": ")", "\\": "/"}
    cleaned = "".join(
        table.get(ch, ch) if ch.isprintable() and not ch.isspace() else " " for ch in text
    )
    collapsed = " ".join(cleaned.split())
    if len(collapsed) > limit:
        collapsed = collapsed[: max(0, limit - 3)].rstrip() + "..."
    return collapsed


def cause_detail(text: str) -> str:
    """Map any text to a cause detail in :data:`SAFE_DETAIL`, deterministically.

    A detail already in the grammar is returned unchanged (``gpu-xid-79``). Otherwise the
    text is lower-cased, every run of other characters becomes ``-`` and the ends are
    trimmed: ``mount:/home`` -> ``mount-home``. Empty results are ``unnamed``; longer than
    48 characters keeps the start and appends 8 hex digits of the text's SHA-256, so two
    long texts stay two causes.
    """
    if _SAFE_DETAIL_RE.fullmatch(text):
        return text
    cleaned = _UNSAFE_RUN.sub("-", text.lower()).strip("-._") or _UNNAMED
    if len(cleaned) > _MAX_SAFE_DETAIL:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        cleaned = f"{cleaned[: _MAX_SAFE_DETAIL - 9].rstrip('-._')}-{digest}"
    return cleaned


def format_reason(cause: Cause, text: str = "", *, limit: int = MAX_REASON_CHARS) -> str:
    """slonkd's reason for ``cause``: ``slonkd:<cause> <text>``, sanitised and bounded."""
    head = f"{SLONKD_PREFIX}{cause}"
    room = limit - len(head) - 1
    body = sanitise_text(text, limit=room) if room > 3 else ""
    return f"{head} {body}" if body else head


def highest(causes: frozenset[Cause]) -> Cause:
    """The cause the reason shows: the highest rung of the ladder, ties by name."""
    if not causes:
        raise ValueError("no causes")
    return min(causes, key=lambda c: (c.priority, str(c)))


def decode_causes(extra: str) -> frozenset[Cause]:
    """slonkd's cause set from a node's ``extra``; empty when slonkd wrote none.

    :class:`ParseError` when ``extra`` carries a ``slonkd`` key that is not a list of
    causes (someone tampered with it: better to refuse than to guess).
    """
    doc = _extra_object(extra)
    if doc is None or EXTRA_KEY not in doc:
        return frozenset()
    value = doc[EXTRA_KEY]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ParseError(f"extra[{EXTRA_KEY!r}] is not a list of causes: {extra[:120]!r}")
    return frozenset(Cause.parse(v) for v in value)


def encode_causes(extra: str, causes: frozenset[Cause]) -> str:
    """``extra`` with slonkd's cause set replaced (removed when empty); other keys kept.

    :class:`ParseError` when ``extra`` holds text that is not a JSON object: slonkd will not
    overwrite what someone else wrote there.
    """
    doc = _extra_object(extra)
    if doc is None:
        if extra.strip():
            raise ParseError(f"extra holds foreign text, not overwriting: {extra[:120]!r}")
        doc = {}
    if causes:
        doc[EXTRA_KEY] = sorted(str(c) for c in causes)
    else:
        doc.pop(EXTRA_KEY, None)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True) if doc else ""


def _extra_object(extra: str) -> dict[str, object] | None:
    if not extra.strip():
        return None
    try:
        doc = json.loads(extra)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None

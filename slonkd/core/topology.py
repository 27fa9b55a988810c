"""Render SLURM's ``topology.conf`` from node labels, for ``topology/tree`` and ``topology/block``.

Input: each SLURM node's name and the Kubernetes labels of the node its pod runs on.
Output: the file's text and a content hash (the coordinator writes both into the ConfigMap
it owns, and waits until slurmctld's copy carries the hash before ``scontrol reconfigure``).

- tree: the configured label keys, top to bottom (e.g. zone > spine > leaf), name the
  switches on a node's path; the last level's switch lists the nodes, each upper switch its
  child switches, and one root switch joins all top-level switches so the fabric is fully
  connected (SLURM requires every node under a switch).
- block: one label (e.g. the NVLink domain) names each node's block, one line per block,
  and an explicit ``BlockSizes`` line. SLURM 24.11's slurmctld exits (``fatal``) at start or
  ``scontrol reconfigure`` when a block has fewer nodes than the base block size (the first
  ``BlockSizes`` value; without that line, the node count of the first block listed), when a
  block name repeats, or when ``BlockSizes`` are not the base times powers of two. So: with
  configured sizes, the base is the smallest of them and a block with fewer nodes is left out
  of the file (its nodes are in no block; listed in :attr:`Rendered.left_out`); with none,
  the base is the smallest block's node count, with SLURM's default levels (1, 2, 4, 8, 16
  base blocks) above it. :func:`check_block` re-checks a file against 24.11's rules; a
  rendering that fails it, or that leaves no block, raises :class:`UnsafeTopology`.

Nodes missing a label go to the documented default: leaf switch / block ``unlabelled``
(under the root for a tree). Switch and block names are derived from label values but
sanitised to ``[A-Za-z0-9-]`` joined by ``_`` (a value with anything else, ``.`` and ``_``
included, gets a hash suffix, so no two label paths share a name): no label value can
break the file. Output is deterministic. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import hostlist

from slonkd.core.errors import ParseError, SlonkdError

UNLABELLED: Final = "unlabelled"
ROOT_SWITCH: Final = "root"
_SAFE_RE: Final = re.compile(r"[^A-Za-z0-9-]")
"""Characters a label value keeps in a name; ``_`` is not one of them: it joins the parts."""
_NODE_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
MAX_LINE_NODES: Final = 4096
"""Nodes per line before a switch is split across lines (SLURM merges them; never blocks:
24.11 refuses a repeated ``BlockName``, and takes a block's nodes on one long line)."""
MAX_BLOCK_LEVEL: Final = 15
"""Largest ``BlockSizes`` value 24.11 accepts: the base times ``2**15``."""
DEFAULT_BLOCK_LEVELS: Final = 5
"""Without configured sizes: base, 2, 4, 8 and 16 base blocks (SLURM's own default levels)."""


class UnsafeTopology(SlonkdError):
    """A rendering slurmctld would refuse or die on: it must not be published."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologySpec:
    """Which plugin to render for, and which labels carry the topology."""

    plugin: str = "tree"
    """``tree`` or ``block``."""
    tree_keys: Sequence[str] = ("topology.kubernetes.io/zone", "slonk.dev/spine", "slonk.dev/leaf")
    block_key: str = "slonk.dev/nvlink-domain"
    block_sizes: Sequence[int] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Rendered:
    """The file and its content hash."""

    text: str
    sha256: str
    left_out: tuple[tuple[str, int], ...] = ()
    """Blocks too small for the base block size, left out of the file: ``(name, nodes)``."""


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:8]


def _clean(value: str) -> str:
    """A label value as a name part: itself if safe, else its safe part plus a hash."""
    cleaned = _SAFE_RE.sub("-", value)[:24]
    return cleaned if cleaned == value else f"{cleaned}-{_digest(value)}"


def _name(prefix: str, parts: Sequence[str]) -> str:
    """A switch or block name from label values; long names keep a hash of the whole path."""
    joined = prefix + "_".join(_clean(p) for p in parts)
    if len(joined) <= 60:
        return joined
    return f"{joined[:50]}-{_digest(chr(0).join(parts))}"


def _nodes(names: Iterable[str]) -> str:
    return str(hostlist.collect_hostlist(sorted(names)))


def _check_nodes(labels_by_node: Mapping[str, Mapping[str, str]]) -> None:
    for node in labels_by_node:
        if not _NODE_RE.fullmatch(node):
            raise ParseError(f"not a SLURM node name: {node[:80]!r}")


def _lines(
    keyword: str, name: str, members_kw: str, members: Sequence[str], group: bool
) -> list[str]:
    out = []
    for i in range(0, len(members), MAX_LINE_NODES):
        chunk = members[i : i + MAX_LINE_NODES]
        listed = _nodes(chunk) if group else ",".join(chunk)
        out.append(f"{keyword}={name} {members_kw}={listed}")
    return out


def render_tree(labels_by_node: Mapping[str, Mapping[str, str]], keys: Sequence[str]) -> str:
    """``topology/tree`` text: one line per switch, a root joining the top level."""
    _check_nodes(labels_by_node)
    if not keys:
        raise ValueError("a tree needs at least one label key")
    leaf_nodes: dict[str, list[str]] = defaultdict(list)
    children: dict[str, set[str]] = defaultdict(set)
    top: set[str] = set()
    for node, labels in labels_by_node.items():
        values = [labels.get(k, "") for k in keys]
        if not all(values):
            leaf_nodes[f"sw-{UNLABELLED}"].append(node)
            top.add(f"sw-{UNLABELLED}")
            continue
        path = [_name(f"l{depth}-", values[: depth + 1]) for depth in range(len(keys))]
        leaf_nodes[path[-1]].append(node)
        top.add(path[0])
        for parent, child in itertools.pairwise(path):
            children[parent].add(child)
    lines = ["# rendered by slonkd from node labels: " + " > ".join(keys)]
    for switch in sorted(leaf_nodes):
        lines += _lines("SwitchName", switch, "Nodes", sorted(leaf_nodes[switch]), group=True)
    for switch in sorted(children):
        lines.append(f"SwitchName={switch} Switches={','.join(sorted(children[switch]))}")
    if len(top) > 1:
        lines.append(f"SwitchName=sw-{ROOT_SWITCH} Switches={','.join(sorted(top))}")
    return "\n".join(lines) + "\n"


def block_sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """Configured ``BlockSizes``, sorted; ValueError unless 24.11 accepts them.

    24.11 takes the first value as the base block size and needs every other to be the base
    times a power of two, at most ``2**15``: anything else is ``fatal: Invalid BlockSizes``.
    """
    if any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in sizes):
        raise ValueError("block sizes must be positive integers")
    ordered = tuple(sorted(set(sizes)))
    if ordered:
        base = ordered[0]
        for size in ordered[1:]:
            ratio = size // base
            if size % base or ratio & (ratio - 1) or ratio > 1 << MAX_BLOCK_LEVEL:
                raise ValueError(
                    f"block sizes must be the smallest ({base}) times a power of two up to "
                    f"2**{MAX_BLOCK_LEVEL}, not {size}: slurmctld 24.11 exits on such BlockSizes"
                )
    return ordered


def _block_groups(
    labels_by_node: Mapping[str, Mapping[str, str]], key: str
) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = defaultdict(list)
    for node, labels in labels_by_node.items():
        value = labels.get(key, "")
        blocks[_name("b-", [value]) if value else f"b-{UNLABELLED}"].append(node)
    return blocks


def _render_block(
    labels_by_node: Mapping[str, Mapping[str, str]], key: str, sizes: Sequence[int]
) -> tuple[str, tuple[tuple[str, int], ...]]:
    _check_nodes(labels_by_node)
    configured = block_sizes(sizes)
    blocks = _block_groups(labels_by_node, key)
    if not blocks:
        raise UnsafeTopology("no SLURM nodes to place in blocks: 24.11 needs at least one block")
    if configured:
        levels = configured
    else:
        smallest = min(len(nodes) for nodes in blocks.values())
        levels = tuple(smallest << level for level in range(DEFAULT_BLOCK_LEVELS))
    base = levels[0]
    left_out = tuple((b, len(blocks[b])) for b in sorted(blocks) if len(blocks[b]) < base)
    kept = [b for b in sorted(blocks) if len(blocks[b]) >= base]
    if not kept:
        raise UnsafeTopology(
            f"every block has fewer nodes than the base block size {base} "
            f"(largest has {max(len(n) for n in blocks.values())}): nothing 24.11 accepts"
        )
    lines = [f"# rendered by slonkd from node label {key}"]
    if left_out:
        listed = ", ".join(f"{b} ({n})" for b, n in left_out)
        lines.append(f"# left out, fewer nodes than the base block size {base}: {listed}")
    lines += [f"BlockName={b} Nodes={_nodes(blocks[b])}" for b in kept]
    lines.append("BlockSizes=" + ",".join(str(s) for s in levels))
    text = "\n".join(lines) + "\n"
    problems = check_block(text, known=labels_by_node.keys())
    if problems:  # a renderer bug: never hand slurmctld a file it dies on
        raise UnsafeTopology("rendered block topology fails 24.11's rules: " + "; ".join(problems))
    return text, left_out


def render_block(
    labels_by_node: Mapping[str, Mapping[str, str]], key: str, sizes: Sequence[int] = ()
) -> str:
    """``topology/block`` text: one block per label value, unlabelled nodes in their own.

    Blocks with fewer nodes than the base block size are left out (see the module doc);
    :class:`UnsafeTopology` if none is left, ValueError for sizes 24.11 refuses.
    """
    return _render_block(labels_by_node, key, sizes)[0]


def _block_line_fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


def check_block(text: str, known: Iterable[str] | None = None) -> list[str]:
    """Why slurmctld 24.11 would exit on this ``topology/block`` file (empty: it would not).

    Mirrors 24.11's block_record.c: ``BlockSizes`` (at most one line) are positive, the first
    is the base and the others the base times a power of two up to ``2**15``; without it the
    base is the node count of the first block listed. Every block has a unique name, a node
    list, and at least the base count of nodes (only nodes in ``known``, the nodes slurmctld
    has, count; None: all). At least one block. Keys are case-insensitive, as in SLURM.
    """
    known_set = None if known is None else set(known)
    problems: list[str] = []
    sizes_lines: list[str] = []
    blocks: list[tuple[str, str | None]] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = {k.lower(): v for k, v in _block_line_fields(line).items()}
        if "blocksizes" in fields:
            sizes_lines.append(fields["blocksizes"])
        elif "blockname" in fields:
            blocks.append((fields["blockname"], fields.get("nodes")))
        else:
            problems.append(f"not a block line: {line[:80]!r}")
    base = 0
    if len(sizes_lines) > 1:
        problems.append("more than one BlockSizes line")
    elif sizes_lines:
        values = sizes_lines[0].split(",")
        if not all(v.isdigit() and int(v) > 0 for v in values):
            problems.append(f"BlockSizes not all positive integers: {sizes_lines[0][:80]!r}")
        else:
            base = int(values[0])
            for v in values[1:]:
                ratio = int(v) // base
                if int(v) % base or ratio & (ratio - 1) or ratio > 1 << MAX_BLOCK_LEVEL:
                    problems.append(f"BlockSizes value {v} is not {base} times a power of two")
    if not blocks:
        problems.append("no blocks")
    seen: set[str] = set()
    for name, nodes in blocks:
        if name in seen:
            problems.append(f"block {name} defined twice")
        seen.add(name)
        if not nodes:
            problems.append(f"block {name} has no nodes")
            continue
        try:
            members = set(hostlist.expand_hostlist(nodes))
        except hostlist.BadHostlist:
            problems.append(f"block {name} has a bad node list")
            continue
        count = len(members if known_set is None else members & known_set)
        if not base:
            base = count
        elif count < base:
            problems.append(
                f"block {name} has {count} nodes, fewer than the base block size {base}"
            )
    if blocks and not base:
        problems.append("blocks contain no nodes")
    return problems


def render(labels_by_node: Mapping[str, Mapping[str, str]], spec: TopologySpec) -> Rendered:
    """Render for ``spec.plugin`` and hash the result."""
    left_out: tuple[tuple[str, int], ...] = ()
    if spec.plugin == "tree":
        text = render_tree(labels_by_node, spec.tree_keys)
    elif spec.plugin == "block":
        text, left_out = _render_block(labels_by_node, spec.block_key, spec.block_sizes)
    else:
        raise ValueError(f"unknown topology plugin {spec.plugin!r} (tree or block)")
    return Rendered(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), left_out=left_out)


def check(text: str, plugin: str, known: Iterable[str] | None = None) -> list[str]:
    """Why slurmctld would refuse or die on ``text`` for ``plugin`` (only ``block`` is checked)."""
    return check_block(text, known) if plugin == "block" else []


def leaf_membership(text: str) -> dict[str, str]:
    """``{node: switch or block}`` for the lowest level of a topology text.

    Reads both a rendered ``topology.conf`` and ``scontrol show topology`` output (which
    adds ``Level=`` and lists every node under upper switches too: only switches without
    child switches, or blocks, count). Comparing the two shows drift between the labels
    and what slurmctld runs.
    """
    members: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        name = fields.get("SwitchName") or fields.get("BlockName")
        if not name or "Switches" in fields or "Nodes" not in fields:
            continue
        try:
            nodes = hostlist.expand_hostlist(fields["Nodes"])
        except hostlist.BadHostlist as exc:
            raise ParseError(f"bad node list in topology line {line[:120]!r}") from exc
        for node in nodes:
            members[node] = name
    return members


STAMP_PREFIX: Final = "# slonkd-topology-sha256: "
"""First line of the published file: the hash of the rest, so any copy can be checked."""


def stamped(rendered: Rendered) -> str:
    """The file to publish: a stamp line carrying the content hash, then the content."""
    return f"{STAMP_PREFIX}{rendered.sha256}\n{rendered.text}"


def stamped_hash(text: str) -> str | None:
    """The hash a published file carries, or None if it has no stamp or does not match it.

    A copy that is mid-update, edited by hand or truncated reads as None: never as the
    content it claims to be.
    """
    first, sep, rest = text.partition("\n")
    if not sep or not first.startswith(STAMP_PREFIX):
        return None
    claimed = first.removeprefix(STAMP_PREFIX).strip()
    if hashlib.sha256(rest.encode()).hexdigest() != claimed:
        return None
    return claimed


def drift(desired: Mapping[str, str], shown: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``{node: (leaf from labels, leaf slurmctld has)}`` where they differ (``""``: absent)."""
    return {
        node: (desired.get(node, ""), shown.get(node, ""))
        for node in sorted(set(desired) | set(shown))
        if desired.get(node, "") != shown.get(node, "")
    }

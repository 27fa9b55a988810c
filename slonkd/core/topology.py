"""Render SLURM's ``topology.conf`` from node labels, for ``topology/tree`` and ``topology/block``.

Input: each SLURM node's name and the Kubernetes labels of the node its pod runs on.
Output: the file's text and a content hash (the coordinator writes both into the ConfigMap
it owns, and waits until slurmctld's copy carries the hash before ``scontrol reconfigure``).

- tree: the configured label keys, top to bottom (e.g. zone > spine > leaf), name the
  switches on a node's path; the last level's switch lists the nodes, each upper switch its
  child switches, and one root switch joins all top-level switches so the fabric is fully
  connected (SLURM requires every node under a switch).
- block: one label (e.g. the NVLink domain) names each node's block.

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

from slonkd.core.errors import ParseError

UNLABELLED: Final = "unlabelled"
ROOT_SWITCH: Final = "root"
_SAFE_RE: Final = re.compile(r"[^A-Za-z0-9-]")
"""Characters a label value keeps in a name; ``_`` is not one of them: it joins the parts."""
_NODE_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
MAX_LINE_NODES: Final = 4096
"""Nodes per line before a switch or block is split across lines (SLURM merges them)."""


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


def render_block(
    labels_by_node: Mapping[str, Mapping[str, str]], key: str, sizes: Sequence[int] = ()
) -> str:
    """``topology/block`` text: one block per label value, unlabelled nodes in their own."""
    _check_nodes(labels_by_node)
    blocks: dict[str, list[str]] = defaultdict(list)
    for node, labels in labels_by_node.items():
        value = labels.get(key, "")
        blocks[_name("b-", [value]) if value else f"b-{UNLABELLED}"].append(node)
    lines = [f"# rendered by slonkd from node label {key}"]
    for block in sorted(blocks):
        lines += _lines("BlockName", block, "Nodes", sorted(blocks[block]), group=True)
    if sizes:
        if any(s <= 0 for s in sizes):
            raise ValueError("block sizes must be positive")
        lines.append("BlockSizes=" + ",".join(str(s) for s in sorted(set(sizes))))
    return "\n".join(lines) + "\n"


def render(labels_by_node: Mapping[str, Mapping[str, str]], spec: TopologySpec) -> Rendered:
    """Render for ``spec.plugin`` and hash the result."""
    if spec.plugin == "tree":
        text = render_tree(labels_by_node, spec.tree_keys)
    elif spec.plugin == "block":
        text = render_block(labels_by_node, spec.block_key, spec.block_sizes)
    else:
        raise ValueError(f"unknown topology plugin {spec.plugin!r} (tree or block)")
    return Rendered(text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


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

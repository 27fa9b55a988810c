"""SLURM hostlist expressions: many node names in one argument, and argv-sized chunks of them.

``scontrol update nodename=n[1-3,7]`` changes many nodes in one RPC; a command line has a
limit, so :func:`chunk_hostlists` splits the names into as few equal runs as fit. Built on
python-hostlist. Used by :mod:`slonkd.adapters.slurm.scontrol`'s bulk writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import hostlist


def compress(names: Iterable[str]) -> str:
    """A SLURM hostlist expression for ``names`` (``n[1-3,7]``)."""
    return str(hostlist.collect_hostlist(sorted(set(names))))


def chunk_hostlists(names: Sequence[str], max_chars: int) -> list[str]:
    """Compressed hostlists covering ``names``, each at most ``max_chars`` long.

    Splits the sorted names into as few equal runs as fit (a single name longer than the
    limit still gets its own chunk).
    """
    ordered = hostlist.numerically_sorted(sorted(set(names)))
    if not ordered:
        return []
    parts = max(1, -(-len(compress(ordered)) // max(1, max_chars)))
    while True:
        size = -(-len(ordered) // parts)
        chunks = [compress(ordered[i : i + size]) for i in range(0, len(ordered), size)]
        if size == 1 or all(len(c) <= max_chars for c in chunks):
            return chunks
        parts += max(1, parts // 4)

"""The cyclic collector and what a term keeps: loaded once, then never scanned again.

CPython's cyclic collector scans every tracked object on a full collection, and it runs one
each time the objects made since the last one grow by a quarter of those that survived: while
a process loads what it then keeps for a long time (a leader's lists of every K8s node and
pod), it collects again and again, each time over all of it. At 5,000 nodes a leader's lists
took eleven full collections, 1.5 s of a 4 s start, and a full collection that fell into a
pass added 100-500 ms to it. :func:`loading` holds the collector off while a bulk load runs
(``max_s`` at most: a load that hangs does not keep it off), then moves all that lives out of
every later collection's scan (:func:`gc.freeze`); :func:`release` hands it back.

Frozen objects are still freed the usual way when their last reference goes (a pod replaced
by a watch event); only a cycle among them waits for :func:`release`, as does a cycle that was
garbage when they were frozen (a full collection first would cost what the load saved).

Neighbours: :mod:`slonkd.runtime.coordinating.term` (a term's lists are a bulk load, its end
the release).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def loading(max_s: float) -> Iterator[None]:
    """The collector off during a bulk load (``max_s`` at most), then all that lives frozen."""
    if not gc.isenabled():  # someone else holds it off: theirs to restore
        yield
        return
    gc.disable()
    deadline = asyncio.get_running_loop().call_later(max_s, gc.enable)
    try:
        yield
    finally:
        deadline.cancel()
        gc.freeze()
        gc.enable()


def release() -> None:
    """Everything frozen goes back to the collector (:func:`gc.unfreeze`)."""
    gc.unfreeze()


__all__ = ["loading", "release"]

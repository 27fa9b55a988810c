"""A bulk load with the collector off, what it made frozen (:mod:`slonkd.runtime.kit.heap`).

Neighbour: ``test_term.py``'s test of a term's lists (the load this serves).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from slonkd.runtime.kit import heap


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen and the collector on."""
    heap.release()
    gc.enable()
    yield
    heap.release()
    gc.enable()


def _tracked(obj: object) -> bool:
    """Whether a collection scans ``obj``: frozen objects are in no generation.

    A list is always tracked, a dict of ints never: the tests make lists.
    """
    return any(o is obj for o in gc.get_objects())


async def test_a_load_runs_with_the_collector_off_and_what_it_made_is_frozen() -> None:
    """Off inside, on after; what lives then is out of every scan until the release."""
    with heap.loading(max_s=60):
        assert not gc.isenabled()
        made = [[i] for i in range(100)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(made)
    assert not _tracked(made)
    assert not _tracked(made[50])
    heap.release()
    assert gc.get_freeze_count() == 0
    assert _tracked(made)


async def test_the_collector_comes_back_on_by_itself_after_max_s() -> None:
    """A load that hangs (the apiserver away) does not keep the collector off for good."""
    with heap.loading(max_s=0.05):
        assert not gc.isenabled()
        await asyncio.sleep(0.2)
        assert gc.isenabled()
    assert gc.isenabled()


async def test_a_load_inside_someone_elses_hold_changes_nothing() -> None:
    """The collector already off: left off, nothing frozen."""
    gc.disable()
    with heap.loading(max_s=60):
        made = [1]
    assert not gc.isenabled()  # still theirs
    assert gc.get_freeze_count() == 0
    assert _tracked(made)


async def test_a_load_that_fails_still_turns_the_collector_back_on() -> None:
    """The lists fail (the term ends): the collector is on again."""
    with pytest.raises(RuntimeError), heap.loading(max_s=60):
        raise RuntimeError("the lists failed")
    assert gc.isenabled()

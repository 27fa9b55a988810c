"""The term's waves (:mod:`slonkd.runtime.coordinating.term`) and the loop that starts them.

Issue 38 item 1: ``leading.py`` reached into 24 of the coordinator's attributes to start the
term's tasks. Now a :class:`~slonkd.runtime.coordinating.term.Term` lists them in their waves
and :func:`~slonkd.runtime.coordinating.leading.lead` starts the waves knowing no part.
Neighbours: ``test_coordinator_term_start`` (writers only after the claim, over ``lead``),
``test_coordinator_term_end`` (how a term ends).
"""

from __future__ import annotations

import ast
import asyncio
import gc
import inspect
import textwrap

from slonkd.core.plan import Plan
from slonkd.runtime.coordinating import leading
from slonkd.runtime.coordinating.term import Term
from slonkd.runtime.kit import heap
from tests.unit.coordinator_fakes import TOKEN, FakeNodeWriter, FakeSlurm, coordinator_with


def _touched(function: object, name: str) -> set[str]:
    """The attributes read off the variable ``name`` in ``function``'s source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == name
    }


def test_the_loop_that_leads_a_term_knows_no_part_of_the_coordinator() -> None:
    """``lead`` reads the settings (its identity, for the log) and nothing else of ``c``."""
    assert _touched(leading.lead, "c") == {"s"}
    assert _touched(leading._lead, "c") == set()
    assert _touched(leading._lead, "term") == {
        "claim", "loading", "reads", "read_ahead", "writers", "synced", "after_sync", "passes",
    }  # fmt: skip


async def test_the_waves_list_reads_writers_and_the_rest_apart() -> None:
    """Only reads beside the claim; every writer of the settings in the second wave."""
    c = coordinator_with(FakeSlurm([], set()), FakeNodeWriter(), [])
    term = Term(c, TOKEN)
    waves = [term.reads(), term.writers(), term.after_sync()]
    try:
        names = [[job.__qualname__ for job in wave] for wave in waves]  # type: ignore[attr-defined]
        assert names[0] == ["Informer.run", "Informer.run"], names  # no bus in these settings
        assert "TriggerKeeper.run" in names[1], names
        assert not set(names[0]) & (set(names[1]) | set(names[2])), names
        assert "Memory.watch" in names[2], names
    finally:
        for wave in waves:
            for job in wave:
                job.close()  # never started


async def test_the_fast_path_runs_once_per_wake_before_the_pass() -> None:
    """Issue 38 item 3: a wake runs the marks-only pass once, then the whole pass.

    It ran twice per wake (the loop's wake hook, then again at the start of the pass), and
    ran before the term's first pass too, which has no read to patch.
    """
    c = coordinator_with(FakeSlurm([], set()), FakeNodeWriter(), [])
    marks: list[str] = []
    real = c.fast_path

    class Counted:
        async def mark(self, *args: object) -> None:
            marks.append(f"marks before pass {c.passes + 1}")
            await real.mark(*args)  # the old mark took the last read and its time

    c.fast_path = Counted()  # type: ignore[assignment]
    passed = asyncio.Event()
    reconcile = c.reconcile_all

    async def counted_pass() -> list[Plan]:
        plans = await reconcile()
        passed.set()
        return plans

    c.reconcile_all = counted_pass  # type: ignore[method-assign]
    task = asyncio.create_task(Term(c, TOKEN).passes())
    try:
        await asyncio.wait_for(passed.wait(), 5)  # the term's first pass
        passed.clear()
        c.observer.dirty.set()  # a change: one wake
        await asyncio.wait_for(passed.wait(), 5)
    finally:
        task.cancel()
    assert marks == ["marks before pass 2"], marks


async def test_a_terms_lists_are_scanned_by_no_collection_until_the_term_ends() -> None:
    """What the lists load stays out of the collector's scans for the term, then goes back.

    At 5,000 nodes a leader's lists took eleven full collections (1.5 s of a 4 s start), each
    over all that was listed so far, and one that fell into the first pass added up to half a
    second to it (the issue-38 comparison's decide phase).
    """
    c = coordinator_with(FakeSlurm([], set()), FakeNodeWriter(), [])
    listed: list[object] = []
    during: dict[str, bool] = {}

    async def lists() -> None:
        during["collector_on"] = gc.isenabled()
        listed.append([{"metadata": {"name": "w-0"}}])  # what a list makes, kept all term
        c.nodes.synced.set()
        c.pods.synced.set()
        await asyncio.Event().wait()

    async def watching() -> None:
        await asyncio.Event().wait()

    c.nodes.run = lists  # type: ignore[method-assign]
    c.pods.run = watching  # type: ignore[method-assign]
    passed = asyncio.Event()

    async def first_pass() -> list[Plan]:
        during["frozen_at_pass"] = not any(o is listed[0] for o in gc.get_objects())
        during["collector_on_at_pass"] = gc.isenabled()
        passed.set()
        await asyncio.Event().wait()
        return []

    c.reconcile_all = first_pass  # type: ignore[method-assign]
    term = asyncio.create_task(leading.lead(c, TOKEN))
    try:
        await asyncio.wait_for(passed.wait(), 5)
    finally:
        term.cancel()
        await asyncio.gather(term, return_exceptions=True)
    try:
        assert during == {
            "collector_on": False, "frozen_at_pass": True, "collector_on_at_pass": True,
        }, during  # fmt: skip
        assert gc.get_freeze_count() == 0  # the term's end handed it back
        assert any(o is listed[0] for o in gc.get_objects())
    finally:
        heap.release()

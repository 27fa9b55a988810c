"""The path of a SLURM failure to its K8s marks, module by module (issue 38 item 3).

docs/architecture.md lists the modules a SLURM failure goes through, from the poll that sees
it to the marks on its K8s node, as a numbered list. This test drives one failure through
the term's own tasks (the SLURM poll and the loop of passes, as :mod:`.term` starts them) on
fakes at the two ports (the SLURM backend and the K8s writers), records every module of
slonkd's runtime and adapters the failure enters, and checks the list: each module entered
once, in that order. A module is entered when a function of it is called from another
module; a coroutine resumed after an ``await`` is not entered again. A callback from a later
module into an earlier one (the fast path calling back into the coordinator, as it did)
enters that module a second time and fails here. ``core`` is left out: pure functions the
parts call, not parts.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from slonkd.runtime.coordinating.term import Term
from tests.unit.coordinator_fakes import (
    TOKEN,
    FakeNodeWriter,
    FakeSlurm,
    coordinator_with,
    kube_node,
    slurm_node,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
PARTS = ("slonkd.runtime.", "slonkd.adapters.")


def _documented() -> list[str]:
    """The modules of the numbered list under the doc's "path of a SLURM failure" heading."""
    text = DOC.read_text()
    section = text[text.index("### The path of a SLURM failure") :]
    section = section[: section.index("\n#", 1)]
    modules = []
    for line in section.splitlines():
        number, dot, rest = line.partition(". ")
        if dot and number.isdigit():
            modules.append(rest.split("`")[1])
    return modules


class Recorder:
    """The parts' modules a failure enters, in order, and who enters each, until it is done."""

    def __init__(self) -> None:
        self.order: list[str] = []
        """Each module of the parts as first entered."""
        self.callers: dict[str, set[str]] = {}
        """Per module, the modules of the parts that called into it."""
        self.done = False
        self._frames: list[FrameType] = []  # kept alive, so that ids stay unique
        self._seen: set[int] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        """The profile hook: every call, return and resumption of a coroutine."""
        if self.done or event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(PARTS):
            return
        if id(frame) in self._seen:
            return  # a coroutine resumed after an await: entered already
        self._frames.append(frame)
        self._seen.add(id(frame))
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if caller == module:
            return
        if caller.startswith(PARTS):
            self.callers.setdefault(module, set()).add(caller)
        elif module in self.order:
            return  # a task of a module already entered (a gather), not an entry
        if module not in self.order:
            self.order.append(module)

    def back_and_forth(self) -> list[str]:
        """Modules entered from more than one module, or from one after them on the path."""
        found = []
        for module, callers in self.callers.items():
            later = [c for c in callers if self.order.index(c) > self.order.index(module)]
            if len(callers) > 1 or later:
                found.append(f"{module} <- {sorted(callers)}")
        return found


async def test_a_slurm_failure_enters_each_module_of_its_documented_path_once_in_order() -> None:
    """One failure from the poll to its K8s node's marks: the documented list, nothing else."""
    slurm = FakeSlurm([slurm_node(0), slurm_node(1)], failing=set())
    writer = FakeNodeWriter()
    c = coordinator_with(  # the scontrol poll: no libslurm child in a unit test
        slurm, writer, [kube_node(0), kube_node(1)], poll_s=0.05, change_poll=False
    )
    assert c.watch is not None
    assert c.watch.backend == "scontrol"
    recorder = Recorder()
    fast_path = c.fast_path

    class Done:  # the term's wake hook, and the recording's end
        async def mark(self, *args: Any) -> None:
            await fast_path.mark(*args)
            if writer.calls:
                recorder.done = True

    c.fast_path = Done()  # type: ignore[assignment]
    term = Term(c, TOKEN)
    passes = asyncio.create_task(term.passes())
    try:
        async with asyncio.timeout(5):  # the term's first pass: the read the fast path patches
            while c.passes < 1:  # noqa: ASYNC110 (a counter, not an event)
                await asyncio.sleep(0.01)
        poll = asyncio.create_task(c.watch.run())
        await asyncio.sleep(0.1)  # the poll has its baseline (the pass's table)
        sys.setprofile(recorder)
        try:
            slurm.nodes[1] = slurm_node(1, "IDLE+FAIL", "Kill task failed")
            async with asyncio.timeout(5):
                while not recorder.done:  # noqa: ASYNC110 (set inside the profiled code)
                    await asyncio.sleep(0.005)
        finally:
            sys.setprofile(None)
        poll.cancel()
    finally:
        passes.cancel()
    assert ("cordon", "kn-1") in writer.calls, writer.calls
    assert recorder.back_and_forth() == [], recorder.back_and_forth()
    assert recorder.order == _documented(), "\n".join(recorder.order)

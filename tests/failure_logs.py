"""What a failed test's daemons logged: the tails of their logs, in the report and on file.

A pytest plugin (loaded by ``tests/conftest.py`` beside :mod:`tests.timing`). When a test
fails, the slonkd daemons started while it ran (:data:`slonkd_sandbox.daemon.STARTS`) and
those still running then get the last lines of their logs added to the failure report. When
``SLONKD_TEST_FAILURES`` names a folder (``scripts/test`` sets ``.test-results/failures``),
the same text goes there too, one file per failed test phase: ``scripts/test`` prints those
at its very end, because CI keeps only the end of the output, and a failure that happened
once on CI must say what the coordinator was doing. Works the same in an xdist worker.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.daemon import STARTS, Daemon
from slonkd_sandbox.procs import tail

FAILURES_ENV = "SLONKD_TEST_FAILURES"
TAIL_CHARS = 5000
"""How much of each daemon's log a failure shows."""
MAX_DAEMONS = 4
"""How many daemons a failure shows (the latest started)."""

_first = pytest.StashKey[int]()


def next_start() -> int:
    """The number the next daemon start gets."""
    return STARTS[-1][0] + 1 if STARTS else 1


def daemons_since(first: int, starts: Iterable[tuple[int, Daemon]] = STARTS) -> list[Daemon]:
    """Daemons started as number ``first`` or later, or still running; the latest few."""
    chosen: dict[int, Daemon] = {}
    for number, daemon in starts:
        if number >= first or daemon.running:
            chosen.pop(id(daemon), None)  # a restart counts at its latest start
            chosen[id(daemon)] = daemon
    return list(chosen.values())[-MAX_DAEMONS:]


def describe(daemons: Iterable[Daemon]) -> str:
    """Each daemon's role, state and log path, then its log's tail."""
    parts = []
    for daemon in daemons:
        state = "running" if daemon.running else (daemon.exited() or "exited").split(";")[0]
        parts.append(
            f"--- slonkd {daemon.role} ({state}): {daemon.log}\n{tail(daemon.log, TAIL_CHARS)}"
        )
    return "\n".join(parts)


def file_name(nodeid: str, when: str) -> str:
    """A file name for one failed phase of a test."""
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', nodeid)[:150]}.{when}.txt"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, Any, None]:
    """Remember which daemon starts belong to this test."""
    item.stash[_first] = next_start()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """A failed phase: the daemons' log tails in the report (and in the failures folder)."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed:
        return
    daemons = daemons_since(item.stash.get(_first, next_start()))
    if not daemons:
        return
    text = describe(daemons)
    report.sections.append(("slonkd daemon logs", text))
    folder = os.environ.get(FAILURES_ENV)
    if folder:
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        crash = getattr(report.longrepr, "reprcrash", None)
        why = getattr(crash, "message", None) or str(report.longrepr).splitlines()[-1]
        header = f"{item.nodeid} ({report.when}): {why.splitlines()[0][:500]}\n"
        (path / file_name(item.nodeid, report.when)).write_text(header + text)

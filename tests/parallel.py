"""How the suite's tests are shared out between pytest-xdist workers.

``scripts/test`` runs pytest with ``-n``: each worker has its own services (the harness makes
ports, directories, namespaces and node names unique), so only two things are decided
here, both from a test's node id (the controller that hands out work sees no marks):

- :func:`group_of`: the work unit a test belongs to. Every test of the real node (the
  modules of :data:`REAL_MODULES`, exactly the tests marked ``real``) is one unit, so one
  real node at a time runs on the machine (the kubelet's device-plugin socket is a fixed
  host path); every other contract and e2e module is a unit, so its module-scoped fixtures
  (fleets, installs) are built once; unit tests go one by one wherever a worker is free.
- :func:`rank`: units are handed out in collection order (xdist's own reordering by test
  count is turned off), so the workers sort their collections the same way: longest unit
  first, by the seconds :data:`DURATIONS` measured (``python -m tests.timing_report
  --durations-out tests/durations.json``), so that no worker is left alone with a long unit
  at the end. A module not measured yet counts :data:`UNMEASURED_S` of its tier.

And one thing from a test's marks, on the workers: a test marked ``alone`` (its assertion is
about timing that a busy machine stretches, e.g. how many passes a burst spreads over) runs
while no other worker runs a test (:func:`turn`: the others hold a shared lock per test, it
an exclusive one, and a gate lets it in ahead of tests that arrive after it). Its own
worker's earlier module-scoped services keep running meanwhile; other workers wait.

Loaded by ``tests/conftest.py``. pytest-xdist's own ``--dist loadgroup`` is not used: with
pytest 9 its renaming of node ids has no effect and every test ran alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

REAL = "real"
ALONE = "alone"
REAL_MODULES = frozenset(
    {
        "tests/contract/test_image.py",
        "tests/contract/test_realnode.py",
        "tests/e2e/test_chart_accounting_real.py",
        "tests/e2e/test_chart_metrics_real.py",
        "tests/e2e/test_chart_real.py",
        "tests/e2e/test_sandbox_real.py",
    }
)
"""The modules marked ``real`` (checked at collection: the mark and this list agree)."""
DURATIONS = Path(__file__).with_name("durations.json")
"""Seconds per test module, as a full run measured them (what :func:`rank` sorts by)."""
UNMEASURED_S = {"tests/e2e/": 60.0, "tests/contract/": 20.0}
"""What a module missing from :data:`DURATIONS` counts, by tier (a unit test module: 1 s)."""


def group_of(nodeid: str) -> str | None:
    """The work unit of the test ``nodeid``; None: a unit of its own."""
    module = nodeid.split("::", 1)[0]
    if module in REAL_MODULES:
        return REAL
    if module.startswith(("tests/contract/", "tests/e2e/")):
        return module
    return None


@functools.cache
def measured(path: Path = DURATIONS) -> Mapping[str, float]:
    """The seconds per module in ``path``; {} when it is missing or unreadable (defaults)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
    }


def expected_s(module: str, durations: Mapping[str, float]) -> float:
    """The seconds a module is expected to take."""
    if module in durations:
        return durations[module]
    tier = next((t for t in UNMEASURED_S if module.startswith(t)), None)
    return UNMEASURED_S[tier] if tier is not None else 1.0


def rank(nodeid: str, durations: Mapping[str, float] | None = None) -> tuple[float, str]:
    """Sort key of a test in every worker's collection: longest unit first.

    A unit's expected seconds (the real node's unit counts all its modules); the tests of a
    unit stay together, in collection order (the sort is stable).
    """
    known = measured() if durations is None else durations
    module = nodeid.split("::", 1)[0]
    group = group_of(nodeid) or module
    modules = sorted(REAL_MODULES) if group == REAL else [module]
    return (-sum(expected_s(m, known) for m in modules), group)


class GroupedScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist: untyped
    """xdist's scope scheduling with :func:`group_of` as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid) or nodeid


def check_marks(items: list[pytest.Item]) -> None:
    """Fail the collection where the ``real`` mark and :data:`REAL_MODULES` disagree."""
    wrong = sorted(
        {
            item.nodeid.split("::", 1)[0]
            for item in items
            if bool(item.get_closest_marker(REAL)) != (group_of(item.nodeid) == REAL)
        }
    )
    if wrong:
        raise pytest.UsageError(
            f"the `real` mark and tests.parallel.REAL_MODULES disagree on: {', '.join(wrong)}"
        )


def make_scheduler(config: pytest.Config, log: Any) -> GroupedScheduling:
    """The scheduler for ``pytest_xdist_make_scheduler``: units in :func:`rank`'s order."""
    config.option.loadscopereorder = False  # xdist's reorder is by test count, not by time
    return GroupedScheduling(config, log)


@contextlib.contextmanager
def turn(lock_dir: Path, *, alone: bool) -> Iterator[None]:
    """Hold the run's test lock: shared for a test, exclusive for one that runs ``alone``.

    Taking it passes through ``gate`` (held exclusively only while waiting), so a test
    waiting to run alone is not starved by the shared holders that keep arriving.
    """
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / "gate").open("a+") as gate, (lock_dir / "tests").open("a+") as held:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(held, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


TURNS_ENV = "SLONKD_TEST_TURNS"
"""The directory of the run's test lock: made by the controller, inherited by its workers."""


def make_lock_dir(config: pytest.Config) -> Path | None:
    """In an xdist controller, make the run's lock directory and name it to the workers."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return None
    where = Path(tempfile.mkdtemp(prefix="slonkd-test-turns-"))
    os.environ[TURNS_ENV] = str(where)
    return where


def lock_dir(config: pytest.Config) -> Path | None:
    """The run's lock directory, in an xdist worker; None elsewhere (nothing to share)."""
    if not hasattr(config, "workerinput"):
        return None
    where = os.environ.get(TURNS_ENV)
    return Path(where) if where else None

"""Where the suite's time goes: each test's setup, call and teardown, and its slow fixtures.

A pytest plugin (loaded by ``tests/conftest.py``) that adds JUnit XML properties to every
test case: ``setup_s``, ``call_s`` and ``teardown_s`` (pytest's JUnit writer reports only
their sum), and ``fixture:NAME[scope]`` for each fixture whose set-up took at least
:data:`FIXTURE_FLOOR_S` while that test was being set up (a module- or session-scoped fixture
is charged to the first test that asked for it). ``scripts/test`` always writes the XML;
``tests/timing_report.py`` turns it into the tables of ``docs/testing.md``. Works the same
under pytest-xdist: the properties travel with the reports to the controller.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import pytest

FIXTURE_FLOOR_S = 0.05
_fixture_times = pytest.StashKey[dict[str, float]]()
_current: list[pytest.Item] = []


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, None]:
    """Mark ``item`` as the test whose set-up the fixtures below are charged to."""
    item.stash[_fixture_times] = {}
    _current.append(item)
    try:
        yield
    finally:
        _current.pop()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, None]:
    """Time one fixture's set-up; charge it to the test being set up, if it was slow."""
    start = time.monotonic()
    yield
    took = time.monotonic() - start
    if took >= FIXTURE_FLOOR_S and _current:
        key = f"fixture:{fixturedef.argname}[{fixturedef.scope}]"
        times = _current[-1].stash[_fixture_times]
        times[key] = times.get(key, 0.0) + took


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """Add the phase's duration (and, after set-up, the slow fixtures) to the test's properties."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    prop = (f"{report.when}_s", f"{report.duration:.3f}")
    item.user_properties.append(prop)
    if report.when == "setup":
        for key, took in item.stash.get(_fixture_times, {}).items():
            item.user_properties.append((key, f"{took:.3f}"))
    elif report.when == "teardown":
        # the teardown report was made from the properties as they were before this phase
        report.user_properties.append(prop)

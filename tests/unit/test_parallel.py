"""tests.parallel: which tests share a worker, in which order they go out, the real mark."""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests import parallel

pytest_plugins = ["pytester"]


def test_the_real_node_modules_are_one_unit_and_other_service_modules_one_each() -> None:
    """Every real module's tests share one unit; a contract or e2e module is its own unit."""
    assert {parallel.group_of(f"{m}::test_x") for m in parallel.REAL_MODULES} == {"real"}
    assert (
        parallel.group_of("tests/e2e/test_rollout.py::test_a[22.05]") == "tests/e2e/test_rollout.py"
    )
    assert (
        parallel.group_of("tests/contract/test_bus.py::T::test_b") == "tests/contract/test_bus.py"
    )
    assert parallel.group_of("tests/unit/test_decide.py::test_c") is None


def test_units_go_out_longest_first_by_their_measured_seconds() -> None:
    """The longest units first, so no worker is left alone with one at the end.

    The real node's unit counts all its modules; a module not measured counts its tier's
    default; a unit's tests stay together.
    """
    durations = {
        "tests/e2e/test_chart_real.py": 250.0,
        "tests/e2e/test_sandbox_real.py": 280.0,
        "tests/e2e/test_soak.py": 320.0,
        "tests/unit/test_settings_cli.py": 140.0,
        "tests/contract/test_bus.py": 4.0,
    }
    ids = [
        "tests/unit/test_decide.py::test_c",  # unmeasured unit module: 1 s
        "tests/contract/test_bus.py::test_b",
        "tests/e2e/test_rollout.py::test_a",  # unmeasured e2e module: 60 s
        "tests/e2e/test_chart_real.py::test_r",
        "tests/unit/test_settings_cli.py::test_s",
        "tests/e2e/test_soak.py::test_one",
        "tests/e2e/test_sandbox_real.py::test_up",
        "tests/e2e/test_soak.py::test_two",
    ]
    ordered = sorted(ids, key=lambda i: parallel.rank(i, durations))
    assert ordered == [ids[3], ids[6], ids[5], ids[7], ids[4], ids[2], ids[1], ids[0]]
    # the real unit: two measured modules, two unmeasured e2e ones (60 s), two contract ones
    # (20 s)
    assert parallel.rank(ids[3], durations)[0] == -(250 + 280 + 60 + 60 + 20 + 20)


def test_the_measured_seconds_are_read_from_the_file_and_bad_ones_left_out(tmp_path: Path) -> None:
    """A missing or unreadable file is no error (the defaults order the units); bad values drop."""
    path = tmp_path / "durations.json"
    assert parallel.measured(path) == {}
    path.write_text("{not json")
    assert parallel.measured.__wrapped__(path) == {}
    path.write_text('{"a.py": 3.5, "b.py": -1, "c.py": true, "d.py": "9", "e.py": 2}')
    assert parallel.measured.__wrapped__(path) == {"a.py": 3.5, "e.py": 2.0}
    assert set(parallel.measured()) >= parallel.REAL_MODULES  # the committed file


def test_the_scheduler_splits_scopes_by_group() -> None:
    """The xdist scheduler's scope of a test is its group, or its own id."""
    split = parallel.GroupedScheduling.__new__(parallel.GroupedScheduling)._split_scope
    assert split("tests/e2e/test_sandbox_real.py::test_up") == "real"
    assert split("tests/unit/test_decide.py::test_c") == "tests/unit/test_decide.py::test_c"


def test_a_real_mark_outside_the_real_modules_fails_the_collection(
    pytester: pytest.Pytester,
) -> None:
    """The mark and REAL_MODULES must agree: a test marked real elsewhere is a usage error."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\nmarkers = real: x\n")
    pytester.makeconftest(
        textwrap.dedent(
            """
            from tests import parallel

            def pytest_collection_modifyitems(items):
                parallel.check_marks(items)
            """
        )
    )
    pytester.makepyfile(
        test_elsewhere=textwrap.dedent(
            """
            import pytest

            @pytest.mark.real
            def test_on_the_node():
                pass
            """
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*`real` mark and tests.parallel.REAL_MODULES disagree*"])


def test_a_test_alone_waits_for_the_running_ones_and_goes_before_later_ones(
    tmp_path: Path,
) -> None:
    """Shared holders run together; ``alone`` waits for them, and a later one waits for it."""
    order: list[str] = []
    a_in, a_go = threading.Event(), threading.Event()

    def shared(name: str, entered: threading.Event | None, go: threading.Event | None) -> None:
        with parallel.turn(tmp_path, alone=False):
            order.append(f"{name} in")
            if entered:
                entered.set()
            if go:
                go.wait(10)
            order.append(f"{name} out")

    def alone() -> None:
        with parallel.turn(tmp_path, alone=True):
            order.append("alone in")
            time.sleep(0.2)
            order.append("alone out")

    first = threading.Thread(target=shared, args=("a", a_in, a_go))
    first.start()
    assert a_in.wait(10)
    lone = threading.Thread(target=alone)
    lone.start()
    time.sleep(0.2)  # it waits at the lock, holding the gate
    later = threading.Thread(target=shared, args=("b", None, None))
    later.start()
    time.sleep(0.2)
    assert order == ["a in"]  # neither the alone one nor the later one got in
    a_go.set()
    for t in (first, lone, later):
        t.join(10)
    assert order == ["a in", "a out", "alone in", "alone out", "b in", "b out"]


def test_the_scheduler_keeps_the_collections_order(pytester: pytest.Pytester) -> None:
    """xdist's own reorder (by test count) is off: the units go out in rank's order."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    config = pytester.parseconfigure("-n", "2", "-p", "xdist")
    assert config.option.loadscopereorder is True  # xdist's default
    config.option.tx = ["popen", "popen"]  # what -n 2 expands to when a run starts
    scheduler = parallel.make_scheduler(config, log=None)
    assert isinstance(scheduler, parallel.GroupedScheduling)
    assert config.option.loadscopereorder is False

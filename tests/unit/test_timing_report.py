"""tests.timing records each test's phases and slow fixtures; tests.timing_report tables them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests import timing_report

pytest_plugins = ["pytester"]

XML = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" time="30.5" tests="3">
<testcase classname="tests.e2e.test_a" name="test_one" time="20.0">
  <properties>
    <property name="setup_s" value="15.0"/><property name="fixture:fleet[module]" value="14.5"/>
    <property name="call_s" value="4.0"/><property name="teardown_s" value="1.0"/>
  </properties>
</testcase>
<testcase classname="tests.e2e.test_a.TestGroup" name="test_two" time="6.0">
  <properties>
    <property name="setup_s" value="1.0"/><property name="call_s" value="5.0"/>
    <property name="teardown_s" value="0.0"/><property name="fixture:slurm[function]" value="0.9"/>
  </properties>
  <failure message="boom">boom</failure>
</testcase>
<testcase classname="tests.unit.test_b" name="test_three" time="0.5"><skipped/></testcase>
</testsuite></testsuites>
"""


def test_the_report_groups_by_tier_module_and_fixture(tmp_path: Path) -> None:
    """Cases are read with their outcome and phases, summed by tier and module, costliest first."""
    xml = tmp_path / "junit.xml"
    xml.write_text(XML)
    run = timing_report.read(xml)
    assert run.wall_s == 30.5
    assert [c.module for c in run.cases] == ["tests.e2e.test_a"] * 2 + ["tests.unit.test_b"]
    assert [c.outcome for c in run.cases] == ["passed", "failed", "skipped"]
    out = timing_report.report(run, top=5)
    assert "3 tests (1 failed, 1 passed, 1 skipped); test time 26 s; wall time 30 s" in out
    assert "| e2e | 2 | 26 | 16 | 9 | 1 |" in out
    assert "| tests.e2e.test_a | 2 | 26 | 16 | 9 | 1 |" in out
    assert "| fleet[module] | 1 | 14 | 14.50 |" in out
    # the costliest first
    assert out.index("fleet[module]") < out.index("slurm[function]")


def test_an_unreadable_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that is not XML: one line naming it on stderr, exit 2."""
    (tmp_path / "bad.xml").write_text("<testsuite")
    assert timing_report.main([str(tmp_path / "bad.xml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "bad.xml" in err


def test_the_plugin_writes_phases_and_slow_fixtures_to_the_junit_xml(
    pytester: pytest.Pytester,
) -> None:
    """A real pytest run with the plugin: phases per test, a module fixture charged once."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        textwrap.dedent(
            """
            import time
            import pytest

            @pytest.fixture(scope="module")
            def slow():
                time.sleep(0.2)
                yield
                time.sleep(0.1)

            @pytest.fixture
            def quick():
                return 1

            def test_one(slow, quick):
                time.sleep(0.1)

            def test_two(slow):
                pass
            """
        )
    )
    result = pytester.runpytest(
        "-p", "tests.timing", "--junitxml=out.xml", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
    cases = {c.name: c for c in timing_report.read(pytester.path / "out.xml").cases}
    one, two = cases["test_one"], cases["test_two"]
    assert set(one.phases) == {"setup_s", "call_s", "teardown_s"}
    assert one.phases["setup_s"] >= 0.2
    assert one.phases["call_s"] >= 0.1
    assert list(one.fixtures) == ["slow[module]"]  # quick is under the floor
    assert one.fixtures["slow[module]"] >= 0.2
    assert two.fixtures == {}  # a module fixture is charged to the first test only
    assert two.phases["teardown_s"] >= 0.1  # the module's teardown runs after the last test


def test_the_phases_xml_files_are_read_as_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scripts/test's two phases: cases together, wall times added."""
    (tmp_path / "a.xml").write_text(XML)
    (tmp_path / "b.xml").write_text(XML)
    assert timing_report.main([str(tmp_path / "a.xml"), str(tmp_path / "b.xml")]) == 0
    assert "6 tests (2 failed, 2 passed, 2 skipped); test time 53 s; wall time 61 s" in (
        capsys.readouterr().out
    )


def test_the_seconds_per_module_for_the_schedulers_order(tmp_path: Path) -> None:
    """--durations-out: each module's path and its cases' seconds, longest first."""
    (tmp_path / "a.xml").write_text(XML)
    out = tmp_path / "durations.json"
    assert timing_report.main([str(tmp_path / "a.xml"), "--durations-out", str(out)]) == 0
    assert out.read_text().startswith('{\n "tests/e2e/test_a.py": 26.0,')
    assert timing_report.durations(timing_report.read(tmp_path / "a.xml")) == {
        "tests/e2e/test_a.py": 26.0,
        "tests/unit/test_b.py": 0.5,
    }

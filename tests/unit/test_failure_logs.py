"""tests.failure_logs: a failed test shows the logs of the daemons it started, on file too."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from slonkd_sandbox.daemon import Daemon
from tests import failure_logs

pytest_plugins = ["pytester"]

TESTS = """
    import os
    from pathlib import Path

    from slonkd_sandbox.daemon import Daemon

    def usage(tmp_path: Path, name: str) -> Daemon:
        # a short-lived process in the daemon's place: its usage text is its whole log
        d = Daemon(role="--help", module="json.tool", env=dict(os.environ), log=tmp_path / name)
        d.start()
        assert d.proc is not None
        d.proc.wait(timeout=30)
        return d

    def test_passes(tmp_path):
        usage(tmp_path, "passing.log")

    def test_earlier_one_exits(tmp_path):
        usage(tmp_path, "earlier.log")

    def test_fails(tmp_path):
        usage(tmp_path, "failing.log")
        assert False, "the coordinator did not act"
"""


def test_a_failure_shows_the_log_of_the_daemon_it_started_and_files_it(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the failed test's daemon is shown (the earlier one exited); passes write nothing."""
    folder = tmp_path / "failures"
    monkeypatch.setenv(failure_logs.FAILURES_ENV, str(folder))
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_daemons=textwrap.dedent(TESTS))
    result = pytester.runpytest("-p", "tests.failure_logs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "slonkd daemon logs" in out
    assert "failing.log" in out
    assert "usage:" in out  # the daemon's own words
    assert "earlier.log" not in out
    assert "passing.log" not in out
    written = sorted(p.name for p in folder.iterdir())
    assert written == ["test_daemons.py_test_fails.call.txt"]
    text = (folder / written[0]).read_text()
    assert text.startswith("test_daemons.py::test_fails (call): ")
    assert "the coordinator did not act" in text.splitlines()[0]
    assert "failing.log" in text
    assert "usage:" in text


def test_a_running_daemon_counts_and_a_restart_counts_once(tmp_path: Path) -> None:
    """Started before the test but still running: shown; the latest few, each once."""
    old = Daemon(role="agent", env={}, log=tmp_path / "old.log")
    new = Daemon(role="coordinator", env={}, log=tmp_path / "new.log")
    starts = [(1, old), (2, new), (3, old)]
    assert failure_logs.daemons_since(3, starts) == [old]
    assert failure_logs.daemons_since(2, starts) == [new, old]
    assert failure_logs.daemons_since(4, starts) == []  # none running, none started since
    assert failure_logs.file_name("tests/e2e/test_a.py::test_b[x y]", "setup") == (
        "tests_e2e_test_a.py_test_b_x_y_.setup.txt"
    )

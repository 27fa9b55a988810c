"""The chart installed once for a module of real-node tests, or the module fails with why.

:func:`reported` serves ``test_chart_real.py`` and ``test_chart_accounting_real.py``: each
module's fixture enters :func:`slonkd_sandbox.chart.release.install` through it, so both print
the install's timings under their own tag and turn a harness error (a pod that never got
Ready, with its diagnosis) into a test failure rather than an error in setup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from slonkd_sandbox.chart.release import Release
from slonkd_sandbox.procs import HarnessError


@contextlib.contextmanager
def reported(tag: str, installing: contextlib.AbstractContextManager[Release]) -> Iterator[Release]:
    """Enter ``installing``, print its timings as ``[tag] timings: ...``; HarnessError fails."""
    try:
        with installing as release:
            timings = {k: round(v, 1) for k, v in release.timings.items()}
            print(f"\n[{tag}] timings: {timings}")
            yield release
    except HarnessError as exc:
        pytest.fail(str(exc))

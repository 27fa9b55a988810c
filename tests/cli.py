"""``slonkd`` run as a user runs it: a child ``python -m slonkd.cli.main`` whose output is kept.

Shared by the tests that drive the command line: the sandbox tests (through
``tests/e2e/sandbox_cli.py``), the coordinator and agent e2e tests, the chart's contract and
e2e tests, the unit tests of the config tree and the contract test of ``slonkd check``
(``tests/contract/test_health_probes.py``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping


def slonkd(
    *argv: str, timeout_s: float = 60.0, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``slonkd ARGV`` (with ``env`` if given, else this process's); never raises on exit.

    Its stdout and stderr are kept, text, for the test's assertions and their messages.
    """
    return subprocess.run(
        [sys.executable, "-m", "slonkd.cli.main", *argv],
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )

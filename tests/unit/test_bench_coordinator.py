"""bench/coordinator.py's measurements of the harness: slurmctld's busy time, process-tree CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.coordinator import _cpu_s, client_busy_us, registrations, tree_cpu_s

SDIAG = """\
Remote Procedure Call statistics by message type
\tREQUEST_NODE_INFO                       ( 2007) count:12     ave_time:345    total_time:4140
\tREQUEST_PARTITION_INFO                  ( 2009) count:12     ave_time:50     total_time:600
\tREQUEST_STATS_INFO                      ( 2035) count:2      ave_time:100    total_time:200
\tMESSAGE_NODE_REGISTRATION_STATUS        ( 1002) count:3      ave_time:10     total_time:30

Remote Procedure Call statistics by user
\troot            (       0) count:26     ave_time:190    total_time:4940
"""


def test_client_busy_time_sums_the_requests_but_sdiags_own() -> None:
    """REQUEST_* totals by message type, sdiag's own request left out, the per-user part too."""
    assert client_busy_us(SDIAG) == 4140 + 600


def test_registrations_are_counted_apart_from_client_requests() -> None:
    """A ping round's registrations are the harness's work: counted alone, 0 when absent."""
    assert registrations(SDIAG) == 3
    assert registrations(SDIAG.replace("MESSAGE_NODE_REGISTRATION_STATUS", "MESSAGE_OTHER")) == 0


def test_tree_cpu_counts_the_children_too() -> None:
    """A busy child's CPU is counted under its parent; a gone pid is nothing."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass",
        ]
    )
    try:
        time.sleep(0.5)
        mine = _cpu_s(os.getpid())
        assert tree_cpu_s([os.getpid()]) >= mine + 0.2
    finally:
        child.wait(timeout=10)
    assert tree_cpu_s([2**22 + 7]) == 0.0

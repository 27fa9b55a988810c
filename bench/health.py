"""Cost of the health checks: one `slonkd check` run, an agent-like loop, a hung mount.

- ``check_run_s``: wall time of one ``slonkd check -o json`` process with the default checks
  plus a mount and a slurmd-port check (median of 5), next to ``python -c pass`` as the floor.
- ``agent_with_checks_rss_mb``: max RSS of a process running :class:`HealthLoop` over the
  same checks at a 0.2 s period for 10 s.
- ``hung_mount_unknown_s``: time for the mount check of a path that blocks (a FIFO without a
  writer) to answer ``unknown`` with a 1 s deadline.

Prints a table, then one JSON object as the last line. Not part of CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slonkd.adapters.health.checks import HealthSettings, build_checks
from slonkd.adapters.health.probes import ProbeGuard

LOOP_SCRIPT = """
import asyncio, resource, sys
from slonkd.adapters.health.checks import HealthSettings, build_checks
from slonkd.adapters.health.probes import ProbeGuard
from slonkd.core.health import Hysteresis
from slonkd.runtime.health_loop import HealthLoop
async def main():
    s = HealthSettings(disk_paths=("/",), mounts=("/proc",), slurmd_port=1, fast_period_s=0.2,
                       slow_period_s=0.2, expected_gpus=8)
    async def on_change(r):
        pass
    checks = build_checks(s, ProbeGuard())
    loop = HealthLoop(checks=checks, policy=Hysteresis(), on_change=on_change)
    try:
        async with asyncio.timeout(10):
            await loop.run()
    except TimeoutError:
        pass
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
asyncio.run(main())
"""


def _time(argv: list[str]) -> float:
    began = time.monotonic()
    subprocess.run(argv, capture_output=True, check=False, timeout=120)
    return time.monotonic() - began


async def _hung(path: str) -> float:
    settings = HealthSettings(disk_paths=(), mounts=(path,), mount_timeout_s=1.0)
    (check,) = build_checks(settings, ProbeGuard())
    began = time.monotonic()
    result = await check.run()
    if result.verdict.value != "unknown":
        raise RuntimeError(f"a hung mount must be unknown, got {result}")
    return time.monotonic() - began


def main() -> int:
    """Measure and print."""
    check = [
        sys.executable,
        "-m",
        "slonkd.cli.main",
        "check",
        "-o",
        "json",
        "--mount",
        "/proc",
        "--slurmd-port",
        "1",
        "--expected-gpus",
        "8",
    ]
    runs = [_time(check) for _ in range(5)]
    floor = [_time([sys.executable, "-c", "pass"]) for _ in range(5)]
    loop = subprocess.run(
        [sys.executable, "-c", LOOP_SCRIPT], capture_output=True, text=True, check=True, timeout=60
    )
    rss_mb = int(loop.stdout.strip().splitlines()[-1]) / 1024
    fifo = Path(tempfile.mkdtemp()) / "hung"
    os.mkfifo(fifo)
    hung = asyncio.run(_hung(str(fifo)))
    result = {
        "check_run_s": round(statistics.median(runs), 3),
        "python_start_s": round(statistics.median(floor), 3),
        "agent_with_checks_rss_mb": round(rss_mb, 1),
        "hung_mount_unknown_s": round(hung, 3),
        "bench_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    for key, value in result.items():
        print(f"{key:<28}{value:>10}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

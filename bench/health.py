"""Cost of the health checks: one `slonkd check` run, an agent-like loop, a hung mount.

- ``check_run_s``: wall time of one ``slonkd check -o json`` process with the default checks
  plus a mount and a slurmd-port check (median of 5), next to ``python -c pass`` as the floor.
- ``agent_with_checks_rss_mb``: max RSS of a process running :class:`HealthLoop` over the
  same checks at a 0.2 s period for 10 s.
- ``hung_mount_unknown_s``: time for the mount check of a path that blocks (a FIFO without a
  writer) to answer ``unknown`` with a 1 s deadline.
- ``gpu_parse_ms``: CPU time to judge one 8-GPU dcgmi diag document, NVLink listing (status
  and counters, 144 links) and ``nvidia-smi -q`` fabric output (the hand-written fixtures of
  tests/data/health; median of 200). Without a GPU here the GPU tools themselves are missing,
  so the process timings above include their checks only as "not installed".

Prints a table, then one JSON object as the last line. Not part of CI.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import print_result
from slonkd.adapters.health.checks import build_checks
from slonkd.adapters.health.probes import ProbeGuard
from slonkd.adapters.health.settings import HealthSettings
from slonkd.core import dcgm_health, nvlink_health

LOOP_SCRIPT = """
import asyncio, resource, sys
from slonkd.adapters.health.checks import build_checks
from slonkd.adapters.health.probes import ProbeGuard
from slonkd.adapters.health.settings import HealthSettings
from slonkd.core.health import Hysteresis
from slonkd.runtime.agent.health_loop import HealthLoop
async def main():
    s = HealthSettings(disk_paths=("/",), mounts=("/proc",), slurmd_port=1, fast_period_s=0.2,
                       slow_period_s=0.2, heavy_period_s=0.2, expected_gpus=8, nvlink_links=18)
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


def _gpu_parse_ms() -> float:
    data = Path(__file__).parent.parent / "tests" / "data" / "health"
    diag = (data / "dcgmi" / "diag-r1-pass.handwritten.json").read_text()
    status = (data / "nvlink" / "status-h100-18.handwritten.txt").read_text()
    errors = (data / "nvlink" / "errors-h100-clean.handwritten.txt").read_text()
    fabric = (data / "nvidia-smi-q" / "fabric-completed.handwritten.txt").read_text()
    limits = nvlink_health.NvlinkThresholds(expected_links=18)
    before = nvlink_health.parse_nvlink_errors(errors)
    times = []
    for _ in range(200):
        began = time.perf_counter()
        results = [
            dcgm_health.judge_dcgm_diag(diag, "", 0),
            nvlink_health.judge_nvlink_run(status, errors, before, limits, expected_gpus=8)[0],
            nvlink_health.judge_fabric(fabric, required=True, expected_gpus=8),
        ]
        times.append(time.perf_counter() - began)
        if any(r.verdict.value != "ok" for r in results):
            raise RuntimeError(f"healthy fixtures must pass: {results}")
    return statistics.median(times) * 1000


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
        "--nvlink-links",
        "18",
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
        "gpu_parse_ms": round(_gpu_parse_ms(), 3),
        "bench_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print_result(result, 28, 10)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""slurmctld's cost of one "node table changed since T?" ask, by release and table size.

``python -m bench.slurm_ask [SIZES] [--seconds S]`` (not in CI): for SLURM 22.05 (the host's)
and 24.11 (the cached root's) and for each size of slurmd-less declared nodes (default
``0,5000``, on :data:`~slonkd_sandbox.slurm.cluster.QUIET_SLURMD_TIMEOUT_S`), a child process loads
that release's libslurm (:mod:`slonkd.adapters.slurm.libslurm`; on 24.11 on the root's
loader, :meth:`~slonkd_sandbox.slurm.chroot.ChrootSlurmCluster.libslurm_argv`) and asks
five times a second, as the coordinator's change poll does, for ``S`` seconds (30); sdiag
gives slurmctld's time on those REQUEST_NODE_INFO. Keys ``ask_us_<release>_n<size>`` (µs per
ask) and ``ask_busy_ms_per_s_<release>_n<size>`` (slurmctld ms per second at 5 Hz), and how
many asks were answered "changed".

Why it exists: the answer "no change" is not free. slurmctld takes its node lock and brings
its select plugin's per-node data up to date before it compares the times, so the ask costs
in proportion to the table; this bench shows by how much on both releases. Neighbours:
bench/coordinator.py (the whole coordinator's cost at rest: ``change_poll_slurmctld_busy_*``).

Prints a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.coordinator import _print, cluster_of, node_info_of, wait_registered
from slonkd_sandbox.slurm.chroot import CHILD_PREFIX_ENV, ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import QUIET_SLURMD_TIMEOUT_S, SlurmLayout

PERIOD_S = 0.2
"""The coordinator's change poll period (``change_poll_s``)."""


async def _ask(seconds: float) -> dict[str, int]:
    """The child: load libslurm and ask every PERIOD_S for ``seconds``, after one first ask."""
    from slonkd.adapters.slurm import libslurm_child

    prefix = os.environ.get(CHILD_PREFIX_ENV)
    if prefix:
        libslurm_child.CHILD_PREFIX = tuple(json.loads(prefix))
    lib = libslurm_child.load()
    if lib is None:
        raise SystemExit("libslurm did not load")
    since = (await lib.changed_since(0)).last_update
    print("ready", flush=True)
    sys.stdin.readline()  # the parent reset sdiag
    asks = changed = 0
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        stamp = await lib.changed_since(since)
        asks += 1
        if stamp.changed:
            changed += 1
            since = stamp.last_update
        await asyncio.sleep(PERIOD_S)
    return {"asks": asks, "changed": changed}


def measure(release: str, size: int, seconds: float) -> dict[str, float]:
    """One cluster of ``release`` with ``size`` declared nodes; the child's asks, priced."""
    layout = SlurmLayout(nodes=("n1",), extra_nodes=size, slurmd_timeout_s=QUIET_SLURMD_TIMEOUT_S)
    root = Path(tempfile.mkdtemp(prefix="slonkd-bench-ask-")) / "slurm"
    cluster = cluster_of(root, layout, release)
    cluster.start()
    try:
        wait_registered(cluster, size)
        argv = [sys.executable, "-m", "bench.slurm_ask", "--child", str(seconds)]
        env = {**os.environ, "SLURM_CONF": str(cluster.conf)}
        if isinstance(cluster, ChrootSlurmCluster):
            argv, env = cluster.libslurm_argv(argv, env)
        child = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        if child.stdin is None or child.stdout is None:
            raise SystemExit("no pipes to the asking child")
        for line in child.stdout:  # whatever it logs first, then "ready"
            if line.strip() == "ready":
                break
        else:
            raise SystemExit(f"{release}: the asking child ended before it asked")
        cluster.run("sdiag", "--reset")
        child.stdin.write("go\n")
        child.stdin.flush()
        done = json.loads(child.stdout.readlines()[-1])
        child.wait(timeout=30)
        count, total_us = node_info_of(cluster.run("sdiag").stdout)
        tag = f"{release.replace('.', '')}_n{size}"
        return {
            f"ask_us_{tag}": total_us / max(1, count),
            f"ask_busy_ms_per_s_{tag}": total_us / 1000 / seconds,
            f"asks_{tag}": float(done["asks"]),
            f"asks_changed_{tag}": float(done["changed"]),
        }
    finally:
        cluster.stop()


def main() -> int:
    """Both releases, each size; the table and the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m bench.slurm_ask")
    parser.add_argument("sizes", nargs="?", default="0,5000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(asyncio.run(_ask(args.child))), flush=True)
        return 0
    results: dict[str, float] = {}
    for release in ("22.05", "24.11"):
        for size in (int(s) for s in args.sizes.split(",") if s):
            results.update(measure(release, size, args.seconds))
    _print(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

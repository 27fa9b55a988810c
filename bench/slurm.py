"""SLURM adapter benchmark against real 22.05 daemons (not part of CI; prints, never asserts).

For 4, 1,004 and 5,004 declared nodes (4 with slurmd, the rest without; 50 drained by an
operator): read-all, the reasons-only read, a single compare-and-set drain and a bulk drain
+ resume of 1,000 random nodes, each next to the raw ``scontrol``/``sinfo`` call measured in
the same run (the physical floor), with the number of client invocations per operation and
what each read costs slurmctld (``sdiag`` RPC statistics). Prints a table, then one JSON
object as the last line. The reasons read is timed interleaved with raw ``sinfo -R`` (load
from elsewhere hits both alike); the running-job count (``squeue``) is timed with an empty
job table, so its cost here is the RPC floor.

    .venv/bin/python -m bench.slurm [--quick] [24.11]

The pyslurm backend (issue 39) on the same cluster in the same run, where the bootstrap built
pyslurm for the release (``slonkd_sandbox.pyslurm_build``): its whole read, its one-node read,
a compare-and-set drain (read + ``Node.modify`` through its child) and the bulk drain and
resume of 1,000, beside the scontrol backend's (``pyslurm_*`` keys; ``cas_drain_ms`` is the
scontrol backend's compare-and-set drain of one node). Without a build those keys are absent
and a line says why.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.parsing_cas import CAS_FORMAT
from slonkd.adapters.slurm.parsing_jobs import SQUEUE_JOBS_ARGS
from slonkd.adapters.slurm.pyslurm_writes import PyslurmBackend
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import Cause
from slonkd_sandbox.pyslurm_build import pyslurm_site, pyslurm_status
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster, cluster_of_release
from slonkd_sandbox.slurm.cluster import SCALE_SLURMD_TIMEOUT_S, SlurmCluster, SlurmLayout

CAUSE = Cause.parse("k8s-cordoned")
REASONS_ARGV = ("sinfo", "-R", "-h", "-o", "%N|%T|%H|%U|%E")
CAS_ONE_ARGV = ("sinfo", "--all", "--Node", "--noheader", "--nodes=n1", f"--Format={CAS_FORMAT}")
_SDIAG = re.compile(r"^\s*(REQUEST_\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)", re.M)


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"median_ms": statistics.median(ordered) * 1000, "p99_ms": p99 * 1000}


def _prefix(cluster: SlurmCluster) -> tuple[str, ...]:
    return cluster.client_prefix if isinstance(cluster, ChrootSlurmCluster) else ()


def _raw(cluster: SlurmCluster, reps: int, *argv: str) -> list[float]:
    times = []
    full = [*_prefix(cluster), *argv]
    for _ in range(reps):
        began = time.perf_counter()
        subprocess.run(full, env=cluster.env, capture_output=True, check=True, timeout=60)
        times.append(time.perf_counter() - began)
    return times


async def _timed(reps: int, op: Callable[[], Awaitable[object]]) -> list[float]:
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        await op()
        times.append(time.perf_counter() - began)
    return times


def _sdiag(cluster: SlurmCluster, argv: list[str], reps: int) -> dict[str, float]:
    """slurmctld's own RPC time (microseconds, average) for the RPCs ``argv`` sends."""
    cluster.run("sdiag", "--reset")
    _raw(cluster, reps, *argv)
    out = cluster.run("sdiag").stdout
    return {
        name: float(ave)
        for name, count, ave in _SDIAG.findall(out)
        if int(count) >= reps and name != "REQUEST_STATS_INFO"
    }


async def _measure(size: int, reps: int, release: str) -> dict[str, Any]:
    layout = SlurmLayout(
        nodes=("n1", "n2", "n3", "n4"), extra_nodes=size, slurmd_timeout_s=SCALE_SLURMD_TIMEOUT_S
    )
    with cluster_of_release(release, layout, "slonkd-bench-slurm-") as cluster:
        rng = random.Random(size)  # noqa: S311 - seeded choice of benchmark nodes
        extra = cluster.extra_node_names
        if extra:
            ops = rng.sample(extra, min(50, len(extra)))
            cluster.run(
                "scontrol", "update", f"nodename={','.join(ops)}", "state=drain", "reason=ops"
            )
        backend = ScontrolBackend(
            SlurmSettings(
                argv_prefix=_prefix(cluster),
                env={} if _prefix(cluster) else {"SLURM_CONF": str(cluster.conf)},
                retry_wait_min_s=0,
                retry_wait_max_s=0,
            )
        )
        r: dict[str, Any] = {"nodes": size + 4}
        r["raw_update"] = _stats(
            _raw(cluster, reps, "scontrol", "update", "nodename=n1", "comment=bench")
        )
        r["raw_show_node"] = _stats(_raw(cluster, reps, "scontrol", "-o", "show", "node"))
        r["raw_show_one"] = _stats(_raw(cluster, reps, "scontrol", "-o", "show", "node", "n1"))
        r["raw_sinfo_json"] = _stats(_raw(cluster, max(3, reps // 3), "sinfo", "--json"))
        r["raw_cas_one"] = _stats(_raw(cluster, reps, *CAS_ONE_ARGV))
        r["raw_squeue_jobs"] = _stats(_raw(cluster, reps, "squeue", *SQUEUE_JOBS_ARGS))
        r["read_all"] = _stats(await _timed(reps, backend.read_nodes))
        r["read_all_with_jobs"] = _stats(
            await _timed(reps, lambda: backend.read_nodes(with_jobs=True))
        )
        # The reasons read interleaved with raw sinfo -R, so that load from elsewhere hits
        # both alike: the adapter adds its subprocess handling and parsing only.
        raw_reasons, reasons, reasons_ratios = [], [], []
        for _ in range(reps):
            raw = _raw(cluster, 1, *REASONS_ARGV)[0]
            took = (await _timed(1, backend.read_reasons))[0]
            raw_reasons.append(raw)
            reasons.append(took)
            reasons_ratios.append(took / raw)
        r["raw_sinfo_reasons"] = _stats(raw_reasons)
        r["read_reasons"] = _stats(reasons)
        r["reasons_ratio"] = statistics.median(reasons_ratios)

        # Interleaved with raw updates of n2 so that load from elsewhere hits both alike.
        drains, raws, ratios, calls_single = [], [], [], 0
        for _ in range(reps):
            raw = _raw(cluster, 1, "scontrol", "update", "nodename=n2", "comment=bench")[0]
            began = time.perf_counter()
            res = await backend.drain(["n1"], CAUSE)
            took = time.perf_counter() - began
            drains.append(took)
            raws.append(raw)
            ratios.append(took / raw)
            calls_single = res.calls
            await backend.resume(["n1"], CAUSE)
        r["single_drain"] = _stats(drains) | {"calls": calls_single}
        r["overhead_ratio"] = statistics.median(ratios)
        floor = [
            a + b
            for a, b in zip(
                _raw(cluster, reps, "scontrol", "-o", "show", "node", "n1"), raws, strict=True
            )
        ]
        r["floor_ratio"] = statistics.median(f / raw for f, raw in zip(floor, raws, strict=True))
        cas_floor = [a + b for a, b in zip(_raw(cluster, reps, *CAS_ONE_ARGV), raws, strict=True)]
        r["cas_floor_ratio"] = statistics.median(
            f / raw for f, raw in zip(cas_floor, raws, strict=True)
        )
        r |= await _bulk(backend, extra, reps)
        r["pyslurm"] = await _pyslurm(cluster, release, extra, reps)
        sdiag_reps = 5
        r["sdiag_us"] = {
            "show_node_all": _sdiag(cluster, ["scontrol", "-o", "show", "node"], sdiag_reps),
            "show_node_one": _sdiag(cluster, ["scontrol", "-o", "show", "node", "n1"], sdiag_reps),
            "sinfo_reasons": _sdiag(cluster, list(REASONS_ARGV), sdiag_reps),
            "sinfo_cas_one": _sdiag(cluster, list(CAS_ONE_ARGV), sdiag_reps),
            "squeue_jobs": _sdiag(cluster, ["squeue", *SQUEUE_JOBS_ARGS], sdiag_reps),
            "sinfo_json": _sdiag(cluster, ["sinfo", "--json"], 2),
        }
    return r


async def _bulk(backend: SlurmBackend, extra: list[str], reps: int) -> dict[str, Any]:
    """Drain then resume 1,000 random declared nodes, a few times (none below 1,000)."""
    if len(extra) < 1000:
        return {}
    drain_t, resume_t, dcalls, rcalls = [], [], 0, 0
    for i in range(max(2, reps // 5)):
        chosen = random.Random(i).sample(extra, 1000)  # noqa: S311 - seeded choice
        began = time.perf_counter()
        dres = await backend.drain(chosen, CAUSE)
        drain_t.append(time.perf_counter() - began)
        began = time.perf_counter()
        rres = await backend.resume(chosen, CAUSE)
        resume_t.append(time.perf_counter() - began)
        dcalls, rcalls = dres.calls, rres.calls
    return {
        "bulk_drain_1000": _stats(drain_t) | {"calls": dcalls},
        "bulk_resume_1000": _stats(resume_t) | {"calls": rcalls},
    }


async def _pyslurm(
    cluster: SlurmCluster, release: str, extra: list[str], reps: int
) -> dict[str, Any]:
    """The pyslurm backend's reads and writes on ``cluster`` ({} without a build)."""
    site = pyslurm_site(release)
    if site is None:
        print(f"pyslurm: not measured: {pyslurm_status(release)}", file=sys.stderr)
        return {}
    child: tuple[str, ...] = ()
    if isinstance(cluster, ChrootSlurmCluster):
        child = tuple(cluster.libslurm_argv([], {})[0])
    settings = SlurmSettings(
        argv_prefix=_prefix(cluster),
        env={"SLURM_CONF": str(cluster.conf)},
        retry_wait_min_s=0,
        retry_wait_max_s=0,
    )
    backend = PyslurmBackend(settings, pyslurm_path=str(site), child_prefix=child)
    try:
        await backend.read_nodes()  # the child's start and import, outside every timing
        r: dict[str, Any] = {
            "read_all": _stats(await _timed(reps, backend.read_nodes)),
            "read_all_with_jobs": _stats(
                await _timed(reps, lambda: backend.read_nodes(with_jobs=True))
            ),
            "read_one": _stats(await _timed(reps, lambda: backend.read_node("n1"))),
        }
        drains, calls = [], 0
        for _ in range(reps):
            began = time.perf_counter()
            res = await backend.drain(["n1"], CAUSE)
            drains.append(time.perf_counter() - began)
            calls = res.calls
            await backend.resume(["n1"], CAUSE)
        r["single_drain"] = _stats(drains) | {"calls": calls}
        return r | await _bulk(backend, extra, reps)
    finally:
        await backend.aclose()


def main() -> int:
    """Run every size, print the table and the JSON line."""
    quick = "--quick" in sys.argv
    release = "24.11" if "24.11" in sys.argv else "22.05"
    sizes = [0, 1000, 5000]
    results = [asyncio.run(_measure(size, 5 if quick else 15, release)) for size in sizes]
    print(f"SLURM {release}")
    rows = [
        ("raw scontrol update (1 node)", "raw_update"),
        ("raw scontrol -o show node (all)", "raw_show_node"),
        ("raw scontrol -o show node n1", "raw_show_one"),
        ("raw sinfo --json", "raw_sinfo_json"),
        ("raw sinfo -R (interleaved)", "raw_sinfo_reasons"),
        ("raw sinfo -n n1 (CAS read)", "raw_cas_one"),
        ("raw squeue (running-job counts)", "raw_squeue_jobs"),
        ("adapter read_nodes (call+parse)", "read_all"),
        ("adapter read_nodes(with_jobs=True)", "read_all_with_jobs"),
        ("adapter read_reasons", "read_reasons"),
        ("adapter drain 1 node (CAS read+update)", "single_drain"),
        ("adapter bulk drain 1000 random", "bulk_drain_1000"),
        ("adapter bulk resume 1000 random", "bulk_resume_1000"),
    ]
    pyslurm_rows = [
        ("pyslurm read_nodes", "read_all"),
        ("pyslurm read_nodes(with_jobs=True)", "read_all_with_jobs"),
        ("pyslurm read_node n1", "read_one"),
        ("pyslurm drain 1 node (CAS read+update)", "single_drain"),
        ("pyslurm bulk drain 1000 random", "bulk_drain_1000"),
        ("pyslurm bulk resume 1000 random", "bulk_resume_1000"),
    ]
    header = f"{'operation':42} " + " ".join(f"{r['nodes']:>22}" for r in results)
    print(header + "\n" + "-" * len(header))
    table = [(label, key, False) for label, key in rows]
    table += [(label, key, True) for label, key in pyslurm_rows]
    for label, key, of_pyslurm in table:
        cells = []
        for r in results:
            v = (r["pyslurm"] if of_pyslurm else r).get(key)
            cells.append(
                f"{v['median_ms']:7.1f}/{v['p99_ms']:7.1f} ms"
                + (f" {v['calls']}c" if "calls" in v else "   ")
                if v
                else "-"
            )
        print(f"{label:42} " + " ".join(f"{c:>22}" for c in cells))
    for key, label in (
        ("overhead_ratio", "overhead ratio (drain 1 / raw update)"),
        ("floor_ratio", "floor (raw show n1 + raw update) / update"),
        ("cas_floor_ratio", "floor (raw sinfo -n n1 + update) / update"),
        ("reasons_ratio", "reasons read / raw sinfo -R (interleaved)"),
    ):
        print(f"{label:42} " + " ".join(f"{r[key]:>22.2f}" for r in results))
    for r in results:
        print(f"sdiag ave RPC time at {r['nodes']} nodes (us): {json.dumps(r['sdiag_us'])}")
    big = results[-1]
    summary = {
        "bulk_drain_1000_calls": big["bulk_drain_1000"]["calls"],
        "bulk_drain_1000_s": big["bulk_drain_1000"]["median_ms"] / 1000,
        "bulk_resume_1000_s": big["bulk_resume_1000"]["median_ms"] / 1000,
        "read_all_5000_s": big["read_all"]["median_ms"] / 1000,
        "reasons_read_5000_s": big["read_reasons"]["median_ms"] / 1000,
        "overhead_ratio": results[0]["overhead_ratio"],
        "floor_ratio": results[0]["floor_ratio"],
        "cas_floor_ratio": results[0]["cas_floor_ratio"],
        "raw_sinfo_reasons_5000_s": big["raw_sinfo_reasons"]["median_ms"] / 1000,
        "reasons_ratio_5000": big["reasons_ratio"],
        "read_all_with_jobs_5000_s": big["read_all_with_jobs"]["median_ms"] / 1000,
        "overhead_ratio_5000": big["overhead_ratio"],
        "raw_update_ms": results[0]["raw_update"]["median_ms"],
        "cas_drain_ms": results[0]["single_drain"]["median_ms"],
        "slurm_release": release,
        "loadavg_1m_at_end": os.getloadavg()[0],
        "results": results,
    }
    py_small, py_big = results[0]["pyslurm"], big["pyslurm"]
    if py_big:
        summary |= {
            "pyslurm_read_all_5000_s": py_big["read_all"]["median_ms"] / 1000,
            "pyslurm_read_all_with_jobs_5000_s": py_big["read_all_with_jobs"]["median_ms"] / 1000,
            "pyslurm_read_one_5000_ms": py_big["read_one"]["median_ms"],
            "pyslurm_cas_drain_ms": py_small["single_drain"]["median_ms"],
            "pyslurm_cas_drain_5000_ms": py_big["single_drain"]["median_ms"],
            "pyslurm_bulk_drain_1000_s": py_big["bulk_drain_1000"]["median_ms"] / 1000,
            "pyslurm_bulk_resume_1000_s": py_big["bulk_resume_1000"]["median_ms"] / 1000,
            "pyslurm_bulk_drain_1000_calls": py_big["bulk_drain_1000"]["calls"],
        }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

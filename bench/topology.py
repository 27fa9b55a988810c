"""topology.conf benchmark against a real slurmctld (not part of CI; prints, never asserts).

For 1,000 and 5,000 declared SLURM nodes (4 with slurmd, the rest without), with
``TopologyPlugin=topology/tree``: the pure render of the labels, and the coordinator's whole
step (:meth:`TopologyApplier.apply`: render, write the stamped file, read slurmctld's copy
back, ``scontrol reconfigure``, ``scontrol show topology`` for the drift) after a relabel
that moves every tenth node to another leaf, next to the raw ``scontrol reconfigure`` and
``scontrol show topology`` of an unchanged file measured in the same run (the floor). Every
apply is checked: slurmctld must show the new leaves. Prints a table, then one JSON object
as the last line.

    .venv/bin/python -m bench.topology [--quick] [24.11]
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.topology import TopologySpec, leaf_membership, render
from slonkd.runtime.coordinating.topology_apply import TopologyApplier
from slonkd.runtime.coordinating.topology_settings import TopologySettings
from slonkd.runtime.kit.logging import configure_logging
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout

KEYS = ("zone", "spine", "leaf")
SLURMD_NODES = ("n1", "n2", "n3", "n4")


def _labels(names: list[str], shift: int) -> dict[str, dict[str, str]]:
    """32 nodes per leaf, 8 leaves per spine, 4 spines per zone; ``shift`` moves every 10th."""
    out = {}
    for i, name in enumerate(names):
        leaf = i // 32 + (shift if i % 10 == 0 else 0)
        out[name] = {"zone": f"z{leaf // 32}", "spine": f"s{leaf // 8}", "leaf": f"l{leaf}"}
    return out


def _cluster(release: str, total: int) -> SlurmCluster:
    layout = SlurmLayout(
        nodes=SLURMD_NODES, extra_nodes=total - len(SLURMD_NODES), topology_plugin="topology/tree"
    )
    if release == "22.05":
        return SlurmCluster(Path(tempfile.mkdtemp(prefix="slonkd-bench-topo-")), layout)
    return ChrootSlurmCluster.create(release, layout)


def _raw(cluster: SlurmCluster, reps: int, *argv: str) -> list[float]:
    prefix = cluster.client_prefix if isinstance(cluster, ChrootSlurmCluster) else ()
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        subprocess.run(
            [*prefix, *argv], env=cluster.env, capture_output=True, check=True, timeout=120
        )
        times.append(time.perf_counter() - began)
    return times


async def _measure(cluster: SlurmCluster, reps: int) -> dict[str, float]:
    names = [*cluster.layout.nodes, *cluster.extra_node_names]
    spec = TopologySpec(tree_keys=KEYS)
    if isinstance(cluster, ChrootSlurmCluster):
        slurm = SlurmSettings(argv_prefix=cluster.client_prefix, timeout_s=120)
    else:
        slurm = SlurmSettings(env={"SLURM_CONF": str(cluster.conf)}, timeout_s=120)
    settings = TopologySettings(
        spec=spec, configmap=None, path=str(cluster.topology_conf), copy_poll_s=0.01
    )
    applier = TopologyApplier(settings, configmap=None, slurm=ScontrolBackend(slurm))
    render_s, apply_s = [], []
    text_kb = 0.0
    for rep in range(reps + 1):  # the first apply replaces the harness's file: not counted
        labels = _labels(names, shift=rep % 2 + 1)
        began = time.perf_counter()
        rendered = render(labels, spec)
        render_s.append(time.perf_counter() - began)
        text_kb = len(rendered.text) / 1024
        began = time.perf_counter()
        changed = await applier.apply(labels, cause="bench")
        took = time.perf_counter() - began
        shown = leaf_membership(cluster.run("scontrol", "show", "topology").stdout)
        if not changed or shown != leaf_membership(rendered.text):
            raise SystemExit(f"rep {rep}: slurmctld does not show the rendered topology")
        if rep:
            apply_s.append(took)
    return {
        "render_s": statistics.median(render_s),
        "render_reconfigure_s": statistics.median(apply_s),
        "raw_reconfigure_s": statistics.median(_raw(cluster, reps, "scontrol", "reconfigure")),
        "raw_show_topology_s": statistics.median(
            _raw(cluster, reps, "scontrol", "show", "topology")
        ),
        "file_kb": text_kb,
    }


def main() -> int:
    """Run the measurements and print the table and the JSON line."""
    configure_logging(json=True, level=logging.WARNING)  # the table only
    quick = "--quick" in sys.argv
    release = next((a for a in sys.argv[1:] if not a.startswith("--")), "22.05")
    reps = 2 if quick else 5
    results: dict[str, float | str] = {}
    rows = []
    for total in (1000, 5000):
        cluster = _cluster(release, total)
        cluster.start(timeout_s=180)
        try:
            got = asyncio.run(_measure(cluster, reps))
        finally:
            cluster.stop()
        rows.append((total, got))
        for key, value in got.items():
            results[f"{key.removesuffix('_s')}_{total}{'_s' if key.endswith('_s') else ''}"] = (
                round(value, 4)
            )
    print(f"SLURM {release}, topology/tree, median of {reps}")
    print(
        f"{'nodes':>6} {'render':>9} {'render+reconf':>14} {'raw reconf':>11} "
        f"{'raw show':>9} {'file KB':>8}"
    )
    for total, got in rows:
        print(
            f"{total:>6} {got['render_s']:>8.3f}s {got['render_reconfigure_s']:>13.3f}s "
            f"{got['raw_reconfigure_s']:>10.3f}s {got['raw_show_topology_s']:>8.3f}s "
            f"{got['file_kb']:>8.1f}"
        )
    results["release"] = release
    print(json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

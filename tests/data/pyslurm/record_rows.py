"""Record the pyslurm child's answers: ``python tests/data/pyslurm/record_rows.py [24.11]``.

Starts a cluster of the harness (22.05 on the host, or 24.11 in its trixie root), puts its
nodes in the states ``tests/data/slurm/record.py`` sets (its ``_setup``: comments, extras,
slonkd's and operators' drains, down, fail, reboot, hostile reasons, running and pending
jobs), runs two more jobs to their end on n1 (``exit 3`` and ``true``), then asks the pyslurm
child (:class:`~slonkd.adapters.slurm.pyslurm_link.PyslurmChild`, pyslurm as the bootstrap
built it: :func:`~slonkd_sandbox.pyslurm_build.pyslurm_site`) every read op and writes each
answer's ``ok`` under ``tests/data/pyslurm/<release>/`` with ``sources.json`` naming the op,
its arguments and the versions. ``tests/unit/test_pyslurm_rows.py`` expects these states.
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from slonkd.adapters.slurm.pyslurm_link import PyslurmChild
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.pyslurm_build import pyslurm_site, pyslurm_status
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster, cluster_of_release
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout

HERE = Path(__file__).resolve().parent
OPS: dict[str, tuple[str, dict[str, Any]]] = {
    "versions.json": ("versions", {}),
    "nodes.json": ("nodes", {"names": [], "with_jobs": True}),
    "nodes_named.json": ("nodes", {"names": ["n2", "x2", "nosuch"], "with_jobs": False}),
    "node_n2.json": ("node", {"name": "n2"}),
    "node_missing.json": ("node", {"name": "nosuch"}),
    "reasons.json": ("reasons", {}),
    "jobs_on_n5.json": ("jobs_on", {"name": "n5"}),
    "finished.json": ("finished", {}),
}


def _slurm_setup() -> Any:
    """``tests/data/slurm/record.py``'s ``_setup`` (the same states as the scontrol data)."""
    spec = importlib.util.spec_from_file_location("slurm_record", HERE.parent / "slurm/record.py")
    if spec is None or spec.loader is None:
        raise SystemExit("tests/data/slurm/record.py not found")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._setup


def _finish_two(c: SlurmCluster) -> None:
    ids = [
        c.run("sbatch", "--parsable", "-o", "/dev/null", "-w", "n1", "--wrap", script)
        .stdout.strip()
        .split(";")[0]
        for script in ("exit 3", "true")
    ]

    def ended() -> bool:
        out = c.run("squeue", "-h", "-t", "CD,F", "-o", "%i").stdout.split()
        return set(ids) <= set(out)

    wait_for("two jobs ended", ended, timeout_s=90)


async def _record(cluster: SlurmCluster, release: str, out_dir: Path) -> dict[str, Any]:
    site = pyslurm_site(release)
    if site is None:
        raise SystemExit(pyslurm_status(release))
    prefix: list[str] = []
    if isinstance(cluster, ChrootSlurmCluster):
        prefix, _ = cluster.libslurm_argv([], {})
    child = PyslurmChild(conf=str(cluster.conf), pyslurm_path=str(site), prefix=prefix)
    files: dict[str, Any] = {}
    try:
        for name, (op, args) in OPS.items():
            said = await child.ask(op, args, timeout_s=60)
            (out_dir / name).write_text(json.dumps(said, indent=1) + "\n")
            files[name] = {"op": op, "args": args}
    finally:
        await child.aclose()
    return {"hello": child.hello, "files": files}


def main() -> int:
    """Record every op's answer of one release; print where they went."""
    release = sys.argv[1] if len(sys.argv) > 1 else "22.05"
    layout = SlurmLayout(nodes=("n1", "n2", "n3", "n4", "n5"), extra_nodes=8)
    cluster = cluster_of_release(release, layout, "slonkd-rec-")
    cluster.start()
    try:
        version = cluster.run("scontrol", "--version").stdout.split()[-1]
        out_dir = HERE / release
        out_dir.mkdir(parents=True, exist_ok=True)
        _slurm_setup()(cluster)
        _finish_two(cluster)
        got = asyncio.run(_record(cluster, release, out_dir))
        meta = {
            "recorded_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "slurm_version": version,
            "layout": "nodes n1-n5 with slurmd, x1-x8 declared without slurmd",
            "states": "tests/data/slurm/record.py's _setup; jobs 'exit 3' and 'true' ended on n1",
            **got,
        }
        (out_dir / "sources.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"recorded {len(OPS)} answers of pyslurm on SLURM {version} in {out_dir}")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Record real SLURM outputs for the parser tests: ``python tests/data/slurm/record.py [24.11]``.

``--only FILE...`` records just those files (same cluster set-up) and merges their entries
into the existing ``sources.json``, leaving the other recordings as they are.

Starts a cluster of the harness (SLURM 22.05 from the host's Debian, or 24.11 in a
debootstrapped trixie root with the argument ``24.11``), puts its nodes in known states
(idle, slonkd-drained, draining with a job, down, fail, reboot requested, hostile reasons),
runs each read command slonkd uses and writes its output under ``tests/data/slurm/<version>/``
with ``sources.json`` naming the command and the SLURM version that produced every file.
The states set here are what ``tests/unit/test_slurm_parsing.py`` expects: change both.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

from slonkd.adapters.slurm.parsing_cas import CAS_FORMAT
from slonkd.adapters.slurm.parsing_jobs import SQUEUE_JOBS_ARGS
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.chroot import cluster_of_release
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout

HERE = Path(__file__).resolve().parent

COMMANDS = {
    "scontrol_show_node.txt": ["scontrol", "-o", "show", "node"],
    "scontrol_show_node_n2.txt": ["scontrol", "-o", "show", "node", "n2"],
    "sinfo.json": ["sinfo", "--json"],
    "sinfo_reasons.txt": ["sinfo", "-R", "-h", "-o", "%N|%T|%H|%U|%E"],
    "squeue.json": ["squeue", "--json"],
    "squeue.txt": ["squeue", "-h", "-o", "%i|%T|%N|%r"],
    "squeue_jobs.txt": ["squeue", *SQUEUE_JOBS_ARGS],
    "sinfo_cas.txt": ["sinfo", "--all", "--Node", "--noheader", f"--Format={CAS_FORMAT}"],
    "strigger_get.txt": ["strigger", "--get"],
    "sdiag.txt": ["sdiag"],
}
COMMANDS_24_11 = {
    **COMMANDS,
    "scontrol_show_node.json": ["scontrol", "show", "node", "--json"],
    "scontrol_show_node_n2.json": ["scontrol", "show", "node", "n2", "--json"],
}


def _setup(c: SlurmCluster) -> None:
    def up(*args: str) -> None:
        c.run("scontrol", "update", *args)

    up("nodename=n1", "comment=hello world", 'extra={"rack":"r1"}')
    up("nodename=n2", "state=drain", "reason=slonkd:pod-terminating bye")
    up("nodename=n2", 'extra={"slonkd":["pod-terminating"]}')
    c.run("sbatch", "-o", "/dev/null", "-w", "n3", "-n1", "--wrap", "sleep 300")
    c.run("sbatch", "-o", "/dev/null", "-w", "n5", "-n1", "--wrap", "sleep 300")
    c.run("sbatch", "-o", "/dev/null", "-w", "n5", "-n1", "--no-requeue", "--wrap", "sleep 301")
    c.run("sbatch", "-o", "/dev/null", "-w", "x8", "-n1", "--wrap", "sleep 302")  # pending

    def running() -> bool:
        out = c.run("squeue", "-h", "-t", "R", "-o", "%i").stdout.split()
        return len(out) == 3

    wait_for("three jobs running", running, timeout_s=60)
    up("nodename=n3", "state=drain", "reason=admin maint")
    up("nodename=n4", "state=down", "reason=down it")
    c.run("scontrol", "reboot", "ASAP", "reason=slonkd:health:gpu-xid-79 reboot", "n5")
    up("nodename=x1", "state=fail", "reason=fail it")
    up("nodename=x2", "state=drain", 'reason=line1\nline2 Comment=x "q"')
    up("nodename=x3", "state=drain", "reason=Kill task failed")
    up("nodename=x4", "state=drain", "reason=slonkd:health:gpu-xid-79 xid")
    up("nodename=x4", 'extra={"slonkd":["health:gpu-xid-79","k8s-cordoned"]}')
    c.run("strigger", "--set", "--node", "--drained", "--flags=PERM", "--program=/bin/true drained")
    c.run("strigger", "--set", "--node", "--down", "--program=/bin/true down")
    time.sleep(1)


def main() -> int:
    """Record every command's output; print where it went."""
    layout = SlurmLayout(nodes=("n1", "n2", "n3", "n4", "n5"), extra_nodes=8)
    args = sys.argv[1:]
    only = args[args.index("--only") + 1 :] if "--only" in args else []
    args = args[: args.index("--only")] if "--only" in args else args
    commands = COMMANDS
    if args == ["24.11"]:
        commands = COMMANDS_24_11
    unknown = [name for name in only if name not in commands]
    if unknown:
        print(f"no such recording: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if only:
        commands = {name: commands[name] for name in only}
    cluster = cluster_of_release("24.11" if args == ["24.11"] else "22.05", layout, "slonkd-rec-")
    cluster.start()
    try:
        version = cluster.run("scontrol", "--version").stdout.split()[-1]
        short = ".".join(version.split(".")[:2])
        out_dir = HERE / short
        out_dir.mkdir(parents=True, exist_ok=True)
        _setup(cluster)
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        meta: dict[str, Any] = {
            "recorded_at": now,
            "slurm_version": version,
            "layout": "nodes n1-n5 with slurmd, x1-x8 declared without slurmd",
            "files": {},
        }
        if only:
            meta = json.loads((out_dir / "sources.json").read_text())
        for name, argv in commands.items():
            proc = cluster.run(*argv)
            (out_dir / name).write_text(proc.stdout)
            entry = {"command": argv, "slurm_version": version}
            meta["files"][name] = entry | ({"recorded_at": now} if only else {})
        (out_dir / "sources.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"recorded {len(commands)} outputs of SLURM {version} in {out_dir}")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

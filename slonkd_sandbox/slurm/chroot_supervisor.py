"""PID 1 of a chroot SLURM cluster's namespace: mounts /proc, /dev and /sys into the root.

Runs like :mod:`slonkd_sandbox.slurm.supervisor` (which it then becomes) inside ``unshare
--pid --fork --mount-proc``: that namespace has a private mount table, so the mounts made
here are seen only by this cluster's daemons and vanish with it. Usage: ``python -m
slonkd_sandbox.slurm.chroot_supervisor FSROOT SPEC``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from slonkd_sandbox.slurm import supervisor


def mount_into(fsroot: Path) -> None:
    """/proc (this namespace's), /dev and /sys of the host, into the root."""
    subprocess.run(["mount", "-t", "proc", "proc", str(fsroot / "proc")], check=True)
    subprocess.run(["mount", "--rbind", "/dev", str(fsroot / "dev")], check=True)
    subprocess.run(["mount", "--rbind", "-o", "ro", "/sys", str(fsroot / "sys")], check=True)


def main() -> int:
    """Mount, then run the ordinary supervisor on the spec."""
    fsroot = Path(sys.argv[1])
    mount_into(fsroot)
    sys.argv = [sys.argv[0], sys.argv[2]]
    return supervisor.main()


if __name__ == "__main__":
    raise SystemExit(main())

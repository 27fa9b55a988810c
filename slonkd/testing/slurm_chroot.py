"""A real SLURM cluster of another release (24.11) running inside a debootstrapped root.

Same layout and control as :class:`slonkd.testing.slurm.SlurmCluster`, but every daemon and
client runs through ``chroot FSROOT``; the cluster's directory lives inside the root
(``FSROOT/run/slonkd/<id>``) so that paths in slurm.conf are the same for daemons and
clients. Differences from 22.05 that the config needs: no ``switch/none`` plugin (the line
is dropped) and a ``cgroup.conf`` with ``CgroupPlugin=disabled`` (slurmd refuses to start
without cgroups otherwise). Clients for the adapter: :attr:`client_prefix`. With
accounting, slurmdbd runs in the root (added to it by ``slurm_root.ensure_accounting``) and
its MariaDB on the host, with its datadir in the cluster's directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slonkd.testing import procs
from slonkd.testing.procs import HarnessError
from slonkd.testing.slurm import CLIENT_TIMEOUT_S, SlurmCluster, SlurmLayout
from slonkd.testing.slurm_conf import render_slurm_conf
from slonkd.testing.slurm_root import ensure_accounting, ensure_slurm_root

SLURM_CLIENTS = (
    "scontrol", "sinfo", "squeue", "strigger", "sbatch", "scancel", "sdiag", "sacct", "sacctmgr",
)  # fmt: skip
"""The clients slonkd and the tests call by name (see :meth:`ChrootSlurmCluster.client_shims`)."""

_SLURMD_PROC = 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"'
"""How a slurmd starts in the root: with the root's /proc showing its own PID namespace.

The supervisor starts each slurmd in a PID namespace of its own (``unshare --pid
--mount-proc``), which mounts that namespace's proc at the host's /proc only; the root's
/proc is the cluster's (mounted by :mod:`.slurm_chroot_supervisor`). A chrooted slurmd and
its slurmstepds then saw the cluster's process numbers in /proc: proctrack/linuxproc, which
walks /proc from slurmstepd's own pid to SIGKILL a step's leftovers before the batch job is
reported complete, sent SIGKILL to numbers that in the slurmd's namespace belong to other
processes (slurmstepd's own threads among them). Some batch steps vanished without reporting
(no ``done with step`` in the slurmd log) and slurmctld ended their jobs NODE_FAIL ("Batch
JobId=9 missing from batch node w-3") with no node ever DOWN. The root's /proc is mounted
again, in the slurmd's mount namespace, with its PID namespace (``$0``: the root; ``$@``:
slurmd's argv).
"""


@dataclass(slots=True)
class ChrootSlurmCluster(SlurmCluster):
    """A cluster whose daemons and clients run in ``fsroot`` (built by slurm_root)."""

    fsroot: Path = field(default_factory=Path)

    @classmethod
    def create(
        cls, version: str = "24.11", layout: SlurmLayout | None = None
    ) -> ChrootSlurmCluster:
        """A new cluster directory inside the cached root for ``version``."""
        accounted = layout is not None and layout.accounting
        fsroot = ensure_accounting(version) if accounted else ensure_slurm_root(version)
        base = fsroot / "run" / "slonkd"
        base.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="c-", dir=base))
        return cls(root, layout or SlurmLayout(), fsroot=fsroot)

    def inner(self, path: Path) -> str:
        """``path`` (on the host, inside the root) as daemons and clients see it."""
        return "/" + str(path.relative_to(self.fsroot))

    @property
    def client_prefix(self) -> tuple[str, ...]:
        """argv before a SLURM client: ``chroot FSROOT env SLURM_CONF=...``."""
        return ("chroot", str(self.fsroot), "env", f"SLURM_CONF={self.inner(self.conf)}")

    def client_shims(self, directory: Path) -> Path:
        """A directory of ``scontrol``, ``sinfo``, ... that run the root's clients on this cluster.

        Put first on a process's PATH, it makes a slonkd agent (or any tool) that calls the
        clients by name talk to this cluster with this release's clients, as a pod of the
        release would; ``SLURM_CONF`` in its environment is replaced by the root's path.
        """
        directory.mkdir(parents=True, exist_ok=True)
        prefix = " ".join(shlex.quote(p) for p in self.client_prefix)
        for tool in SLURM_CLIENTS:
            shim = directory / tool
            shim.write_text(f'#!/bin/sh\nexec {prefix} {tool} "$@"\n')
            shim.chmod(0o755)
        return directory

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a SLURM client of the root's release against this cluster."""
        proc = subprocess.run(
            [*self.client_prefix, *argv],
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT_S,
            check=False,
        )
        if check and proc.returncode != 0:
            raise HarnessError(
                f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-1000:]}"
            )
        return proc

    def start(self, *, timeout_s: float = 60.0) -> None:
        """Write the config, start the daemons in the root, wait until the nodes are idle."""
        begun = time.monotonic()
        spec = self._prepare_chroot()
        log = self.root / "log" / "supervisor.log"
        self._supervisor = procs.spawn(
            [
                "unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL",
                sys.executable, "-m", "slonkd.testing.slurm_chroot_supervisor",
                str(self.fsroot), str(spec),
            ],
            log=log,
            stdin=subprocess.PIPE,
        )  # fmt: skip
        alive = procs.exited(self._supervisor, log)
        procs.wait_for("slurm supervisor", self.socket_path.exists, timeout_s=20, alive=alive)
        procs.wait_for("slurmctld", self._pings, timeout_s=timeout_s, interval_s=0.1, alive=alive)
        if self.layout.autostart:
            # 20 slurmd of a 24.11 root once took more than 60 s on 2 cores
            idle_s = max(timeout_s, 5.0 * len(self.layout.nodes))
            self.wait_idle(self.layout.nodes, timeout_s=idle_s)
        self.started_s = time.monotonic() - begun

    def _prepare_chroot(self) -> Path:
        root = self.root
        for sub in ("etc", "state", "spool", "run", "log", "munge", "bin"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "munge").chmod(0o755)
        shutil.copyfile("/etc/hosts", self.fsroot / "etc" / "hosts")
        key = root / "munge" / "munge.key"
        if not key.exists():
            subprocess.run(
                ["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True
            )
            key.chmod(0o600)
        n = len(self.layout.nodes)
        self.ctld_port = self.ctld_port or procs.free_ports(1)[0]
        self.slurmd_port = self.slurmd_port or procs.free_port_range(max(n, 1))
        self._choose_ports()
        reboot = root / "bin" / "reboot"
        reboot.write_text(
            '#!/bin/sh\necho "reboot requested: $*" >> "$(dirname "$0")/../log/reboot.log"\n'
        )
        reboot.chmod(0o755)
        (root / "etc" / "plugstack.conf").write_text("")
        (root / "etc" / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        view = dataclasses.replace(self, root=Path(self.inner(root)))
        conf = render_slurm_conf(view).replace("SwitchType=switch/none\n", "")
        self.conf.write_text(conf)
        self._initial_topology()
        inner = self.inner
        chroot = ["chroot", str(self.fsroot)]
        munge_socket = root / "munge" / "munge.sock"
        spec: dict[str, Any] = {
            "root": str(root),
            "slurm_conf": inner(self.conf),
            "socket": str(self.socket_path),
            "munge_socket": str(munge_socket),
            "nodes": list(self.layout.nodes),
            "autostart": list(self.layout.nodes) if self.layout.autostart else [],
            "munged_argv": [
                *chroot, "munged", "-F", "--force", f"--socket={inner(munge_socket)}",
                f"--key-file={inner(key)}", f"--pid-file={inner(root / 'run' / 'munged.pid')}",
                f"--log-file={inner(root / 'log' / 'munged.log')}",
                f"--seed-file={inner(root / 'munge' / 'munge.seed')}",
            ],
            "slurmctld_argv": [*chroot, "slurmctld", "-D", "-f", inner(self.conf)],
            # in the slurmd's own PID namespace (see _SLURMD_PROC)
            "slurmd_argv": [
                "sh", "-c", _SLURMD_PROC, str(self.fsroot), "slurmd", "-D", "-f", inner(self.conf),
            ],
        }  # fmt: skip
        if self.layout.accounting:
            spec["accounting"] = self._accounting_spec(
                inner_root=Path(inner(root)), client_prefix=tuple(chroot)
            )
        path = root / "run" / "spec.json"
        path.write_text(json.dumps(spec, indent=2))
        return path

    def stop(self) -> None:
        """Stop the cluster and remove its directory from the cached root.

        With ``SLONKD_KEEP_TEST_DIRS`` set the directory (logs, state) stays, as the session's
        directories do, for a post-mortem: remove it by hand afterwards.
        """
        SlurmCluster.stop(self)
        if os.environ.get("SLONKD_KEEP_TEST_DIRS"):
            print(f"kept 24.11 cluster dir {self.root}", file=sys.stderr)
            return
        shutil.rmtree(self.root, ignore_errors=True)

"""A real SLURM cluster of another release (24.11) running inside a debootstrapped root.

Same layout and control as :class:`slonkd_sandbox.slurm.cluster.SlurmCluster`, but every daemon and
client runs through ``chroot FSROOT``; the cluster's directory lives inside the root
(``FSROOT/run/slonkd/<id>``) so that paths in slurm.conf are the same for daemons and
clients. Differences from 22.05 that the config needs: no ``switch/none`` plugin (the line
is dropped) and a ``cgroup.conf`` with ``CgroupPlugin=disabled`` (slurmd refuses to start
without cgroups otherwise). Clients for the adapter: :attr:`client_prefix`. With
accounting, slurmdbd runs in the root (added to it by ``slurm.root.ensure_accounting``) and
its MariaDB on the host, with its datadir in the cluster's directory.

This module owns only what differs: the handle's hooks (how daemons and clients are run, the
paths they see, the config's differences) and the root's cluster directory; the rest is
:class:`~slonkd_sandbox.slurm.cluster.SlurmCluster`'s. Neighbours: :mod:`slonkd_sandbox.slurm.root`
(builds the root), :mod:`slonkd_sandbox.slurm.chroot_supervisor` (the namespace's init, which
mounts /proc, /dev and /sys into the root), :mod:`slonkd_sandbox.slurm.conf` (slurm.conf).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from slonkd_sandbox.slurm.conf import render_slurm_conf
from slonkd_sandbox.slurm.root import ensure_accounting, ensure_slurm_root

CHILD_PREFIX_ENV = "SLONKD_SANDBOX_LIBSLURM_CHILD_PREFIX"
"""A JSON list: what libslurm's canary child runs under (see ``libslurm_argv``)."""

SLURM_CLIENTS = (
    "scontrol", "sinfo", "squeue", "strigger", "sbatch", "scancel", "sdiag", "sacct", "sacctmgr",
)  # fmt: skip
"""The clients slonkd and the tests call by name (see :meth:`ChrootSlurmCluster.client_shims`)."""

_SLURMD_PROC = 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"'
"""How a slurmd starts in the root: with the root's /proc showing its own PID namespace.

The supervisor starts each slurmd in a PID namespace of its own (``unshare --pid
--mount-proc``), which mounts that namespace's proc at the host's /proc only; the root's
/proc is the cluster's (mounted by :mod:`.chroot_supervisor`). A chrooted slurmd and
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
    """A cluster whose daemons and clients run in ``fsroot`` (built by slurm.root)."""

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

    # -- hooks of SlurmCluster -----------------------------------------------------------------

    def libslurm_argv(
        self, argv: Sequence[str], env: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """``argv`` (a host Python program) run with this release's libslurm loadable in it.

        The program runs on the root's dynamic loader and C library, ``SLURM_LIBRARY`` names
        the root's library, and in a private mount namespace the root's plugins and cluster
        directory stand where that library looks for them (its compiled-in PluginDir,
        slurm.conf's inner paths). :data:`CHILD_PREFIX_ENV` says what libslurm's canary child
        must run under (the same loader); :mod:`slonkd_sandbox.slurm.libslurm_launch` applies it to
        ``slonkd``. As a release's own image would be, without building one.
        """
        root = self.fsroot
        # this interpreter's own libpython first: the loader's path wins over its RUNPATH, and
        # the host's /usr/lib may hold another build of the same version
        libdirs = [
            Path(str(sysconfig.get_config_var("LIBDIR"))),
            root / "lib/x86_64-linux-gnu",
            root / "usr/lib/x86_64-linux-gnu",
        ]
        loader = root / "lib64/ld-linux-x86-64.so.2"
        path = ":".join(str(d) for d in libdirs)
        path += ":/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu"
        plugins = "/usr/lib/x86_64-linux-gnu/slurm-wlm"
        script = (
            'mkdir -p "$4" && mount --bind "$1" "$2" && mount --bind "$3" "$4" && shift 4'
            ' && exec "$@"'
        )
        wrapped = [
            "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
            str(root / plugins.lstrip("/")), plugins, str(root / "run" / "slonkd"),
            "/run/slonkd", str(loader), "--library-path", path, *argv,
        ]  # fmt: skip
        return wrapped, {
            **env,
            "SLURM_LIBRARY": str(root / "usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so"),
            CHILD_PREFIX_ENV: json.dumps([str(loader), "--library-path", path]),
        }

    def _check_programs(self) -> None:
        """Nothing to check on the host: the daemons and clients are the root's."""

    def _supervisor_args(self, spec: Path) -> list[str]:
        """The chroot supervisor (it mounts /proc, /dev and /sys into the root first)."""
        return ["slonkd_sandbox.slurm.chroot_supervisor", str(self.fsroot), str(spec)]

    @property
    def _client_wrapper(self) -> tuple[str, ...]:
        """The root's clients: :attr:`client_prefix`."""
        return self.client_prefix

    @property
    def _client_env(self) -> dict[str, str] | None:
        """The caller's environment (:attr:`client_prefix` sets ``SLURM_CONF``)."""
        return None

    def _seen(self, path: Path) -> str:
        """``path`` as the daemons in the root see it."""
        return self.inner(path)

    def _daemon_prefix(self) -> list[str]:
        """``chroot FSROOT``."""
        return ["chroot", str(self.fsroot)]

    def _slurmd_argv(self, conf: str) -> list[str]:
        """In the slurmd's own PID namespace, with the root's /proc its own (see _SLURMD_PROC)."""
        return ["sh", "-c", _SLURMD_PROC, str(self.fsroot), "slurmd", "-D", "-f", conf]

    def _reboot_program(self) -> str:
        """A RebootProgram that only logs the request."""
        return '#!/bin/sh\necho "reboot requested: $*" >> "$(dirname "$0")/../log/reboot.log"\n'

    def _render_conf(self) -> str:
        """slurm.conf with the root's paths, without ``switch/none`` (24.11 has no such plugin)."""
        view = dataclasses.replace(self, root=Path(self.inner(self.root)))
        return render_slurm_conf(view).replace("SwitchType=switch/none\n", "")

    def _prepare(self) -> Path:
        """The cluster's directory as SlurmCluster writes it, plus /etc/hosts and cgroup.conf.

        The root gets the host's /etc/hosts; ``cgroup.conf`` says ``CgroupPlugin=disabled``
        (slurmd refuses to start without cgroups otherwise).
        """
        spec = SlurmCluster._prepare(self)
        shutil.copyfile("/etc/hosts", self.fsroot / "etc" / "hosts")
        (self.root / "etc" / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        return spec

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


def cluster_of_release(release: str, layout: SlurmLayout, prefix: str) -> SlurmCluster:
    """A cluster of ``release``, not started.

    22.05 on the host (in a new ``/tmp/PREFIX*`` directory), any other in its cached root
    (:meth:`ChrootSlurmCluster.create`).
    """
    if release == "22.05":
        return SlurmCluster(Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")), layout)
    return ChrootSlurmCluster.create(release, layout)

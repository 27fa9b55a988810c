"""What the real node leaves on the host, and how tear-down finds and removes it.

The node makes cgroups of its own below every v1 hierarchy (its kubelet's cgroupRoot, with the
CPU weight of a whole machine: ``cpu.shares`` 1024 per CPU), and its kubelet, containerd
and their shims leave processes, mounts under the node's directory, CNI result files and a
few host directories. Tear-down kills every task through ``ctr`` before containerd stops,
then any process of the node (by argv, cgroup or network namespace), unmounts everything
under the node's directory, removes its cgroups and the host files; the same finders list
what survived (:meth:`RealNode.leftovers <slonkd_sandbox.realnode.node.RealNode.leftovers>`).

Neighbours: :mod:`slonkd_sandbox.realnode.node` (the node, which calls these),
:mod:`slonkd_sandbox.realnode.net` (its namespace, veth and routes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from slonkd_sandbox.procs import output

CNI_CACHE_DIR = Path("/var/lib/cni/results")
KUBELET_DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
"""Hard-coded in the kubelet, whatever its root directory."""
HOST_DIRS = (
    Path("/var/lib/kubelet/device-plugins"),
    Path("/var/lib/kubelet"),
    CNI_CACHE_DIR,
    CNI_CACHE_DIR.parent,
    Path("/run/containerd/s"),
    Path("/run/containerd"),
)
"""Directories the kubelet, libcni and containerd's shims create on the host whatever their
configuration says: removed at tear-down when empty (another node may still use them)."""
CGROUP_MOUNTS = Path("/sys/fs/cgroup")


def running_exes() -> list[Path]:
    """The executables of every process on the machine (those it may read)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                out.append(Path(os.readlink(entry / "exe")))
    return out


# -- cgroups ---------------------------------------------------------------------------------


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies below /sys/fs/cgroup."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if parts[2] == "cgroup" and parts[1].startswith(str(CGROUP_MOUNTS)):
            out.append(Path(parts[1]))
    return out


def make_cgroups(cgroup_root: str, made: list[Path]) -> None:
    """Create ``cgroup_root`` in every hierarchy (each added to ``made``), cpusets copied."""
    for hierarchy in cgroup_hierarchies():
        path = hierarchy / cgroup_root.lstrip("/")
        path.mkdir(exist_ok=True)
        made.append(path)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / knob).exists():
                (path / knob).write_text((hierarchy / knob).read_text())
        if (path / "cpu.shares").exists():  # the node's pods weigh as a machine of their own
            (path / "cpu.shares").write_text(str(1024 * (os.cpu_count() or 1)))


def remove_cgroups(made: list[Path]) -> None:
    """Remove every cgroup below (and including) each of ``made``, deepest first."""
    for top in made:
        if not top.exists():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for path in [*dirs, top]:
            with contextlib.suppress(FileNotFoundError):
                path.rmdir()


# -- containers and processes ----------------------------------------------------------------


def kill_tasks(ctr: Callable[..., str], container_ids: set[str]) -> None:
    """SIGKILL and delete every task, then delete every container (ids added to the set)."""
    tasks = ctr("tasks", "ls", "-q", check=False).split()
    for task in tasks:
        ctr("tasks", "kill", "--signal=SIGKILL", task, check=False)
    deadline = time.monotonic() + 15
    for task in tasks:
        while time.monotonic() < deadline:
            ctr("tasks", "delete", "--force", task, check=False)
            if task not in ctr("tasks", "ls", "-q", check=False).split():
                break
            time.sleep(0.1)
    containers = ctr("containers", "ls", "-q", check=False).split()
    container_ids.update(containers)
    if containers:
        ctr("containers", "delete", *containers, check=False)


def node_pids(root: Path, *, cgroup_root: str, netns: str, spare_pgid: int | None) -> set[int]:
    """Processes of a node: by argv (its root), cgroup or network namespace.

    Those of process group ``spare_pgid`` (the host relay's) are left out.
    """
    mine: set[int] = set()
    marker = (str(root) + "/").encode()
    cgroup_marker = f":{cgroup_root}/".encode()
    cgroup_top = f":{cgroup_root}\n".encode()
    netns_path = Path(f"/run/netns/{netns}")
    netns_ino = netns_path.stat().st_ino if netns_path.exists() else None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        try:
            cmdline = (entry / "cmdline").read_bytes()
            cgroup = (entry / "cgroup").read_bytes()
            ns_ino = os.stat(entry / "ns" / "net").st_ino
            pgid = os.getpgid(pid)
        except (OSError, ProcessLookupError):
            continue
        if (
            marker in cmdline
            or cgroup_marker in cgroup
            or cgroup_top in cgroup
            or (netns_ino is not None and ns_ino == netns_ino)
        ) and (spare_pgid is None or pgid != spare_pgid):
            mine.add(pid)
    return mine


def kill_all(pids: Callable[[], set[int]]) -> None:
    """SIGKILL what ``pids`` finds until it finds nothing (50 rounds at most)."""
    for _ in range(50):
        found = pids()
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


# -- mounts and files ------------------------------------------------------------------------


def mounts_under(root: Path) -> list[str]:
    """Mount points below ``root``."""
    prefix = str(root) + "/"
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            out.append(point)
    return out


def unmount_all(root: Path) -> None:
    """Unmount everything below ``root``, deepest first, lazily where a plain umount fails."""
    for _ in range(5):
        mounts = sorted(set(mounts_under(root)), key=lambda p: -p.count("/"))
        if not mounts:
            return
        for point in mounts:
            done = subprocess.run(["umount", point], capture_output=True, timeout=30, check=False)
            if done.returncode != 0:
                output(["umount", "-l", point], check=False, timeout_s=30)


def cni_cache(network: str, container_ids: set[str]) -> list[Path]:
    """CNI result files of a node's sandboxes (``<network>-<sandbox id>-<ifname>``)."""
    if not CNI_CACHE_DIR.exists():
        return []
    return [
        path
        for path in CNI_CACHE_DIR.iterdir()
        if path.name.startswith(f"{network}-")
        or any(f"-{cid}-" in path.name for cid in container_ids)
    ]


def remove_host_files(network: str, container_ids: set[str]) -> None:
    """Remove a node's CNI results, the device plugin socket (last node out), empty dirs."""
    for path in cni_cache(network, container_ids):
        path.unlink(missing_ok=True)
    if not any(exe.name == "kubelet" for exe in running_exes()):  # the last node out
        KUBELET_DEVICE_PLUGIN_SOCKET.unlink(missing_ok=True)
    for directory in HOST_DIRS:
        with contextlib.suppress(OSError):
            directory.rmdir()


__all__ = [
    "CGROUP_MOUNTS",
    "CNI_CACHE_DIR",
    "HOST_DIRS",
    "KUBELET_DEVICE_PLUGIN_SOCKET",
    "cgroup_hierarchies",
    "cni_cache",
    "kill_all",
    "kill_tasks",
    "make_cgroups",
    "mounts_under",
    "node_pids",
    "remove_cgroups",
    "remove_host_files",
    "running_exes",
    "unmount_all",
]

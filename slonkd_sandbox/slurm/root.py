"""A Debian root holding another SLURM release (24.11 from trixie), made with debootstrap.

The 22.05 clients cannot talk to a 24.11 controller, so the whole 24.11 cluster (munged,
slurmctld, slurmd) and its clients run inside this root through ``chroot``. The root is
built once (about a minute, 285 MB) and cached under ``~/.cache/slonkd/slurm-root/`` keyed
by suite and SLURM version; a marker file says it is complete, and a lock keeps two test
runs from building it at once. Nothing here touches the host's own SLURM.

    python -m slonkd_sandbox.slurm.root 24.11

(which also adds slurmdbd, see :func:`ensure_accounting`). :func:`ensure_dev` adds
``libslurm-dev`` (the release's headers) for :mod:`slonkd_sandbox.pyslurm_build`.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import sys
from pathlib import Path

from slonkd_sandbox.toolchain import user_cache

SUITES = {"24.11": "trixie"}
"""SLURM release -> the Debian suite that ships it."""

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
ACCOUNTING_PACKAGES = ("slurmdbd",)
"""Added on demand (:func:`ensure_accounting`): slurmdbd and its MySQL plugin. The database
itself runs on the host (any MariaDB speaks to any slurmdbd)."""
DEFAULT_MIRROR = "http://deb.debian.org/debian"
_MARKER = ".slonkd-complete"
_ACCOUNTING_MARKER = ".slonkd-accounting"
DEV_PACKAGES = ("libslurm-dev",)
"""Added on demand (:func:`ensure_dev`): the headers pyslurm is compiled against."""
_DEV_MARKER = ".slonkd-dev"


def root_cache() -> Path:
    """Where roots are cached (``SLONKD_ROOT_CACHE`` overrides)."""
    return user_cache("slurm-root", "SLONKD_ROOT_CACHE")


def configured_mirror() -> str:
    """The Debian mirror apt uses on this machine (first ``URIs:``/``deb`` line)."""
    candidates = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for path in candidates:
        if not path.exists():
            continue
        text = path.read_text()
        match = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or re.search(
            r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)\s", text, re.M
        )
        if match:
            return match.group(1)
    return DEFAULT_MIRROR


def slurm_root_path(version: str) -> Path:
    """The cache path of the root for ``version`` (it may not exist yet)."""
    return root_cache() / f"{SUITES[version]}-{version}"


def ensure_slurm_root(version: str = "24.11") -> Path:
    """The root with SLURM ``version`` installed: cached, else built with debootstrap."""
    if version not in SUITES:
        raise ValueError(f"no Debian suite known for SLURM {version}")
    final = slurm_root_path(version)
    if (final / _MARKER).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with (final.parent / f".{final.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / _MARKER).exists():
            return final
        building = final.with_name(final.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITES[version],
                str(building),
                configured_mirror(),
            ],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        got = subprocess.run(
            ["chroot", str(building), "slurmctld", "-V"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.split()
        if len(got) < 2 or not got[1].startswith(version):
            raise RuntimeError(f"root has SLURM {got}, wanted {version}")
        (building / _MARKER).write_text(f"slurm {got[1]}\n")
        building.rename(final)
    return final


def ensure_accounting(version: str = "24.11") -> Path:
    """The root for ``version`` with slurmdbd added (apt-get in the root, once; cached).

    Installed into the existing root rather than by a new debootstrap, so roots built
    before accounting existed gain it in seconds; daemons already running from the root
    are not disturbed (packages are only added). Services are kept from starting
    (``policy-rc.d``).
    """
    return _ensure_added(version, ACCOUNTING_PACKAGES, _ACCOUNTING_MARKER)


def ensure_dev(version: str = "24.11") -> Path:
    """The root for ``version`` with ``libslurm-dev`` added (its headers; once, cached).

    As :func:`ensure_accounting`: apt-get in the existing root, marker ``.slonkd-dev``.
    """
    return _ensure_added(version, DEV_PACKAGES, _DEV_MARKER)


def _ensure_added(version: str, packages: tuple[str, ...], marker: str) -> Path:
    """The root for ``version`` with ``packages`` installed by apt-get, ``marker`` written last."""
    final = ensure_slurm_root(version)
    if (final / marker).exists():
        return final
    with (final.parent / f".{final.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / marker).exists():
            return final
        shutil.copyfile("/etc/resolv.conf", final / "etc" / "resolv.conf")
        policy = final / "usr" / "sbin" / "policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
        for argv in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        ):
            proc = subprocess.run(
                ["chroot", str(final), *argv],
                capture_output=True,
                text=True,
                env=env,
                timeout=900,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} in {final}: {proc.stderr[-1500:]}")
        (final / marker).write_text(" ".join(packages) + "\n")
    return final


if __name__ == "__main__":
    print(ensure_accounting(sys.argv[1] if len(sys.argv) > 1 else "24.11"))

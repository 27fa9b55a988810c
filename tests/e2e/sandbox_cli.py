"""What the sandbox tests share: ``slonkd`` run as a user runs it, and leftover processes.

``slonkd`` is :func:`tests.cli.slonkd`, kept here for these tests' imports;
``private_sandbox_dir`` is where each puts its sandbox, ``sandbox_api`` reaches its apiserver.

``processes_naming`` finds what a sandbox directory leaves behind. Used by
``test_sandbox.py`` (process mode) and ``test_sandbox_real.py`` (the chart on the real node),
which add their own checks of mounts and network namespaces.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from slonkd_sandbox.kubeapi import KubeApi
from tests.cli import slonkd

__all__ = ["private_sandbox_dir", "processes_naming", "sandbox_api", "slonkd"]


@contextlib.contextmanager
def private_sandbox_dir(prefix: str, *, down_timeout_s: float) -> Iterator[Path]:
    """A private, short directory (unix socket paths) for a sandbox; afterwards it is downed.

    The directory is removed too unless ``SLONKD_KEEP_TEST_DIRS`` is set.
    """
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")) / "sb"
    try:
        yield root
    finally:
        if (root / "state.json").exists():
            slonkd("sandbox", "down", "--dir", str(root), timeout_s=down_timeout_s)
        if not os.environ.get("SLONKD_KEEP_TEST_DIRS"):
            shutil.rmtree(root.parent, ignore_errors=True)


def sandbox_api(state: Mapping[str, Any]) -> KubeApi:
    """A client of the sandbox's apiserver, from its ``state.json``."""
    return KubeApi(
        host=state["api"]["host"],
        port=int(state["api"]["port"]),
        ca_file=Path(state["api"]["ca_file"]),
        token=state["api"]["token"],
    )


def _mentions(pid: int, text: bytes) -> bool:
    try:
        proc = Path(f"/proc/{pid}")
        return text in (proc / "cmdline").read_bytes() or text in (proc / "environ").read_bytes()
    except OSError:
        return False


def processes_naming(root: Path) -> list[int]:
    """Live processes (other than this one) whose command line or environment names ``root``."""
    needle = str(root).encode()
    me = os.getpid()
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and int(p.name) != me and _mentions(int(p.name), needle)
    ]

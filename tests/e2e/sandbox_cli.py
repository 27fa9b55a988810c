"""What the sandbox tests share: ``slonkd`` run as a user runs it, and leftover processes.

``slonkd`` is :func:`tests.cli.slonkd`, kept here for these tests' imports;
``private_sandbox_dir`` is where each puts its sandbox, ``up_sandbox`` starts it there as a
user would (and reads its ``state.json``), ``sandbox_api`` reaches its apiserver.

``processes_naming`` finds what a sandbox directory leaves behind. Used by
``test_sandbox.py`` (process mode) and ``test_sandbox_real.py`` (the chart on the real node),
which add their own checks of mounts and network namespaces.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from slonkd_sandbox.kube.api import KubeApi
from tests.cli import slonkd

__all__ = ["private_sandbox_dir", "processes_naming", "sandbox_api", "slonkd", "up_sandbox"]


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


def up_sandbox(root: Path, *flags: str, timeout_s: float, hints: Sequence[str]) -> dict[str, Any]:
    """``slonkd sandbox up *flags --dir root --workers 3``: it succeeds and says each of ``hints``.

    Prints how long it took; returns the sandbox's ``state.json``.
    """
    began = time.monotonic()
    up = slonkd("sandbox", "up", *flags, "--dir", str(root), "--workers", "3", timeout_s=timeout_s)
    up_s = time.monotonic() - began
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-3000:]
    print(f"{' '.join(('sandbox', 'up', *flags))} took {up_s:.1f} s")
    for hint in hints:
        assert hint in up.stdout, hint
    state: dict[str, Any] = json.loads((root / "state.json").read_text())
    return state


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

"""What the sandbox tests share: ``slonkd`` run as a user runs it, and leftover processes.

``processes_naming`` finds what a sandbox directory leaves behind. Used by
``test_sandbox.py`` (process mode) and ``test_sandbox_real.py`` (the chart on the real node),
which add their own checks of mounts and network namespaces.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def slonkd(*argv: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``slonkd ARGV`` as a user would; its output is kept for the assertion message."""
    return subprocess.run(
        [sys.executable, "-m", "slonkd.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
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

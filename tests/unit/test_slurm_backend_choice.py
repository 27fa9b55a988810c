"""Choosing the SLURM backend: pyslurm only when it is installed and matches the installed SLURM."""

from __future__ import annotations

from pathlib import Path

import pytest

from slonkd.adapters.slurm import backend
from slonkd.adapters.slurm.backend import pyslurm_verdict

CASES = [
    (None, "22.05.8", False, "not installed"),
    ("25.11.0", "22.05.8", False, "does not match"),
    ("24.11.2", "24.11.5", True, "matches"),
    ("24.1.0", "24.11.5", False, "does not match"),
    ("22.5.3", "22.05.8", True, "matches"),  # pyslurm writes the minor without its zero
    ("22.5.3", "22.5.0", True, "matches"),
    ("2.5.3", "22.05.8", False, "does not match"),
    ("unknown", "22.05.8", False, "does not match"),
]


@pytest.mark.parametrize(("module", "slurm", "fits", "says"), CASES)
def test_pyslurm_verdict(module: str | None, slurm: str, fits: bool, says: str) -> None:
    """pyslurm fits only for the same major.minor release; the reason says why not."""
    ok, why = pyslurm_verdict(module, slurm)
    assert ok is fits
    assert says in why


def test_the_pyslurm_version_is_read_without_importing_pyslurm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import pyslurm`` runs ``slurm_init``, which ends the process without a config source.

    The version comes from the installed distribution's metadata, so choosing a backend at
    start never loads libslurm into the daemon (the pyslurm backend runs in a child).
    """
    package = tmp_path / "pyslurm"
    package.mkdir()
    (package / "__init__.py").write_text('raise SystemExit("fatal: Could not establish a source")')
    info = tmp_path / "pyslurm-22.5.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pyslurm\nVersion: 22.5.3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert backend._pyslurm_version() == "22.5.3"

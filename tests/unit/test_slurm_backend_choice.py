"""Choosing the SLURM backend: pyslurm only when it imports and matches the installed SLURM."""

from __future__ import annotations

import pytest

from slonkd.adapters.slurm.backend import pyslurm_verdict

CASES = [
    (None, "22.05.8", False, "not installed"),
    ("25.11.0", "22.05.8", False, "does not match"),
    ("24.11.2", "24.11.5", True, "matches"),
    ("24.1.0", "24.11.5", False, "does not match"),
]


@pytest.mark.parametrize(("module", "slurm", "fits", "says"), CASES)
def test_pyslurm_verdict(module: str | None, slurm: str, fits: bool, says: str) -> None:
    """pyslurm fits only for the same major.minor release; the reason says why not."""
    ok, why = pyslurm_verdict(module, slurm)
    assert ok is fits
    assert says in why

"""The SLURM outputs that ``tests/data/slurm/record.py`` recorded, one folder per release.

:func:`recorded` and :func:`recorded_source` serve the parser tests (``test_slurm_parsing*.py``,
``test_slurm_reason_nodes.py``, ``test_slurm_recent_table.py``, ``test_slurm_triggers.py``)
and the fleet exporter's (``test_fleet_metrics.py``); the contract tests read the real
daemons instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SLURM_DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RELEASES = ("22.05", "24.11")
"""The releases recorded (``tests/data/slurm/<release>/``)."""


def recorded(release: str, name: str) -> str:
    """The text of the recording ``name`` of SLURM ``release``."""
    return (SLURM_DATA / release / name).read_text()


def recorded_source(release: str, name: str) -> dict[str, Any]:
    """How ``name`` was recorded (its entry of ``sources.json``): command and slurm_version."""
    files: dict[str, dict[str, Any]] = json.loads(recorded(release, "sources.json"))["files"]
    return files[name]

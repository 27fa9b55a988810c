"""The SLURM outputs that ``tests/data/slurm/record.py`` recorded, one folder per release.

:func:`recorded` and :func:`recorded_source` serve the parser tests (``test_slurm_parsing*.py``,
``test_slurm_recent_table.py``, ``test_slurm_triggers.py``)
and the fleet exporter's (``test_fleet_metrics.py``); :func:`squeue_json_with` the tests of
job states (``test_slurm_job_states.py``, ``test_prestop_job_states.py``). The contract tests
read the real daemons instead.
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


def squeue_json_with(release: str, state: str | list[str]) -> str:
    """The recorded ``squeue --json`` of ``release`` with job 1's ``job_state`` set to ``state``.

    Job 1 is a batch job that may be requeued, running on n3; 22.05 writes its state as one
    word, 24.11 as a list (the base state, then the flags).
    """
    data: dict[str, Any] = json.loads(recorded(release, "squeue.json"))
    job = next(j for j in data["jobs"] if j["job_id"] == 1)
    assert (job["nodes"], job["batch_flag"], job["requeue"]) == ("n3", True, True)
    job["job_state"] = state
    return json.dumps(data)

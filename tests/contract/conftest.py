"""Fixtures for the SLURM adapter's contract tests: the adapter wired to a harness cluster."""

from __future__ import annotations

from typing import Any

import pytest

from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.testing.slurm import SlurmCluster


def settings_for(cluster: SlurmCluster, **overrides: Any) -> SlurmSettings:
    """Adapter settings that reach ``cluster``, with zero retry waits (tests do not sleep)."""
    base: dict[str, Any] = {
        "env": {"SLURM_CONF": str(cluster.conf)},
        "retry_wait_min_s": 0.0,
        "retry_wait_max_s": 0.0,
        "timeout_s": 30.0,
    }
    return SlurmSettings(**{**base, **overrides})


@pytest.fixture
def backend(slurm: SlurmCluster) -> ScontrolBackend:
    """The scontrol backend talking to the ``slurm`` cluster (n1..n4)."""
    return ScontrolBackend(settings_for(slurm))

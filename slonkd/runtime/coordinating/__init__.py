"""The coordinator (``slonkd coordinator``), one concept per module (being split)."""

from slonkd.runtime.coordinating.reconciling import (
    Coordinator,
    Snapshot,
    api_readiness,
    run_coordinator,
)
from slonkd.runtime.coordinating.settings import CoordinatorSettings

__all__ = ["Coordinator", "CoordinatorSettings", "Snapshot", "api_readiness", "run_coordinator"]

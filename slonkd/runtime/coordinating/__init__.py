"""The coordinator (``slonkd coordinator``), one concept per module (being split)."""

from slonkd.runtime.coordinating.reconciling import (
    Coordinator,
    CoordinatorSettings,
    Snapshot,
    api_readiness,
    run_coordinator,
)

__all__ = ["Coordinator", "CoordinatorSettings", "Snapshot", "api_readiness", "run_coordinator"]

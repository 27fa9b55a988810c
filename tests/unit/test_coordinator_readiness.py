"""The coordinator's readiness: ready while the Kubernetes API answers its Lease calls."""

from __future__ import annotations

from slonkd.runtime.coordinating import api_readiness


def test_never_answered_is_not_ready() -> None:
    """Before the first answer (wrong API address, policy, apiserver down) the pod is not Ready."""
    ok, why = api_readiness(None, 15.0)
    assert not ok
    assert "not answered yet" in why


def test_silent_past_one_lease_duration_is_not_ready() -> None:
    """A standby asks every retry period: silence past a lease duration is a broken path."""
    assert api_readiness(3.0, 15.0) == (True, "ready")
    assert api_readiness(15.0, 15.0) == (True, "ready")
    ok, why = api_readiness(40.2, 15.0)
    assert not ok
    assert "40 s" in why

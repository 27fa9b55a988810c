"""Pure pieces of the Kubernetes adapter: error mapping, lease timing rules.

The state ConfigMap's encoding is tested in ``tests/unit/test_coordinator_state.py``.
"""

from __future__ import annotations

import pytest

from slonkd.adapters.kube.errors import (
    Call,
    KubeConflict,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeTooManyRequests,
    KubeUnavailable,
    error_for_status,
)
from slonkd.adapters.kube.lease import LeaseSettings
from slonkd.core.errors import TerminalError, TransientError

CALL = Call(verb="patch", resource="nodes", name="n1")


@pytest.mark.parametrize(
    ("status", "kind", "base"),
    [
        (409, KubeConflict, TransientError),
        (404, KubeNotFound, TerminalError),
        (410, KubeGone, TransientError),
        (403, KubeForbidden, TerminalError),
        (422, KubeInvalid, TerminalError),
        (429, KubeTooManyRequests, TransientError),
        (500, KubeUnavailable, TransientError),
        (503, KubeUnavailable, TransientError),
    ],
)
def test_status_codes_become_slonkd_errors(status: int, kind: type, base: type) -> None:
    """Each HTTP status maps to its slonkd error, transient or terminal as documented."""
    err = error_for_status(status, b'{"message": "boom"}', CALL)
    assert isinstance(err, kind)
    assert isinstance(err, base)
    assert "boom" in str(err)


def test_forbidden_names_the_missing_rule() -> None:
    """A 403 names the RBAC rule that would allow the call."""
    call = Call(verb="create", resource="pods", subresource="eviction", namespace="slonk")
    err = error_for_status(403, "{}", call)
    assert 'resources: ["pods/eviction"], verbs: ["create"] in namespace slonk' in str(err)


@pytest.mark.parametrize(
    ("duration", "renew", "retry", "margin"),
    [(15, 10, 2, 0), (15, 10, 10, 2), (10, 15, 2, 2), (15, 10, 2, 15)],
)
def test_lease_settings_refuse_timings_that_cannot_be_safe(
    duration: float, renew: float, retry: float, margin: float
) -> None:
    """retry < renew deadline < duration and 0 < margin < duration, or the settings are refused."""
    with pytest.raises(ValueError, match="need"):
        LeaseSettings(
            name="l",
            namespace="n",
            identity="i",
            lease_duration_s=duration,
            renew_deadline_s=renew,
            retry_period_s=retry,
            safety_margin_s=margin,
        )


def test_lease_settings_defaults_are_client_gos() -> None:
    """The defaults are client-go's 15 s / 10 s / 2 s, with a 2 s safety margin."""
    s = LeaseSettings(name="l", namespace="n", identity="i")
    assert (s.lease_duration_s, s.renew_deadline_s, s.retry_period_s) == (15, 10, 2)
    assert s.safety_margin_s == 2

"""Bounded MQTT sessions and the credential endpoint's limits from the environment (issue 16).

A session the broker keeps for a client that is gone holds its subscriptions and queues what
they match: the coordinator's session (every node's status) must not outlive a reconnect by
much, an agent's must not outlive a pod restart by much, and none may last 7 days. The
limits of ``POST /v1/credentials`` are read from ``SLONKD_CREDENTIALS_*`` (the chart sets
them from values); a bad one is a one-line ValueError naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from slonkd.cli.bus_env import agent_bus_settings, coordinator_bus_settings, credential_settings

BROKER = {"SLONKD_MQTT_HOST": "mqtt", "SLONKD_MQTT_PORT": "1883"}
ADMIN = {**BROKER, "SLONKD_MQTT_ADMIN_USERNAME": "admin", "SLONKD_MQTT_ADMIN_PASSWORD": "pw"}


@pytest.mark.parametrize(
    "env",
    [ADMIN, {**BROKER, "SLONKD_MQTT_USER": "c", "SLONKD_MQTT_PASSWORD": "p"}],
    ids=["dynsec-client", "static-user"],
)
def test_the_coordinators_session_outlives_a_reconnect_only(env: dict[str, str]) -> None:
    """The coordinator's session (it subscribes to every node's status) expires within 2 min."""
    bus = coordinator_bus_settings(env, "slonkd-coordinator-c0")
    assert bus is not None
    assert 0 < bus.session_expiry_s <= 120


@pytest.mark.parametrize(
    "env",
    [
        {**BROKER, "SLONKD_COORDINATOR_URL": "http://coordinator:8081"},
        {**BROKER, "SLONKD_MQTT_USER": "a", "SLONKD_MQTT_PASSWORD": "p"},
    ],
    ids=["bootstrap", "static-user"],
)
def test_an_agents_session_lasts_at_most_an_hour(env: dict[str, str]) -> None:
    """An agent's session keeps commands across a pod restart, not for days (was 7 days)."""
    bus, _ = agent_bus_settings(env, "slonkd-agent-w-0")
    assert bus is not None
    assert 60 <= bus.session_expiry_s <= 3600


def credential_limits(
    env: Mapping[str, str],
) -> tuple[float, int, float, int, int, float, int, int]:
    """The eight limits of the credential API read from ``env``, in the variables' order."""
    s = credential_settings(env)
    assert s is not None
    return (
        s.source_rate, s.source_burst, s.global_rate, s.global_burst, s.per_pod_limit,
        s.per_pod_window_s, s.max_concurrent_reviews, s.max_body_bytes,
    )  # fmt: skip


def test_the_credential_limits_are_read_from_the_environment() -> None:
    """Every ``SLONKD_CREDENTIALS_*`` limit reaches the issuer's settings."""
    env = {
        **ADMIN,
        "SLONKD_CREDENTIALS_SOURCE_RATE": "0.25",
        "SLONKD_CREDENTIALS_SOURCE_BURST": "4",
        "SLONKD_CREDENTIALS_GLOBAL_RATE": "5",
        "SLONKD_CREDENTIALS_GLOBAL_BURST": "20",
        "SLONKD_CREDENTIALS_PER_POD_LIMIT": "2",
        "SLONKD_CREDENTIALS_PER_POD_WINDOW_S": "30",
        "SLONKD_CREDENTIALS_MAX_CONCURRENT_REVIEWS": "3",
        "SLONKD_CREDENTIALS_MAX_BODY_BYTES": "0",
    }
    assert credential_limits(env) == (0.25, 4, 5.0, 20, 2, 30.0, 3, 0)
    default = credential_settings(ADMIN)
    assert default is not None
    assert (default.source_rate, default.global_burst) == (0.5, 50)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("SLONKD_CREDENTIALS_SOURCE_RATE", "fast"),
        ("SLONKD_CREDENTIALS_SOURCE_RATE", "0"),
        ("SLONKD_CREDENTIALS_GLOBAL_BURST", "2.5"),
        ("SLONKD_CREDENTIALS_PER_POD_LIMIT", "0"),
        ("SLONKD_CREDENTIALS_MAX_BODY_BYTES", "-1"),
        ("SLONKD_CREDENTIALS_PER_POD_WINDOW_S", "nan"),
    ],
)
def test_a_bad_credential_limit_is_one_line_naming_the_variable(key: str, value: str) -> None:
    """A bad limit is refused at load with a ValueError that names its variable."""
    with pytest.raises(ValueError, match=key) as caught:
        credential_settings({**ADMIN, key: value})
    assert "\n" not in str(caught.value)

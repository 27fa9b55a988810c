"""Plain text is said once at start: the agent and the coordinator name each channel without TLS.

Settings are loaded from the environment by the roles' own loaders, as the chart renders it
with ``tls.enabled`` false (no CA file, an http URL, no API certificate) and true: without
TLS there is one ``bus.plain_text`` and one ``api.plain_text`` warning per role, saying why;
with TLS there is none.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

import pytest
from structlog.testing import capture_logs

from slonkd.cli.agent import load_settings as agent_settings
from slonkd.cli.coordinator import load_settings as coordinator_settings
from slonkd.runtime.agent.sidecar import say_plain_text as agent_says
from slonkd.runtime.coordinating.leading import say_plain_text as coordinator_says
from slonkd_sandbox.tls import ServerCert, make_ca, make_server_cert

AGENT = {"POD_NAME": "w-0", "POD_NAMESPACE": "ns", "NODE_NAME": "n1", "SLONKD_METRICS_PORT": "0"}
COORDINATOR = {"POD_NAMESPACE": "ns", "POD_NAME": "c-0"}
BROKER = {"SLONKD_MQTT_HOST": "mosquitto", "SLONKD_MQTT_PORT": "1883"}
ADMIN = {**BROKER, "SLONKD_MQTT_ADMIN_USERNAME": "admin", "SLONKD_MQTT_ADMIN_PASSWORD": "pw"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> ServerCert:
    """A CA and a certificate it signed."""
    root = tmp_path_factory.mktemp("pki")
    return make_server_cert(make_ca(root), root)


def _said(logs: Sequence[MutableMapping[str, Any]]) -> dict[str, str]:
    return {str(e["event"]): str(e["detail"]) for e in logs if e["log_level"] == "warning"}


def test_an_agent_without_tls_says_so_once() -> None:
    """Plain MQTT and an http credentials URL: one warning each, naming the choice."""
    env = {**AGENT, **BROKER, "SLONKD_COORDINATOR_URL": "http://coordinator:8081"}
    with capture_logs() as logs:
        agent_says(agent_settings(env))
    said = _said(logs)
    assert len(logs) == 2
    assert "plain MQTT to mosquitto:1883 was chosen: no CA file" in said["bus.plain_text"]
    assert "tls.enabled false" in said["bus.plain_text"]
    assert said["api.plain_text"].endswith("plain HTTP: http://coordinator:8081/v1/credentials")
    assert {e["role"] for e in logs} == {"agent"}


def test_an_agent_with_tls_or_without_a_bus_says_nothing(server: ServerCert) -> None:
    """The CA and an https URL: no warning; an agent with no broker at all: none either."""
    env = {
        **AGENT, **BROKER, "SLONKD_COORDINATOR_URL": "https://coordinator:8081",
        "SLONKD_MQTT_TLS_CA_FILE": str(server.ca),
    }  # fmt: skip
    with capture_logs() as logs:
        agent_says(agent_settings(env))
        agent_says(agent_settings(AGENT))
    assert logs == []


def test_a_coordinator_without_tls_says_so_once() -> None:
    """Plain MQTT for its bus and dynsec admin, plain HTTP on its API port: one warning each."""
    with capture_logs() as logs:
        coordinator_says(coordinator_settings({**COORDINATOR, **ADMIN}))
    said = _said(logs)
    assert len(logs) == 2
    assert said["bus.plain_text"].startswith("plain MQTT for the bus and the dynsec admin")
    assert said["api.plain_text"].startswith("the API serves plain HTTP on port 8081")
    assert {e["role"] for e in logs} == {"coordinator"}


def test_a_coordinator_with_tls_says_nothing(server: ServerCert) -> None:
    """The broker's CA and the API's certificate: no warning."""
    env = {
        **COORDINATOR, **ADMIN, "SLONKD_MQTT_TLS_CA_FILE": str(server.ca),
        "SLONKD_API_TLS_CERT_FILE": str(server.cert), "SLONKD_API_TLS_KEY_FILE": str(server.key),
    }  # fmt: skip
    with capture_logs() as logs:
        coordinator_says(coordinator_settings(env))
    assert logs == []

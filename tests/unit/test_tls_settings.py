"""TLS settings from the environment: every client of the broker gets the CA, bad files exit 2.

``SLONKD_MQTT_TLS_CA_FILE`` turns on TLS for every MQTT client a process makes (the agent's
and the coordinator's bus, the coordinator's dynsec admin, ``slonkd-nudge``);
``SLONKD_MQTT_BOOTSTRAP_CA`` verifies the coordinator's https credentials endpoint. A file
that is missing or no CA bundle stops the command at load with exit 2 and one line naming
the variable, never a traceback at the first connect.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slonkd.cli.bus_env import agent_bus_settings, coordinator_bus_settings, credential_settings
from slonkd.cli.config import bus_settings
from slonkd_sandbox.tls import make_ca
from tests.unit.test_settings_cli import _assert_refused, _run

AGENT = {"POD_NAME": "w-0", "POD_NAMESPACE": "ns", "NODE_NAME": "n1", "SLONKD_METRICS_PORT": "0"}
COORDINATOR = {"POD_NAMESPACE": "ns", "POD_NAME": "c-0"}
BROKER = {"SLONKD_MQTT_HOST": "mosquitto", "SLONKD_MQTT_PORT": "8883"}
STATIC = {**BROKER, "SLONKD_MQTT_USER": "u", "SLONKD_MQTT_PASSWORD": "p"}
ADMIN = {**BROKER, "SLONKD_MQTT_ADMIN_USERNAME": "admin", "SLONKD_MQTT_ADMIN_PASSWORD": "pw"}
BOOTSTRAP = {**BROKER, "SLONKD_COORDINATOR_URL": "https://coordinator:8081"}


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real CA bundle (PEM)."""
    return str(make_ca(tmp_path_factory.mktemp("pki")).cert)


def _bad_files(tmp_path: Path) -> list[str]:
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    return [str(tmp_path / "missing.pem"), str(junk)]


def test_every_broker_client_gets_the_ca(ca: str) -> None:
    """With ``SLONKD_MQTT_TLS_CA_FILE`` every broker client's settings carry the CA.

    The agent's bus (static or bootstrapped), the coordinator's bus (static or through
    dynsec), its dynsec admin and the nudge's settings; without the variable none does.
    """
    tls = {"SLONKD_MQTT_TLS_CA_FILE": ca}
    static = bus_settings({**STATIC, **tls}, "x")
    agent_static, _ = agent_bus_settings({**STATIC, **tls}, "a")
    agent_boot, boot = agent_bus_settings({**BOOTSTRAP, **tls}, "a")
    coord_static = coordinator_bus_settings({**STATIC, **tls}, "c")
    coord_dynsec = coordinator_bus_settings({**ADMIN, **tls}, "c")
    admin = credential_settings({**ADMIN, **tls})
    found = [static, agent_static, agent_boot, coord_static, coord_dynsec]
    assert [getattr(b, "ca_file", "absent") for b in found] == [ca] * 5
    assert getattr(admin, "admin_ca_file", "absent") == ca
    assert getattr(boot, "url", "") == "https://coordinator:8081/v1/credentials"
    assert getattr(bus_settings(STATIC, "x"), "ca_file", "absent") is None
    assert getattr(credential_settings(ADMIN), "admin_ca_file", "absent") is None


def test_the_bootstrap_ca_is_checked_at_load(ca: str, tmp_path: Path) -> None:
    """A readable ``SLONKD_MQTT_BOOTSTRAP_CA`` is passed on; a bad one is a ValueError naming it."""
    _, boot = agent_bus_settings({**BOOTSTRAP, "SLONKD_MQTT_BOOTSTRAP_CA": ca}, "a")
    assert getattr(boot, "ca_file", "absent") == ca
    for bad in _bad_files(tmp_path):
        with pytest.raises(ValueError, match="SLONKD_MQTT_BOOTSTRAP_CA"):
            agent_bus_settings({**BOOTSTRAP, "SLONKD_MQTT_BOOTSTRAP_CA": bad}, "a")


@pytest.mark.parametrize("which", ["missing", "junk"])
def test_the_agent_refuses_a_bad_broker_ca(tmp_path: Path, which: str) -> None:
    """``slonkd agent`` with a missing or malformed broker CA exits 2, one line naming it."""
    bad = dict(zip(("missing", "junk"), _bad_files(tmp_path), strict=True))[which]
    env = {**AGENT, **STATIC, "SLONKD_MQTT_TLS_CA_FILE": bad}
    _assert_refused(*_run(tmp_path, "agent", {}, env), "SLONKD_MQTT_TLS_CA_FILE")


@pytest.mark.parametrize("which", ["missing", "junk"])
def test_the_coordinator_refuses_a_bad_broker_ca(tmp_path: Path, which: str) -> None:
    """``slonkd coordinator`` (dynsec admin) with a bad broker CA exits 2, one line naming it."""
    bad = dict(zip(("missing", "junk"), _bad_files(tmp_path), strict=True))[which]
    env = {**COORDINATOR, **ADMIN, "SLONKD_MQTT_TLS_CA_FILE": bad}
    _assert_refused(*_run(tmp_path, "coordinator", {}, env), "SLONKD_MQTT_TLS_CA_FILE")


def test_the_agent_refuses_a_bad_bootstrap_ca(tmp_path: Path) -> None:
    """``slonkd agent`` with a missing ``SLONKD_MQTT_BOOTSTRAP_CA`` exits 2 naming it."""
    env = {**AGENT, **BOOTSTRAP, "SLONKD_MQTT_BOOTSTRAP_CA": str(tmp_path / "missing.pem")}
    _assert_refused(*_run(tmp_path, "agent", {}, env), "SLONKD_MQTT_BOOTSTRAP_CA")


def test_the_api_certificate_and_key_load_together(tmp_path: Path) -> None:
    """``SLONKD_API_TLS_CERT_FILE`` and ``_KEY_FILE`` give the coordinator an HTTPS API."""
    from slonkd.cli.coordinator import load_settings
    from slonkd_sandbox.tls import make_server_cert

    server = make_server_cert(make_ca(tmp_path), tmp_path)
    env = {**COORDINATOR, "SLONKD_API_TLS_CERT_FILE": str(server.cert)}
    s = load_settings({**env, "SLONKD_API_TLS_KEY_FILE": str(server.key)})
    assert s.api_tls is not None
    assert (s.api_tls.cert_file, s.api_tls.key_file) == (str(server.cert), str(server.key))
    assert load_settings(COORDINATOR).api_tls is None


@pytest.mark.parametrize("case", ["cert-only", "key-only", "missing", "key-mismatch"])
def test_the_coordinator_refuses_a_bad_api_certificate(tmp_path: Path, case: str) -> None:
    """Half a pair, a missing file or a key of another certificate: exit 2, one line naming it."""
    from slonkd_sandbox.tls import make_server_cert

    ca = make_ca(tmp_path)
    one = make_server_cert(ca, tmp_path, "one")
    two = make_server_cert(ca, tmp_path, "two")
    env = {
        "cert-only": {"SLONKD_API_TLS_CERT_FILE": str(one.cert)},
        "key-only": {"SLONKD_API_TLS_KEY_FILE": str(one.key)},
        "missing": {
            "SLONKD_API_TLS_CERT_FILE": str(tmp_path / "none.crt"),
            "SLONKD_API_TLS_KEY_FILE": str(one.key),
        },
        "key-mismatch": {
            "SLONKD_API_TLS_CERT_FILE": str(one.cert),
            "SLONKD_API_TLS_KEY_FILE": str(two.key),
        },
    }[case]
    rc, stderr = _run(tmp_path, "coordinator", {}, {**COORDINATOR, **env})
    _assert_refused(rc, stderr, "SLONKD_API_TLS_")

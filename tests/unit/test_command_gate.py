"""The agent's command gate: own node, known action, no repeats, no stale fencing tokens."""

from __future__ import annotations

import pytest

from slonkd.cli.bus_env import agent_bus_settings, coordinator_bus_settings, credential_settings
from slonkd.core.command_gate import RECHECK, CommandGate, Refusal
from slonkd.core.messages import Command, CoordinatorStatus


def cmd(
    cid: str = "cmd-00000001", *, token: int = 5, node: str = "n1", action: str = RECHECK
) -> Command:
    """A command with the given id, fencing token, node and action."""
    return Command(id=cid, node=node, action=action, cause="operator-recheck", fencing_token=token)


@pytest.mark.parametrize(
    ("command", "topic_node", "refusal"),
    [
        (cmd(), "n1", None),
        (cmd(node="n2"), "n1", Refusal.OTHER_NODE),
        (cmd(), "n2", Refusal.OTHER_NODE),
        (cmd(), None, Refusal.OTHER_NODE),
        (cmd(action="reboot"), "n1", Refusal.UNKNOWN_ACTION),
        (cmd(token=4), "n1", Refusal.STALE_TOKEN),
        (cmd(token=5), "n1", None),
        (cmd(token=9), "n1", None),
    ],
)
def test_one_command_against_a_gate_that_has_seen_token_5(
    command: Command, topic_node: str | None, refusal: Refusal | None
) -> None:
    """A command is obeyed only for this node, a known action and a token >= the newest seen."""
    gate = CommandGate(node="n1")
    gate.observe(CoordinatorStatus(online=True, leader="c-0", fencing_token=5))
    assert gate.admit(command, topic_node=topic_node) is refusal
    assert gate.seen(command.id) is (refusal is None)


def test_a_repeat_is_refused_and_a_refused_command_changes_nothing() -> None:
    """The same id twice is obeyed once; a stale command is neither obeyed nor remembered."""
    gate = CommandGate(node="n1")
    assert gate.admit(cmd("cmd-aaaaaaaa", token=7), topic_node="n1") is None
    assert gate.admit(cmd("cmd-aaaaaaaa", token=7), topic_node="n1") is Refusal.REPEAT
    assert gate.admit(cmd("cmd-bbbbbbbb", token=6), topic_node="n1") is Refusal.STALE_TOKEN
    assert gate.newest_token == 7
    assert not gate.seen("cmd-bbbbbbbb")


def test_a_newer_leaders_command_raises_the_floor_for_the_older_leader() -> None:
    """Once a command of token 8 was obeyed, a later-arriving command of token 7 is stale."""
    gate = CommandGate(node="n1")
    assert gate.admit(cmd("cmd-new00000", token=8), topic_node="n1") is None
    assert gate.admit(cmd("cmd-old00000", token=7), topic_node="n1") is Refusal.STALE_TOKEN


def test_an_older_coordinator_status_does_not_lower_the_floor() -> None:
    """observe() only ever raises the newest token (a stale retained status cannot lower it)."""
    gate = CommandGate(node="n1")
    assert gate.observe(CoordinatorStatus(online=True, fencing_token=9))
    assert not gate.observe(CoordinatorStatus(online=False, fencing_token=3))
    assert gate.newest_token == 9


def test_memory_is_bounded_and_forgets_the_oldest_ids() -> None:
    """With memory 3, the gate keeps only the last three obeyed ids."""
    gate = CommandGate(node="n1", memory=3)
    ids = [f"cmd-{i:08d}" for i in range(5)]
    for cid in ids:
        assert gate.admit(cmd(cid), topic_node="n1") is None
    assert [gate.seen(c) for c in ids] == [False, False, True, True, True]
    with pytest.raises(ValueError, match="memory"):
        CommandGate(node="n1", memory=0)


def test_agent_bus_settings_static_and_bootstrap() -> None:
    """Static user/password keep working; a bootstrap URL needs a host and yields no password."""
    static = {"SLONKD_MQTT_HOST": "b", "SLONKD_MQTT_USER": "u", "SLONKD_MQTT_PASSWORD": "p"}
    bus, boot = agent_bus_settings(static, "cid")
    assert bus is not None
    assert (bus.username, bus.password) == ("u", "p")
    assert boot is None
    env = {"SLONKD_MQTT_HOST": "b", "SLONKD_MQTT_BOOTSTRAP_URL": "http://c:8081/v1/credentials"}
    bus, boot = agent_bus_settings({**env, "SLONKD_TOKEN_FILE": "/t"}, "cid")
    assert bus is not None
    assert (bus.password, bus.port) == ("", 1883)
    assert boot is not None
    assert (boot.token_file, boot.url) == ("/t", env["SLONKD_MQTT_BOOTSTRAP_URL"])
    with pytest.raises(ValueError, match="SLONKD_MQTT_HOST"):
        agent_bus_settings({"SLONKD_MQTT_BOOTSTRAP_URL": env["SLONKD_MQTT_BOOTSTRAP_URL"]}, "c")
    with pytest.raises(ValueError, match="http"):
        agent_bus_settings({**env, "SLONKD_MQTT_BOOTSTRAP_URL": "file:///etc/passwd"}, "c")
    assert agent_bus_settings({}, "c") == (None, None)
    chart = {"SLONKD_MQTT_HOST": "b", "SLONKD_COORDINATOR_URL": "http://coord:8081/"}
    _, boot = agent_bus_settings(chart, "cid")
    assert boot is not None
    assert boot.url == "http://coord:8081/v1/credentials"
    _, boot = agent_bus_settings({**chart, **static}, "cid")
    assert boot is None  # a static user wins


def test_coordinator_bus_settings_make_their_own_client_with_a_dynsec_admin() -> None:
    """Without an MQTT user but with the dynsec admin, the coordinator's bus has no password."""
    admin = {"SLONKD_MQTT_HOST": "b", "SLONKD_MQTT_ADMIN_USERNAME": "admin"}
    own = coordinator_bus_settings(admin, "cid")
    assert own is not None
    assert (own.username, own.password) == ("", "")
    static = coordinator_bus_settings(
        {**admin, "SLONKD_MQTT_USER": "c", "SLONKD_MQTT_PASSWORD": "p"}, "cid"
    )
    assert static is not None
    assert (static.username, static.password) == ("c", "p")
    with pytest.raises(ValueError, match="SLONKD_MQTT_USER"):
        coordinator_bus_settings({"SLONKD_MQTT_HOST": "b"}, "cid")


def test_credential_settings_from_env() -> None:
    """The issuer is off without an admin user, and needs a broker and a password with one."""
    assert credential_settings({}) is None
    with pytest.raises(ValueError, match="password"):
        credential_settings({"SLONKD_MQTT_ADMIN_USERNAME": "admin", "SLONKD_MQTT_HOST": "b"})
    s = credential_settings(
        {
            "SLONKD_MQTT_ADMIN_USERNAME": "admin",
            "SLONKD_MQTT_ADMIN_PASSWORD": "pw",
            "SLONKD_MQTT_HOST": "b",
            "SLONKD_MQTT_PORT": "1884",
            "SLONKD_TOKEN_AUDIENCE": "slonkd, ,other",
        }
    )
    assert s is not None
    assert (s.admin_host, s.admin_port, tuple(s.audiences)) == ("b", 1884, ("slonkd", "other"))

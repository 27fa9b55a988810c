"""Bus topics and payloads: round trips, and every malformed or forged input refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.core.errors import ParseError
from slonkd.core.messages import (
    MAX_PAYLOAD_BYTES,
    AgentEvent,
    AgentStatus,
    Channel,
    Command,
    CoordinatorStatus,
    Topic,
    coordinator_topic,
    decode,
    encode,
    node_topic,
    parse_topic,
)

CMD = Command(
    id="c0ffee00c0ffee00",
    node="n1",
    action="drain",
    cause="k8s-cordoned",
    fencing_token=7,
    detail="node kn-1 cordoned",
    at=1.5,
)
STATUS_T = node_topic("lab", "n1", Channel.STATUS)
CMD_T = node_topic("lab", "n1", Channel.COMMANDS)


@pytest.mark.parametrize(
    ("topic", "payload"),
    [
        (STATUS_T, AgentStatus(node="n1", online=True, pod="worker-1", health={"gpu": "ok"})),
        (STATUS_T, AgentStatus(node="n1", online=False)),
        (node_topic("lab", "n1", Channel.EVENTS), AgentEvent(node="n1", event="health.changed")),
        (CMD_T, CMD),
        (coordinator_topic("lab"), CoordinatorStatus(online=True, leader="c-0", fencing_token=3)),
    ],
)
def test_every_payload_round_trips_through_its_topic(topic: Topic, payload: Any) -> None:
    """encode() then decode() on the payload's own topic gives the same value back."""
    assert decode(parse_topic(str(topic)), encode(payload)) == payload


def test_topic_strings_parse_back() -> None:
    """Topic strings follow the documented layout and parse to the same Topic."""
    assert str(CMD_T) == "slonk/v1/lab/nodes/n1/commands"
    assert str(coordinator_topic("lab")) == "slonk/v1/lab/coordinator/status"
    for topic in (STATUS_T, CMD_T, coordinator_topic("lab")):
        assert parse_topic(str(topic)) == topic


@pytest.mark.parametrize(
    "topic",
    [
        "slonk/v1/lab/nodes/n1",
        "slonk/v1/lab/nodes/n1/status/extra",
        "slonk/v2/lab/nodes/n1/status",
        "slonk/v1/lab/nodes/+/status",
        "slonk/v1/lab/nodes/#/commands",
        "slonk/v1/lab/nodes/../commands",
        "slonk/v1/lab/nodes/n1/coordinator",
        "slonk/v1/lab/nodes/n1/secrets",
        "slonk/v1/la b/nodes/n1/status",
        "",
    ],
)
def test_topics_outside_the_layout_are_refused(topic: str) -> None:
    """Wildcards, wrong versions, unknown channels and odd names are not topics of ours."""
    with pytest.raises(ParseError):
        parse_topic(topic)


def _cmd_body(**changes: Any) -> bytes:
    body = json.loads(encode(CMD))
    body.update(changes)
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"", "empty"),
        (b"\xff\xfe", "not utf-8"),
        (b"[1, 2]", "not an object"),
        (b'{"v": 1', "truncated"),
        (_cmd_body(v=2), "future version"),
        (_cmd_body(v="1"), "version as a string"),
        (_cmd_body(kind="agent-status"), "kind of another topic"),
        (_cmd_body(node="n2"), "another node's command on n1's topic"),
        (_cmd_body(fencing_token="7"), "token as a string"),
        (_cmd_body(fencing_token=True), "token as a bool"),
        (_cmd_body(fencing_token=-1), "negative token"),
        (_cmd_body(id="short"), "id too short"),
        (_cmd_body(id="a b c d e f g h"), "id with spaces"),
        (_cmd_body(detail="x" * 5000), "overlong detail"),
        (_cmd_body(action=None), "missing action"),
        (_cmd_body(admin=True), "unknown field"),
        (b'{"v": 1, "kind": "command", "x": "' + b"a" * MAX_PAYLOAD_BYTES + b'"}', "oversized"),
        (b"[" * 100000 + b"]" * 100000, "deep nesting"),
    ],
)
def test_malformed_or_forged_commands_are_refused(raw: bytes, why: str) -> None:
    """Each broken or forged command payload raises ParseError and yields no command."""
    with pytest.raises(ParseError):
        decode(CMD_T, raw)


def test_health_map_must_be_short_names_to_short_verdicts() -> None:
    """A status whose health map carries odd keys or long values is refused."""
    body = json.loads(encode(AgentStatus(node="n1", online=True)))
    body["health"] = {"gpu;rm -rf": "ok"}
    with pytest.raises(ParseError):
        decode(STATUS_T, json.dumps(body).encode())
    body["health"] = {"gpu": "x" * 100}
    with pytest.raises(ParseError):
        decode(STATUS_T, json.dumps(body).encode())


def _command_for_n1_or_refused(raw: bytes) -> Command | None:
    """The command ``raw`` decodes to, asserted to be for n1; None where it raised ParseError."""
    try:
        result = decode(CMD_T, raw)
    except ParseError:
        return None
    assert isinstance(result, Command)
    assert result.node == "n1"
    return result


@given(st.binary(max_size=4096))
def test_arbitrary_bytes_never_crash_the_decoder(raw: bytes) -> None:
    """Any bytes either decode to a valid command for n1 or raise ParseError, nothing else."""
    _command_for_n1_or_refused(raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@given(
    st.dictionaries(
        st.sampled_from(
            ["v", "kind", "id", "node", "action", "cause", "fencing_token", "detail", "at", "extra"]
        ),
        json_values,
        max_size=10,
    )
)
def test_arbitrary_json_objects_never_crash_the_decoder(body: dict[str, Any]) -> None:
    """Any JSON object either is a well-formed command for n1 or raises ParseError."""
    try:
        raw = json.dumps(body).encode()
    except ValueError:
        return
    result = _command_for_n1_or_refused(raw)
    assert result is None or isinstance(result.fencing_token, int)


def test_slurm_events_round_trip_and_refuse_junk() -> None:
    """A trigger's event round-trips on its topic; unknown events and odd hostlists are refused."""
    from slonkd.core.messages import SlurmEvent, slurm_events_topic

    topic = slurm_events_topic("lab")
    assert str(topic) == "slonk/v1/lab/slurm/events"
    assert parse_topic(str(topic)) == topic
    event = SlurmEvent(event="drained", nodes="w-[0-3,7]", at=2.0)
    assert decode(topic, encode(event)) == event
    for bad in (
        SlurmEvent(event="reboot", nodes="n1"),
        SlurmEvent(event="down", nodes="n1;rm -rf /"),
        SlurmEvent(event="down", nodes=""),
    ):
        with pytest.raises(ParseError):
            decode(topic, encode(bad))

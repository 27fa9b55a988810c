"""slurmctld's trigger runs slonkd-nudge, which reaches a subscriber over the real broker."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import aiomqtt
import pytest

from slonkd.adapters.slurm.runner import CommandRunner, SlurmSettings
from slonkd.adapters.slurm.triggers import TriggerEvent, Triggers
from slonkd.core.messages import SlurmEvent, decode, parse_topic, slurm_events_topic
from slonkd_sandbox.mosquitto import Mosquitto, MqttUser
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout

pytestmark = [pytest.mark.slurm, pytest.mark.mqtt]


async def test_a_drain_reaches_the_coordinator_topic_through_strigger(
    slurm_factory: Callable[..., SlurmCluster], session_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node drained in SLURM fires the PERM trigger; slonkd-nudge publishes it (<= 20 s)."""
    broker = Mosquitto(
        Path(tempfile.mkdtemp(prefix="nudge-", dir=session_root)),
        users={
            "ctld": MqttUser(password="ctld-pw", acl=("topic write slonk/v1/lab/slurm/events",)),
            "coord": MqttUser(password="coord-pw", acl=("topic read slonk/#",)),
        },
    )
    await asyncio.to_thread(broker.start)
    try:
        # slurmctld runs its triggers with its own environment: the cluster starts with these
        for key, value in {
            "SLONKD_MQTT_HOST": broker.host,
            "SLONKD_MQTT_PORT": str(broker.port),
            "SLONKD_MQTT_USER": "ctld",
            "SLONKD_MQTT_PASSWORD": "ctld-pw",
            "SLONKD_CLUSTER": "lab",
        }.items():
            monkeypatch.setenv(key, value)
        cluster = await asyncio.to_thread(slurm_factory, SlurmLayout(nodes=("n1", "n2")))
        program = str(
            Path(sys.executable).parent / "slonkd-nudge"
        )  # the console script of this venv
        runner = CommandRunner(SlurmSettings(env={"SLURM_CONF": str(cluster.conf)}))
        await Triggers(runner).ensure(program, (TriggerEvent.DRAINED,))
        async with aiomqtt.Client(
            broker.host,
            broker.port,
            username="coord",
            password="coord-pw",
            protocol=aiomqtt.ProtocolVersion.V5,
        ) as coord:
            await coord.subscribe(str(slurm_events_topic("lab")), qos=1)
            await asyncio.to_thread(
                cluster.run, "scontrol", "update", "nodename=n2", "state=drain", "reason=nudge me"
            )
            async with asyncio.timeout(40):
                message = await anext(aiter(coord.messages))
        assert isinstance(message.payload, bytes)
        event = decode(parse_topic(str(message.topic)), message.payload)
        assert isinstance(event, SlurmEvent)
        assert (event.event, event.nodes) == ("drained", "n2")
    finally:
        await asyncio.to_thread(broker.stop)

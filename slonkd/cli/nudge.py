"""``slonkd-nudge [--by=OWNER] EVENT HOSTLIST``: the program slurmctld's triggers run.

``strigger`` runs it as ``<program> --by=<owner> <event> <hostlist>`` where slurmctld runs
(the owner tag marks whose trigger it is, see :mod:`slonkd.adapters.slurm.triggers`; it is
optional and otherwise ignored here), and it tells
the coordinator over MQTT (slurmctld and the coordinator are different pods) by publishing a
:class:`~slonkd.core.messages.SlurmEvent` to ``slonk/v1/<cluster>/slurm/events``. The
coordinator then reads SLURM at once instead of at its next resync. MQTT settings come from
the environment (``SLONKD_MQTT_*``, TLS with ``SLONKD_MQTT_TLS_CA_FILE``; ``SLONKD_CLUSTER``).
It never blocks slurmctld for long: one publish with a deadline, and exit 0 even when the
broker is away (the periodic read is the fast path, triggers only a backstop); bad
arguments exit 2.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence

import aiomqtt

from slonkd.adapters.bus.client import tls_context
from slonkd.cli.config import bus_settings
from slonkd.core.errors import ParseError
from slonkd.core.messages import SlurmEvent, decode, encode, slurm_events_topic

DEADLINE_S = 5.0


async def _publish(event: SlurmEvent, cluster: str) -> None:
    settings = bus_settings(os.environ, f"slonkd-nudge-{os.getpid()}")
    if settings is None:
        raise ValueError("SLONKD_MQTT_HOST is not set")
    topic = slurm_events_topic(cluster)
    async with (
        asyncio.timeout(DEADLINE_S),
        aiomqtt.Client(
            settings.host,
            settings.port,
            username=settings.username,
            password=settings.password,
            identifier=settings.client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
            timeout=DEADLINE_S,
            tls_context=tls_context(settings.ca_file),
        ) as client,
    ):
        await client.publish(str(topic), encode(event), qos=1)


def main(argv: Sequence[str] | None = None) -> int:
    """Publish one SLURM event; 0 unless the arguments are wrong."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0].startswith("--by="):
        args = args[1:]  # the trigger's owner tag
    if len(args) != 2:
        print("usage: slonkd-nudge [--by=OWNER] EVENT HOSTLIST", file=sys.stderr)
        return 2
    cluster = os.environ.get("SLONKD_CLUSTER", "lab")
    event = SlurmEvent(event=args[0], nodes=args[1], at=time.time())
    try:
        decode(slurm_events_topic(cluster), encode(event))  # the same checks the coordinator makes
    except (ParseError, ValueError) as exc:
        print(f"slonkd-nudge: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_publish(event, cluster))
    except (aiomqtt.MqttError, TimeoutError, OSError, ValueError) as exc:
        print(
            f"slonkd-nudge: could not tell the coordinator ({exc}); it sees it at its next read",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One admin connection to mosquitto's dynamic-security plugin: batches out, their answers back.

:func:`open_link` connects as the dynsec admin (TLS when its arguments say so), subscribes to
the plugin's response topic and yields a :class:`Link`, which sends one batch of
commands to ``$CONTROL/dynamic-security/v1`` at a time and takes the answer tagged with that
batch's correlation data. What is asked over it (issue, check and delete clients) is
:class:`~slonkd.adapters.bus.dynsec.DynSecAdmin`'s (:mod:`.dynsec`); the clients' names and
roles are :mod:`.dynsec_roles`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiomqtt

from slonkd.core.errors import TerminalError, TransientError

CONTROL_TOPIC = "$CONTROL/dynamic-security/v1"
RESPONSE_TOPIC = f"{CONTROL_TOPIC}/response"


def _answers(responses: list[Any], tag: str) -> bool:
    """Whether ``responses`` answer the batch tagged ``tag`` (see :meth:`Link.ask`)."""
    return any(
        isinstance(r, dict) and str(r.get("correlationData", "")).startswith(f"{tag}-")
        for r in responses
    )


class Link:
    """One admin connection to dynsec (see :func:`open_link`): batches asked in turn."""

    def __init__(self, client: aiomqtt.Client) -> None:
        self._client = client

    async def ask(self, commands: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send one batch of commands and return the broker's responses, in order.

        Every admin connection gets every answer on the one response topic: another admin's
        batch answered meanwhile (the leader ensuring its own client while its reaper
        sweeps) is not ours. Each command carries a ``correlationData`` that dynsec echoes;
        only the answer that carries this batch's is taken.

        The batch goes out with QoS 0: with QoS 1 mosquitto writes its PUBACK and then the
        answer, and (without ``set_tcp_nodelay`` on the broker) Nagle holds the answer until
        our kernel acknowledges the PUBACK, which a delayed ACK does after 40 ms: every call
        took ~44 ms instead of ~1. QoS 1 bought nothing here: the connection is this call's
        own (nothing is retried on another), and the answer, awaited under the timeout, is
        the only acknowledgement that counts.
        """
        tag = secrets.token_hex(8)
        tagged = [{**c, "correlationData": f"{tag}-{i}"} for i, c in enumerate(commands)]
        await self._client.publish(CONTROL_TOPIC, json.dumps({"commands": tagged}), qos=0)
        async for message in self._client.messages:
            if not isinstance(message.payload, bytes):
                continue
            responses = json.loads(message.payload).get("responses", [])
            if isinstance(responses, list) and _answers(responses, tag):
                return [r for r in responses if isinstance(r, dict)]
        raise TransientError("the broker closed the dynsec response stream")


@contextlib.asynccontextmanager
async def open_link(args: Mapping[str, object], timeout_s: float) -> AsyncIterator[Link]:
    """One admin connection, subscribed to the answers: it and its use get ``timeout_s`` in all.

    ``args``: aiomqtt's connection arguments (the broker, the admin's username and password,
    its TLS context). No answer in time, or a failed connection, is a
    :class:`~slonkd.core.errors.TransientError`; a broker that refuses the admin, a
    :class:`~slonkd.core.errors.TerminalError`.
    """
    try:
        async with (
            asyncio.timeout(timeout_s),
            aiomqtt.Client(**args, protocol=aiomqtt.ProtocolVersion.V5) as client,  # type: ignore[arg-type]
        ):
            await client.subscribe(RESPONSE_TOPIC, qos=1)
            yield Link(client)
    except TimeoutError as exc:
        raise TransientError("no answer from the dynamic-security plugin") from exc
    except aiomqtt.MqttError as exc:
        if "authorized" in str(exc).lower():
            raise TerminalError(f"the broker refused the dynsec admin: {exc}") from exc
        raise TransientError(f"dynsec call failed: {exc}") from exc

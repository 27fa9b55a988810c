"""One MQTT 5 connection (aiomqtt 2.x) with reconnects, persistent session and a last will.

The :class:`Bus` owns the connection loop: connect (clean_start off, a session expiry, so a
QoS 1 message published while this client is away is kept by the broker and delivered when
it is back), subscribe, read messages, and on any connection error reconnect with jittered
exponential backoff. With ``ca_file`` set the connection is TLS and the broker's certificate
must chain to that CA and name the host dialled (:func:`tls_context`); there is no fallback
to plain MQTT. The CA file is read again for every connection attempt, so a bundle rotated
with an overlapping CA (old and new in one file, then the broker's new certificate) is
trusted from the next reconnect on; a bundle that does not load then is an attempt that
failed, retried like one. Every received message is validated by :mod:`slonkd.core.messages`;
malformed, forged or oversized ones are dropped, counted by reason and logged, never handed
on. aiomqtt objects and exceptions stop here: callers see core payloads and slonkd errors.
"""

from __future__ import annotations

import asyncio
import random
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiomqtt
import structlog
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from slonkd.core.errors import ParseError, SlonkdError, TransientError
from slonkd.core.messages import MAX_PAYLOAD_BYTES, Payload, Topic, decode, encode, parse_topic

log = structlog.get_logger("slonkd.bus")

CredentialSource = Callable[[], Awaitable[tuple[str, str]]]
"""Fetches (username, password) before the first connect and after the broker refuses them."""
_AUTH_REFUSED = frozenset({4, 5, 134, 135})
"""CONNACK codes for bad credentials / not authorised (MQTT 3.1.1 and 5)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BusSettings:
    """Where and who: broker address, credentials and this client's stable identity."""

    host: str
    port: int
    username: str
    password: str
    client_id: str
    keepalive_s: int = 30
    session_expiry_s: int = 3600
    """How long the broker keeps this client's session (and queued QoS 1 messages) after it
    goes: an agent's outlives a pod restart, not a scale-down by days; the coordinator's is
    shorter (:data:`~slonkd.cli.bus_env.COORDINATOR_SESSION_EXPIRY_S`)."""
    connect_timeout_s: float = 5.0
    ca_file: str | None = None
    """A CA bundle: connect with TLS and verify the broker against it (None: plain MQTT)."""
    reconnect_min_s: float = 0.1
    reconnect_max_s: float = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Received:
    """A validated message: its parsed topic, payload and whether it was retained."""

    topic: Topic
    payload: Payload
    retained: bool


class Bus:
    """A reconnecting MQTT client; run :meth:`run` in the root TaskGroup."""

    def __init__(
        self,
        settings: BusSettings,
        *,
        subscriptions: Sequence[str] = (),
        will: tuple[Topic, Payload] | None = None,
        queue_size: int = 10_000,
        credentials: CredentialSource | None = None,
    ) -> None:
        self._settings = settings
        self._credentials = credentials
        self._issued: tuple[str, str] | None = None
        self._subscriptions = tuple(subscriptions)
        self._will = will
        self._client: aiomqtt.Client | None = None
        self._connected = asyncio.Event()
        self._lost = asyncio.Event()
        """Set when the current connection ends (a new one gets a new event)."""
        self._inbox: asyncio.Queue[Received] = asyncio.Queue(maxsize=queue_size)
        self.dropped: Counter[str] = Counter()
        """Messages refused at the boundary, by reason (for metrics and tests)."""
        self.connects = 0
        self._connect_seen = asyncio.Condition()

    @property
    def connected(self) -> bool:
        """Whether a connection is up right now."""
        return self._connected.is_set()

    async def next_connect(self, seen: int) -> int:
        """Wait until the bus has connected more than ``seen`` times; the new count."""
        async with self._connect_seen:
            await self._connect_seen.wait_for(lambda: self.connects > seen)
        return self.connects

    async def wait_connected(self, timeout_s: float) -> None:
        """Wait until connected; raise TransientError after ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._connected.wait()
        except TimeoutError as exc:
            raise TransientError(f"not connected to the broker after {timeout_s} s") from exc

    def _make_client(self) -> aiomqtt.Client:
        s = self._settings
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]  # paho is untyped here
        props.SessionExpiryInterval = s.session_expiry_s
        will = None
        if self._will is not None:
            topic, payload = self._will
            will = aiomqtt.Will(str(topic), encode(payload), qos=1, retain=True)
        username, password = self._issued or (s.username, s.password)
        return aiomqtt.Client(
            s.host,
            s.port,
            username=username,
            password=password,
            identifier=s.client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
            clean_start=False,
            properties=props,
            keepalive=s.keepalive_s,
            timeout=s.connect_timeout_s,
            will=will,
            tls_context=_attempt_context(s.ca_file),
        )

    async def run(self) -> None:
        """Connect, read and reconnect until cancelled."""
        attempt = 0
        while True:
            try:
                if self._credentials is not None and self._issued is None:
                    self._issued = await self._credentials()
                async with self._make_client() as client:
                    self._client = client
                    self._lost = asyncio.Event()
                    for sub in self._subscriptions:
                        granted = await client.subscribe(sub, qos=1)
                        if any(_code(c) >= 0x80 for c in granted):
                            log.warning("bus.subscription_refused", topic=sub[:200])
                    self.connects += 1
                    attempt = 0
                    self._connected.set()
                    async with self._connect_seen:
                        self._connect_seen.notify_all()
                    log.info(
                        "bus.connected", client_id=self._settings.client_id, connects=self.connects
                    )
                    async for message in client.messages:
                        self._accept(message)
            except (aiomqtt.MqttError, SlonkdError) as exc:
                self._connected.clear()
                self._client = None
                if _auth_refused(exc):
                    self._issued = None  # fetch fresh credentials before the next attempt
                attempt += 1
                delay = min(
                    self._settings.reconnect_max_s,
                    self._settings.reconnect_min_s * 2 ** min(attempt, 10),
                )
                delay *= random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not cryptography
                log.warning(
                    "bus.reconnecting",
                    error=str(exc)[:200],
                    attempt=attempt,
                    delay_s=round(delay, 3),
                )
                await asyncio.sleep(delay)
            finally:
                self._connected.clear()
                self._client = None
                self._lost.set()  # publishes waiting on that connection fail now

    def _accept(self, message: aiomqtt.Message) -> None:
        raw = message.payload
        if not isinstance(raw, bytes | bytearray):
            self._drop("not-bytes", str(message.topic))
            return
        if len(raw) > MAX_PAYLOAD_BYTES:
            self._drop("oversized", str(message.topic))
            return
        try:
            topic = parse_topic(str(message.topic))
            payload = decode(topic, bytes(raw))
        except ParseError as exc:
            self._drop("invalid", str(message.topic), error=str(exc)[:200])
            return
        try:
            self._inbox.put_nowait(Received(topic=topic, payload=payload, retained=message.retain))
        except asyncio.QueueFull:
            self._drop("inbox-full", str(message.topic))

    def _drop(self, reason: str, topic: str, **extra: str) -> None:
        self.dropped[reason] += 1
        log.warning("bus.message_dropped", reason=reason, topic=topic[:200], **extra)

    async def messages(self) -> AsyncIterator[Received]:
        """Validated messages, in arrival order, across reconnects."""
        while True:
            yield await self._inbox.get()

    async def publish(
        self, topic: Topic, payload: Payload, *, retain: bool = False, timeout_s: float = 10.0
    ) -> None:
        """Publish at QoS 1 once connected; TransientError if that cannot happen in time."""
        raw = encode(payload)
        await self.wait_connected(timeout_s)
        client, lost = self._client, self._lost
        if client is None:
            raise TransientError("connection lost before publishing")
        # aiomqtt never answers a publish whose connection drops before its PUBACK: without
        # the race against the loss, it waited out its whole timeout (a status republished
        # after a session takeover came 10 s late).
        sending = asyncio.ensure_future(
            client.publish(str(topic), raw, qos=1, retain=retain, timeout=timeout_s)
        )
        dropped = asyncio.ensure_future(lost.wait())
        try:
            await asyncio.wait({sending, dropped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            dropped.cancel()
            if not sending.done():
                sending.cancel()
        if not sending.done() or sending.cancelled():
            raise TransientError(f"publish to {topic} failed: the connection was lost")
        try:
            sending.result()
        except aiomqtt.MqttError as exc:
            raise TransientError(f"publish to {topic} failed: {exc}") from exc


def tls_context(ca_file: str | None) -> ssl.SSLContext | None:
    """A client TLS context trusting only ``ca_file`` (None: no TLS), the file read now.

    Every client builds one per connection (the bus per attempt, the dynsec admin per
    call), never once for its life. Verifies the certificate chain and the host name (or IP
    address) dialled; TLS 1.2 at least. An unreadable or malformed bundle raises ValueError
    naming the file.
    """
    if ca_file is None:
        return None
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the CA bundle {ca_file}: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _attempt_context(ca_file: str | None) -> ssl.SSLContext | None:
    """:func:`tls_context` for one connection attempt: a bundle that will not load is transient."""
    try:
        return tls_context(ca_file)
    except ValueError as exc:
        raise TransientError(str(exc)) from None


def _auth_refused(exc: Exception) -> bool:
    """Whether the broker refused the credentials (rather than being unreachable)."""
    rc = getattr(exc, "rc", None)
    value = getattr(rc, "value", rc)
    return isinstance(value, int) and value in _AUTH_REFUSED


def _code(granted: object) -> int:
    """A SUBACK entry (an int or a paho ReasonCode) as its numeric code."""
    value = getattr(granted, "value", granted)
    return value if isinstance(value, int) else 0x80

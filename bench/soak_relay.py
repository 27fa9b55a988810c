"""TCP relays between some agents and the broker, so the soak can cut an agent off the bus.

The fault is "an agent cut from the broker for 60 s while its pod lives". The agents run as
host processes on loopback, so there is no network path of their own to break; instead the
agents of a few pods reach mosquitto through a relay port each (:class:`Relays`, one thread,
``selectors``). :meth:`Relays.cut` turns a relay into a black hole, as a partition looks from
both ends: bytes already in flight and every byte after are held, never delivered and never
answered, and the sockets stay open (no FIN, no RST), so the agent notices only through
MQTT's keepalive and the broker only through its own keepalive (then the agent's will);
connections made while cut are accepted and held the same way, so a reconnect's CONNECT
never gets its CONNACK. The one difference from a real partition: the TCP handshake to the
relay itself succeeds. :meth:`Relays.heal` closes every held socket (both sides see the
connection end, as when a partition heals after TCP gave up) and relays new connections
again. Neighbours: :mod:`bench.soak_fleet` (which agents use a relay), :mod:`bench.soak`
(the ``agent_cut`` fault).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from dataclasses import dataclass, field

_CHUNK = 65536


@dataclass(slots=True)
class _Port:
    listener: socket.socket
    cut: bool = False
    pairs: list[tuple[socket.socket, socket.socket]] = field(default_factory=list)
    held: list[socket.socket] = field(default_factory=list)


class Relays:
    """Relays from loopback ports to one upstream ``host:port``; each can be cut and healed."""

    def __init__(self, upstream: tuple[str, int], names: list[str]) -> None:
        self.upstream = upstream
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._ports: dict[str, _Port] = {}
        self._peer: dict[socket.socket, socket.socket] = {}
        self._stop = threading.Event()
        for name in names:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            listener.setblocking(False)
            self._ports[name] = _Port(listener=listener)
            self._sel.register(listener, selectors.EVENT_READ, ("accept", name))
        self._thread = threading.Thread(target=self._loop, name="soak-relays", daemon=True)
        self._thread.start()

    def port(self, name: str) -> int:
        """The loopback port ``name``'s agent connects to instead of the broker's."""
        return int(self._ports[name].listener.getsockname()[1])

    @property
    def names(self) -> list[str]:
        """The pods whose agents go through a relay."""
        return sorted(self._ports)

    def cut(self, name: str) -> None:
        """Black-hole ``name``'s relay: hold every connection, deliver nothing."""
        with self._lock:
            port = self._ports[name]
            port.cut = True
            for a, b in port.pairs:
                for s in (a, b):
                    with contextlib.suppress(KeyError, ValueError):
                        self._sel.unregister(s)
                    port.held.append(s)
            port.pairs.clear()

    def heal(self, name: str) -> None:
        """Close what was held and relay new connections again."""
        with self._lock:
            port = self._ports[name]
            port.cut = False
            for s in port.held:
                self._peer.pop(s, None)
                s.close()
            port.held.clear()

    def close(self) -> None:
        """Stop the thread and close every socket."""
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            for port in self._ports.values():
                for s in [port.listener, *port.held, *(x for p in port.pairs for x in p)]:
                    s.close()
            self._sel.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.2):
                with self._lock:
                    kind, name = key.data
                    if kind == "accept":
                        self._accept(name)
                    else:
                        self._pump(key.fileobj, name)  # type: ignore[arg-type]

    def _accept(self, name: str) -> None:
        port = self._ports[name]
        try:
            client, _ = port.listener.accept()
        except BlockingIOError:
            return
        if port.cut:
            port.held.append(client)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            client.close()
            return
        for s in (client, upstream):
            s.setblocking(False)
            self._sel.register(s, selectors.EVENT_READ, ("pump", name))
        self._peer[client], self._peer[upstream] = upstream, client
        port.pairs.append((client, upstream))

    def _pump(self, src: socket.socket, name: str) -> None:
        dst = self._peer.get(src)
        try:
            data = src.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data and dst is not None:
            try:
                dst.setblocking(True)
                dst.sendall(data)
                dst.setblocking(False)
                return
            except OSError:
                pass
        self._drop(name, src)

    def _drop(self, name: str, src: socket.socket) -> None:
        port = self._ports[name]
        for pair in [p for p in port.pairs if src in p]:
            port.pairs.remove(pair)
            for s in pair:
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(s)
                self._peer.pop(s, None)
                s.close()

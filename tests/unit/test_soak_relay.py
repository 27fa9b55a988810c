"""The soak's relay (bench/soak_relay.py) black-holes a connection when cut, as a partition does."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from bench.soak_relay import Relays


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """An upstream on loopback that echoes what each connection sends."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    thread.join()
    server.close()


def _client(relays: Relays) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", relays.port("w-0")), timeout=2)
    sock.settimeout(0.5)
    return sock


def test_relayed_then_held_while_cut_then_closed_on_heal(echo: tuple[str, int]) -> None:
    """Bytes pass; cut: nothing is delivered and nothing is closed; heal: held ones end."""
    relays = Relays(echo, ["w-0"])
    try:
        live = _client(relays)
        live.sendall(b"ping")
        assert live.recv(16) == b"ping"
        relays.cut("w-0")
        live.sendall(b"lost")
        with pytest.raises(TimeoutError):  # no answer, and no FIN or RST either
            live.recv(16)
        late = _client(relays)  # a reconnect while cut: accepted, never answered
        late.sendall(b"connect")
        with pytest.raises(TimeoutError):
            late.recv(16)
        relays.heal("w-0")
        for sock in (live, late):
            try:
                got = sock.recv(16)
            except ConnectionResetError:
                got = b""
            assert got == b"", "the held connection ends on heal"
        again = _client(relays)
        again.sendall(b"back")
        assert again.recv(16) == b"back"
        for sock in (live, late, again):
            sock.close()
    finally:
        relays.close()

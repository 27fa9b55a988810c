"""TLS files that change under a running process: a server's certificate loaded again in place.

A certificate rotates without a restart. Kubernetes updates a mounted Secret by swapping a
``..data`` symlink to a new directory, so a file's own name never changes: :func:`stamp`
resolves each path and takes its inode, size and mtime, and any change of either file
changes the stamp. :class:`CertReloader` keeps one server :class:`ssl.SSLContext` (the one
the listening socket was given) and, when the stamp of its certificate and key changes, loads
them into that context again: connections already up keep their session, the next handshake
gets the new certificate. The new pair is read once and tried on a context of its own first;
one that does not load (half written, a key that is not the certificate's) leaves the old
certificate in place and logs one ``tls.reload_failed`` warning with the reason per change of
the files; a pair that loads logs ``tls.reloaded`` with the files and the new certificate's
SHA-256 fingerprint. A CA bundle needs none of this: every client reads its CA when it
connects (:func:`slonkd.adapters.bus.client.tls_context`).

Plain text is a choice someone made, and the log says so: :func:`warn_plain_text` is the one
warning per channel a role logs at start when it talks without TLS (``bus.plain_text``,
``api.plain_text``).

Neighbours: :mod:`slonkd.runtime.coordinating.api` (the coordinator's HTTPS API, which runs a
reloader), :mod:`slonkd.cli.tls_reload` (the broker pod's sidecar: SIGHUP to mosquitto when
the stamp of its files changes), :mod:`slonkd.core.log_events` (the event names).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import ssl
from collections.abc import Iterator, Sequence
from pathlib import Path

import structlog

from slonkd.core.log_events import (
    API_PLAIN_TEXT,
    BUS_PLAIN_TEXT,
    TLS_RELOAD_FAILED,
    TLS_RELOADED,
)

log = structlog.get_logger("slonkd.tls")

RELOAD_PERIOD_S = 10.0
"""How often a reloader looks at its files (a Secret's update reaches the pod in about a minute)."""

Stamp = tuple[tuple[str, int, int, int, int], ...]
"""Per file: the resolved path, device, inode, size and mtime in nanoseconds."""


def stamp(paths: Sequence[str]) -> Stamp | None:
    """The stamp of ``paths`` (symlinks resolved), or None while one of them cannot be read."""
    found = []
    for path in paths:
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except OSError:
            return None
        found.append((real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(found)


def server_context() -> ssl.SSLContext:
    """An empty server TLS context: TLS 1.2 at least."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def fingerprint(cert_pem: bytes) -> str:
    """The SHA-256 of the first certificate of a PEM chain (hex), or "" if there is none."""
    text = cert_pem.decode("ascii", errors="replace")
    end = text.find(ssl.PEM_FOOTER)
    if text.find(ssl.PEM_HEADER) < 0 or end < 0:
        return ""
    try:
        der = ssl.PEM_cert_to_DER_cert(text[: end + len(ssl.PEM_FOOTER)])
    except ValueError:
        return ""
    return hashlib.sha256(der).hexdigest()


@contextlib.contextmanager
def _in_memory(*contents: bytes) -> Iterator[list[str]]:
    """Paths that read back ``contents`` (memory files: no key material written to a disk)."""
    fds = [os.memfd_create("slonkd-tls", os.MFD_CLOEXEC) for _ in contents]
    try:
        for fd, content in zip(fds, contents, strict=True):
            os.write(fd, content)
        yield [f"/proc/self/fd/{fd}" for fd in fds]
    finally:
        for fd in fds:
            os.close(fd)


def load_pair(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a certificate chain and its key, as bytes, into ``context``; ssl.SSLError if bad."""
    with _in_memory(cert_pem, key_pem) as (cert, key):
        context.load_cert_chain(cert, key)


class CertReloader:
    """One server context for ``cert_file`` and ``key_file``, loaded again when they change.

    Built at start, it loads the pair or raises ValueError naming the files (the role exits
    2). :meth:`check` is one look (the test's handle); :meth:`run` looks every ``period_s``.
    """

    def __init__(self, cert_file: str, key_file: str, *, period_s: float = RELOAD_PERIOD_S):
        self.cert_file = cert_file
        self.key_file = key_file
        self.period_s = period_s
        self.context = server_context()
        self.reloads = 0
        self._seen = stamp((cert_file, key_file))  # before the load: a change meanwhile counts
        try:
            self.context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"cannot load the certificate {cert_file} with the key {key_file}: {exc}"
            ) from None

    def check(self) -> bool:
        """Load the pair again if its files changed since the last look; whether it was."""
        now = stamp((self.cert_file, self.key_file))
        if now is None or now == self._seen:
            return False  # unreadable (mid-swap): look again next time
        self._seen = now
        files = {"cert_file": self.cert_file, "key_file": self.key_file}
        try:
            cert_pem = Path(self.cert_file).read_bytes()
            key_pem = Path(self.key_file).read_bytes()
            load_pair(server_context(), cert_pem, key_pem)  # a bad pair never reaches ours
        except (OSError, ssl.SSLError) as exc:
            log.warning(TLS_RELOAD_FAILED, **files, error=str(exc)[:200], kept="the old pair")
            return False
        load_pair(self.context, cert_pem, key_pem)
        self.reloads += 1
        log.info(TLS_RELOADED, **files, sha256=fingerprint(cert_pem))
        return True

    async def run(self) -> None:
        """Look every ``period_s`` until cancelled."""
        while True:
            await asyncio.sleep(self.period_s)
            self.check()


def warn_plain_text(role: str, *, mqtt: str | None = None, http: str | None = None) -> None:
    """At start, one warning per channel ``role`` talks over in the clear.

    ``mqtt`` (the broker) and ``http`` (the API) are each the detail that says why; None: TLS,
    or not used.
    """
    if mqtt is not None:
        log.warning(BUS_PLAIN_TEXT, role=role, detail=mqtt)
    if http is not None:
        log.warning(API_PLAIN_TEXT, role=role, detail=http)

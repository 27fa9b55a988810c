"""Throwaway X.509 material for TLS tests: a CA and server certificates it signs (openssl CLI).

A test makes its own CA (:func:`make_ca`) and a server certificate for loopback
(:func:`make_server_cert`, SAN ``IP:127.0.0.1`` and ``DNS:localhost`` by default), then gives
the broker or the HTTP server the certificate and key and the client the CA. A second CA
made the same way is "another CA": a client trusting only it must fail verification.
Keys are EC P-256 (quick to make); everything lives in the directory the test passes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slonkd_sandbox.procs import HarnessError

TIMEOUT_S = 30
DAYS = "2"


@dataclass(frozen=True, slots=True, kw_only=True)
class Ca:
    """A CA: its certificate (the bundle a client trusts) and its key."""

    cert: Path
    key: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerCert:
    """A server's certificate and key, and the CA that signed them."""

    cert: Path
    key: Path
    ca: Path


def _openssl(*args: str) -> None:
    try:
        subprocess.run(
            ["openssl", *args], check=True, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except FileNotFoundError as exc:
        raise HarnessError("openssl not found: install Debian's openssl package") from exc
    except subprocess.CalledProcessError as exc:
        raise HarnessError(f"openssl {args[0]} failed: {exc.stderr.strip()[:400]}") from exc


def make_ca(directory: Path, name: str = "slonkd-test-ca") -> Ca:
    """A self-signed CA named ``name`` in ``directory`` (``<name>.crt``, ``<name>.key``)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", DAYS,
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return Ca(cert=cert, key=key)


def make_server_cert(
    ca: Ca,
    directory: Path,
    name: str = "server",
    sans: Sequence[str] = ("IP:127.0.0.1", "DNS:localhost"),
) -> ServerCert:
    """A server certificate for ``sans``, signed by ``ca`` (``<name>.crt``, ``<name>.key``)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key, csr = (directory / f"{name}.{ext}" for ext in ("crt", "key", "csr"))
    ext = directory / f"{name}.ext"
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={','.join(sans)}\n"
    )
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-CAcreateserial", "-out", str(cert), "-days", DAYS, "-extfile", str(ext),
    )  # fmt: skip
    return ServerCert(cert=cert, key=key, ca=ca.cert)

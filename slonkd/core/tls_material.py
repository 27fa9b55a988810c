"""A TLS Secret's material, made once: a new CA and the server certificate it signs.

When a site brings no certificate (the chart's ``tls.secretName``) and no cert-manager issuer
(``tls.issuer``), ``slonkd secrets ensure`` makes the TLS Secret of mosquitto and the
coordinator's API from a ``{"tls": {"dnsNames": [...], "days": N}}`` entry of its spec:

* a self-signed CA: EC P-256, ``basicConstraints CA:TRUE`` (critical, no CA below it),
  ``keyUsage keyCertSign, cRLSign``;
* a server certificate signed by it: EC P-256, the DNS names as subjectAltNames,
  ``extendedKeyUsage serverAuth``, ``keyUsage digitalSignature``;

both valid for ``days`` from an hour ago (a node whose clock is a little behind still
accepts them). The Secret holds ``ca.crt``, ``tls.crt`` and ``tls.key`` (PEM), the keys a
cert-manager Certificate writes. The CA's private key is dropped once the server
certificate is signed: nothing signs with it again, and a site that wants rotation brings its
own CA or issuer. Everything here is computation (the ``cryptography`` package); the clock
is the caller's ``now``.

Neighbours: :mod:`slonkd.core.secret_spec` (the spec; calls :func:`make_tls_data`),
:mod:`slonkd.adapters.kube.secrets` (creates the Secret when absent).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BACKDATE: Final = timedelta(hours=1)
"""How far before ``now`` both certificates start to be valid (clock skew between nodes)."""
CA_FILE: Final = "ca.crt"
CERT_FILE: Final = "tls.crt"
KEY_FILE: Final = "tls.key"
"""The Secret's keys, as a cert-manager Certificate writes them (a ``kubernetes.io/tls``
Secret's two, and ``ca.crt``): :data:`slonkd.core.secret_spec.TLS_KEYS`."""


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


_UNUSED: Final = dict.fromkeys(
    ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
     "encipher_only", "decipher_only"),
    False,
)  # fmt: skip
"""The key usages neither certificate has."""


def _usage(*, sign: bool) -> x509.KeyUsage:
    """keyCertSign and cRLSign for the CA, digitalSignature (ECDHE handshakes) for the server."""
    return x509.KeyUsage(digital_signature=not sign, key_cert_sign=sign, crl_sign=sign, **_UNUSED)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_tls_data(
    dns_names: Sequence[str], days: int, *, now: datetime, label: str
) -> dict[str, bytes]:
    """``ca.crt``, ``tls.crt`` and ``tls.key`` (PEM) for a server known by ``dns_names``.

    ``label`` names the CA (``<label> CA``; the Secret's name); the server certificate's
    subject is its first DNS name. ``now`` must be timezone-aware.
    """
    if not dns_names:
        raise ValueError("a server certificate needs at least one DNS name")
    start, end = now - BACKDATE, now + timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{label} CA")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return {CA_FILE: _pem(ca), CERT_FILE: _pem(leaf), KEY_FILE: key_pem}


__all__ = ["CA_FILE", "CERT_FILE", "KEY_FILE", "make_tls_data"]

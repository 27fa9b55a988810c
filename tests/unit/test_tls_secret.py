"""The made-once TLS Secret of ``slonkd secrets ensure``: its spec, its certificates, its type.

A ``tls`` entry of the spec makes a new CA and a server certificate it signs; the tests read
the material back with ``cryptography`` (who signed what, for which names and uses, that the
CA's key is not there) and then use it as mosquitto and the coordinator do: a real TLS
handshake on loopback, server side ``tls.crt``/``tls.key``, client side ``ca.crt`` and one of
the DNS names. The create request's body is read through a stand-in transport; the command
on a real apiserver is tests/contract/test_kube_secrets.py's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from slonkd.adapters.kube.errors import Call, KubeNotFound
from slonkd.adapters.kube.secrets import Outcome, ensure_secret
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.secret_spec import make_data, parse_spec

NAMES = ["rel-mosquitto", "rel-mosquitto.hpc.svc.cluster.local", "rel-coordinator.hpc.svc"]
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _spec(tls: Any, **extra: Any) -> str:
    return json.dumps({"secrets": [{"name": "rel-tls", "tls": tls, **extra}]})


def _made(days: int | None = None) -> dict[str, bytes]:
    tls: dict[str, Any] = {"dnsNames": NAMES} | ({} if days is None else {"days": days})
    (spec,) = parse_spec(_spec(tls, labels={"slonk.dev/release": "rel"}))
    return {k: base64.b64decode(v) for k, v in make_data(spec, now=NOW).items()}


def test_a_tls_entry_parses_into_the_three_keys_of_a_tls_secret() -> None:
    """dnsNames kept in order, days 3650 unless given, keys ca.crt, tls.crt, tls.key."""
    (spec,) = parse_spec(_spec({"dnsNames": NAMES}, labels={"a": "b"}))
    assert spec.tls is not None
    assert (spec.tls.dns_names, spec.tls.days) == (tuple(NAMES), 3650)
    assert [k.key for k in spec.keys] == ["ca.crt", "tls.crt", "tls.key"]
    assert (spec.type, dict(spec.labels)) == ("kubernetes.io/tls", {"a": "b"})
    (short,) = parse_spec(_spec({"dnsNames": NAMES[:1], "days": 7}))
    assert short.tls is not None
    assert short.tls.days == 7
    (plain,) = parse_spec(json.dumps({"secrets": [{"name": "x", "data": {"k": {"value": "v"}}}]}))
    assert (plain.tls, plain.type) == (None, "Opaque")


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"name": "a"}, "exactly one of data and tls"),
        ({"name": "a", "data": {"k": {"value": "v"}}, "tls": {"dnsNames": ["a"]}}, "exactly one"),
        ({"name": "a", "tls": ["a"]}, "tls: must be an object"),
        ({"name": "a", "tls": {"dnsNames": ["a"], "ttl": 3}}, "unknown field(s) ttl"),
        ({"name": "a", "tls": {}}, "at least one host name"),
        ({"name": "a", "tls": {"dnsNames": "a.b"}}, "at least one host name"),
        ({"name": "a", "tls": {"dnsNames": ["A.b"]}}, "'A.b' is not a lowercase DNS name"),
        ({"name": "a", "tls": {"dnsNames": ["*.b"]}}, "not a lowercase DNS name"),
        ({"name": "a", "tls": {"dnsNames": ["b-"]}}, "not a lowercase DNS name"),
        ({"name": "a", "tls": {"dnsNames": [3]}}, "not a lowercase DNS name"),
        ({"name": "a", "tls": {"dnsNames": ["a", "a"]}}, "names a host twice"),
        ({"name": "a", "tls": {"dnsNames": ["a"], "days": 0}}, "days must be a whole number"),
        ({"name": "a", "tls": {"dnsNames": ["a"], "days": 36501}}, "days must be a whole number"),
        ({"name": "a", "tls": {"dnsNames": ["a"], "days": True}}, "days must be a whole number"),
        ({"name": "a", "tls": {"dnsNames": ["a"], "days": "9"}}, "days must be a whole number"),
    ],
)
def test_a_bad_tls_entry_is_refused_with_one_line(entry: dict[str, Any], says: str) -> None:
    """Each mistake in a TLS entry is a one-line ValueError naming the Secret and the field."""
    with pytest.raises(ValueError, match=re.escape(says)) as caught:
        parse_spec(json.dumps({"secrets": [entry]}))
    assert "\n" not in str(caught.value)
    assert "'a'" in str(caught.value)


def test_the_server_certificate_is_signed_by_a_new_ca_for_the_names_and_server_auth() -> None:
    """CA: P-256, CA:TRUE critical, keyCertSign/cRLSign. Leaf: P-256, SANs, serverAuth, days."""
    made = _made()
    assert set(made) == {"ca.crt", "tls.crt", "tls.key"}
    ca = x509.load_pem_x509_certificate(made["ca.crt"])
    leaf = x509.load_pem_x509_certificate(made["tls.crt"])
    key = x509.load_pem_x509_certificate(made["tls.crt"]).public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    assert isinstance(key.curve, ec.SECP256R1)
    ca_key = ca.public_key()
    assert isinstance(ca_key, ec.EllipticCurvePublicKey)
    assert isinstance(ca_key.curve, ec.SECP256R1)

    assert ca.subject == ca.issuer
    ca.verify_directly_issued_by(ca)  # self-signed
    leaf.verify_directly_issued_by(ca)  # raises unless the CA signed it
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value.ca
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert (usage.key_cert_sign, usage.crl_sign, usage.digital_signature) == (True, True, False)

    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == NAMES
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    for cert in (ca, leaf):
        assert cert.not_valid_before_utc <= NOW
        assert cert.not_valid_after_utc == NOW + timedelta(days=3650)
    assert x509.load_pem_x509_certificate(_made(days=30)["tls.crt"]).not_valid_after_utc == (
        NOW + timedelta(days=30)
    )


def test_the_secret_holds_the_servers_key_and_not_the_cas() -> None:
    """tls.key is the leaf's private key; no other private key is anywhere in the data."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    made = _made()
    key = load_pem_private_key(made["tls.key"], password=None)
    leaf = x509.load_pem_x509_certificate(made["tls.crt"])
    assert key.public_key() == leaf.public_key()
    text = b"".join(made.values())
    assert text.count(b"PRIVATE KEY-----") == 2  # BEGIN and END of tls.key only
    assert b"PRIVATE KEY" not in made["ca.crt"] + made["tls.crt"]
    assert _made()["ca.crt"] != made["ca.crt"]  # a new CA every time


def _serve_once(
    server: ssl.SSLContext, listener: socket.socket, errors: list[BaseException]
) -> None:
    """Accept one connection, finish the handshake, answer ``ok``."""
    try:
        conn, _ = listener.accept()
        with server.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(b"ok")
    except (OSError, ssl.SSLError) as exc:
        errors.append(exc)


def _handshake(tmp_path: Path, made: dict[str, bytes], hostname: str) -> bytes:
    """A TLS client trusting ``ca.crt`` reaches a loopback server with ``tls.crt``/``tls.key``."""
    for name, data in made.items():
        (tmp_path / name).write_bytes(data)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ssl.create_default_context(cafile=tmp_path / "ca.crt")
    client.verify_flags |= ssl.VERIFY_X509_STRICT
    errors: list[BaseException] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        thread = threading.Thread(target=_serve_once, args=(server, listener, errors))
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname(), timeout=10) as raw,
                client.wrap_socket(raw, server_hostname=hostname) as tls,
            ):
                answer = tls.recv(2)
        finally:
            thread.join(timeout=10)
    assert not errors  # the server's side of the handshake went through too
    return answer


def test_a_client_trusting_the_ca_completes_a_handshake_for_each_name(tmp_path: Path) -> None:
    """Verified TLS (strict X.509 checks) for every DNS name; another name fails verification."""
    made = _made()
    for name in NAMES:
        assert _handshake(tmp_path, made, name) == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        _handshake(tmp_path, made, "rel-elsewhere.hpc.svc")


def test_a_client_trusting_another_ca_fails_verification(tmp_path: Path) -> None:
    """The CA of one made Secret does not verify another's server certificate."""
    made, other = _made(), _made()
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(tmp_path, {**made, "ca.crt": other["ca.crt"]}, NAMES[0])


class _Apiserver:
    """A stand-in transport: no Secret exists; each create's body is kept."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    async def request(self, call: Call, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "GET":
            raise KubeNotFound(f"{call.verb} {path}: 404")
        self.created.append(kw["body"])
        return {}


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "opaque"])
def test_the_create_request_carries_the_secrets_type_and_keys(tls: bool) -> None:
    """A TLS Secret is created as kubernetes.io/tls with its three keys; others stay Opaque."""
    entry: dict[str, Any] = (
        {"name": "rel-tls", "tls": {"dnsNames": NAMES}}
        if tls
        else {"name": "rel-munge", "data": {"munge.key": {"randomBytes": 16}}}
    )
    (spec,) = parse_spec(json.dumps({"secrets": [entry]}))
    api = _Apiserver()
    done = asyncio.run(ensure_secret(cast(KubeTransport, api), "hpc", spec))
    assert done.outcome == Outcome.CREATED
    (body,) = api.created
    assert body["type"] == ("kubernetes.io/tls" if tls else "Opaque")
    assert sorted(body["data"]) == sorted(k.key for k in spec.keys)

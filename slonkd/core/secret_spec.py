"""Which Secrets ``slonkd secrets ensure`` makes once, and how each key's value is made.

The chart's pre-install/PreSync Job passes a small JSON spec (``--spec``): every Secret by
name, optional labels, and for each key how its value is made on creation:

``{"randomBytes": N}``
    N random bytes (the munge key: 1024).
``{"randomAlphanumeric": N}``
    N random letters and digits (a password).
``{"value": "text"}``
    a fixed value (a username).

A TLS Secret gives ``"tls": {"dnsNames": [...], "days": N}`` instead of ``data`` (``days``
3650 if not given): its keys ``ca.crt``, ``tls.crt`` and ``tls.key`` are a new CA and the
server certificate it signs for those names (:mod:`slonkd.core.tls_material`), and its type
is ``kubernetes.io/tls``.

The values exist only in the body of the one create request: a Secret that exists is kept
as it is, whatever its data. :func:`parse_spec` refuses a bad spec with a one-line
ValueError; :func:`make_data` draws the values (the ``secrets`` module: no I/O here).

Neighbours: :mod:`slonkd.adapters.kube.secrets` (creates each Secret when absent, keeps one
that exists), :mod:`slonkd.cli.secrets_cmd` (the command line, exit codes),
:mod:`slonkd.core.tls_material` (a TLS Secret's certificates).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

KINDS: Final = ("randomBytes", "randomAlphanumeric", "value")
MAX_RANDOM: Final = 65536
"""The most random bytes or characters one key may ask for."""
NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
"""A Secret's name: a DNS subdomain."""
KEY: Final = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
"""A Secret's data key."""
ALPHANUMERIC: Final = string.ascii_letters + string.digits
TLS_KIND: Final = "tls"
"""The kind of a TLS Secret's keys: made together, not one by one."""
TLS_KEYS: Final = ("ca.crt", "tls.crt", "tls.key")
"""A TLS Secret's keys, the ones :func:`slonkd.core.tls_material.make_tls_data` returns."""
TLS_DAYS: Final = 3650
"""How long a made-once certificate (and its CA) is valid unless the spec says ``days``."""
MAX_DAYS: Final = 36500
DNS_NAME: Final = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)
"""A host name a certificate may name: lowercase DNS labels, no wildcard."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KeySpec:
    """How one key's value is made: ``kind`` is one of :data:`KINDS`, or :data:`TLS_KIND`."""

    key: str
    kind: str
    length: int = 0
    value: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsSpec:
    """A TLS Secret's server certificate: the names it is valid for, and for how long."""

    dns_names: tuple[str, ...]
    days: int = TLS_DAYS


@dataclass(frozen=True, slots=True, kw_only=True)
class SecretSpec:
    """One Secret made once: its name, labels and keys (and its certificate, if TLS)."""

    name: str
    keys: tuple[KeySpec, ...]
    labels: Mapping[str, str]
    tls: TlsSpec | None = None

    @property
    def type(self) -> str:
        """The Secret's ``type``: ``kubernetes.io/tls`` for a TLS Secret, else ``Opaque``."""
        return "kubernetes.io/tls" if self.tls is not None else "Opaque"


def _key(secret: str, key: str, how: Any) -> KeySpec:
    where = f"secret {secret!r} key {key!r}"
    if not KEY.match(key):
        raise ValueError(f"{where}: not a valid Secret key")
    if not isinstance(how, dict) or len(how) != 1 or next(iter(how)) not in KINDS:
        raise ValueError(f"{where}: give exactly one of {', '.join(KINDS)}")
    ((kind, arg),) = how.items()
    if kind == "value":
        if not isinstance(arg, str):
            raise ValueError(f"{where}: value must be a string")
        return KeySpec(key=key, kind=kind, value=arg)
    if not isinstance(arg, int) or isinstance(arg, bool) or not 1 <= arg <= MAX_RANDOM:
        raise ValueError(f"{where}: {kind} must be a whole number from 1 to {MAX_RANDOM}")
    return KeySpec(key=key, kind=kind, length=arg)


def _tls(secret: str, tls: Any) -> TlsSpec:
    where = f"secret {secret!r} tls"
    if not isinstance(tls, dict):
        raise ValueError(f"{where}: must be an object with dnsNames (and days)")
    unknown = sorted(set(tls) - {"dnsNames", "days"})
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
    names = tls.get("dnsNames")
    if not isinstance(names, list) or not names:
        raise ValueError(f"{where}: dnsNames must list at least one host name")
    bad = [n for n in names if not isinstance(n, str) or not DNS_NAME.match(n)]
    if bad:
        raise ValueError(f"{where}: {bad[0]!r} is not a lowercase DNS name")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: dnsNames names a host twice")
    days = tls.get("days", TLS_DAYS)
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= MAX_DAYS:
        raise ValueError(f"{where}: days must be a whole number from 1 to {MAX_DAYS}")
    return TlsSpec(dns_names=tuple(names), days=days)


def _secret(item: Any) -> SecretSpec:
    if not isinstance(item, dict):
        raise ValueError("each entry of secrets must be an object with name and data (or tls)")
    name = item.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"secret name {name!r} is not a valid Kubernetes name")
    unknown = sorted(set(item) - {"name", "data", "tls", "labels"})
    if unknown:
        raise ValueError(f"secret {name!r}: unknown field(s) {', '.join(unknown)}")
    if ("data" in item) == ("tls" in item):
        raise ValueError(f"secret {name!r}: give exactly one of data and tls")
    labels = item.get("labels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ValueError(f"secret {name!r}: labels must map strings to strings")
    if "tls" in item:
        tls = _tls(name, item["tls"])
        keys = tuple(KeySpec(key=k, kind=TLS_KIND) for k in TLS_KEYS)
        return SecretSpec(name=name, keys=keys, labels=dict(labels), tls=tls)
    data = item["data"]
    if not isinstance(data, dict) or not data:
        raise ValueError(f"secret {name!r}: data must name at least one key")
    keys = tuple(_key(name, k, how) for k, how in sorted(data.items()))
    return SecretSpec(name=name, keys=keys, labels=dict(labels))


def parse_spec(text: str) -> tuple[SecretSpec, ...]:
    """The Secrets of a JSON spec ``{"secrets": [...]}``; a ValueError says what is wrong."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the spec is not JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) != {"secrets"} or not isinstance(doc["secrets"], list):
        raise ValueError('the spec must be {"secrets": [...]}, and nothing else')
    specs = tuple(_secret(item) for item in doc["secrets"])
    if not specs:
        raise ValueError("the spec names no secret")
    names = [s.name for s in specs]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ValueError(f"secret(s) named twice: {', '.join(doubled)}")
    return specs


def _raw(key: KeySpec) -> bytes:
    if key.kind == "randomBytes":
        return secrets.token_bytes(key.length)
    if key.kind == "randomAlphanumeric":
        return "".join(secrets.choice(ALPHANUMERIC) for _ in range(key.length)).encode()
    return key.value.encode()


def make_data(spec: SecretSpec, *, now: datetime | None = None) -> dict[str, str]:
    """Fresh values for every key of ``spec``, base64-encoded as a Secret's ``data``.

    A TLS Secret's certificates start from ``now`` (default: this moment).
    """
    if spec.tls is not None:
        # Imported here: only the secrets Job makes a certificate, and `slonkd --help`, which
        # imports every command's module, need not load cryptography for it.
        from slonkd.core.tls_material import make_tls_data

        when = now if now is not None else datetime.now(UTC)
        made = make_tls_data(spec.tls.dns_names, spec.tls.days, now=when, label=spec.name)
        return {k: base64.b64encode(v).decode() for k, v in made.items()}
    return {k.key: base64.b64encode(_raw(k)).decode() for k in spec.keys}


__all__ = [
    "KINDS",
    "TLS_DAYS",
    "TLS_KEYS",
    "KeySpec",
    "SecretSpec",
    "TlsSpec",
    "make_data",
    "parse_spec",
]

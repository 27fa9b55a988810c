"""Which Secrets ``slonkd secrets ensure`` makes once, and how each key's value is made.

The chart's pre-install/PreSync Job passes a small JSON spec (``--spec``): every Secret by
name, optional labels, and for each key how its value is made on creation:

``{"randomBytes": N}``
    N random bytes (the munge key: 1024).
``{"randomAlphanumeric": N}``
    N random letters and digits (a password).
``{"value": "text"}``
    a fixed value (a username).

The values exist only in the body of the one create request: a Secret that exists is kept
as it is, whatever its data. :func:`parse_spec` refuses a bad spec with a one-line
ValueError; :func:`make_data` draws the values (the ``secrets`` module: no I/O here).

Neighbours: :mod:`slonkd.adapters.kube.secrets` (creates each Secret when absent, keeps one
that exists), :mod:`slonkd.cli.secrets_cmd` (the command line, exit codes).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

KINDS: Final = ("randomBytes", "randomAlphanumeric", "value")
MAX_RANDOM: Final = 65536
"""The most random bytes or characters one key may ask for."""
NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
"""A Secret's name: a DNS subdomain."""
KEY: Final = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
"""A Secret's data key."""
ALPHANUMERIC: Final = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True, kw_only=True)
class KeySpec:
    """How one key's value is made: ``kind`` is one of :data:`KINDS`."""

    key: str
    kind: str
    length: int = 0
    value: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SecretSpec:
    """One Secret made once: its name, labels and keys."""

    name: str
    keys: tuple[KeySpec, ...]
    labels: Mapping[str, str]


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


def _secret(item: Any) -> SecretSpec:
    if not isinstance(item, dict):
        raise ValueError("each entry of secrets must be an object with name and data")
    name = item.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"secret name {name!r} is not a valid Kubernetes name")
    unknown = sorted(set(item) - {"name", "data", "labels"})
    if unknown:
        raise ValueError(f"secret {name!r}: unknown field(s) {', '.join(unknown)}")
    data = item.get("data")
    if not isinstance(data, dict) or not data:
        raise ValueError(f"secret {name!r}: data must name at least one key")
    labels = item.get("labels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ValueError(f"secret {name!r}: labels must map strings to strings")
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


def make_data(spec: SecretSpec) -> dict[str, str]:
    """Fresh values for every key of ``spec``, base64-encoded as a Secret's ``data``."""
    return {k.key: base64.b64encode(_raw(k)).decode() for k in spec.keys}


__all__ = ["KINDS", "KeySpec", "SecretSpec", "make_data", "parse_spec"]

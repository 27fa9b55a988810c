"""Translation of apiserver answers and connection failures into slonkd's error types.

Every call of the adapter is described by a :class:`Call` (verb, group, resource,
subresource, namespace) so that a 403 can name the RBAC rule that is missing. Status codes map
as the rest of slonkd expects: 409 is a conflict to retry the read-modify-write on, 404 is
"not there" (callers decide whether that means "already done"), 410 means the watch or list
position expired (relist), 401, 403 and 4xx validation errors are
terminal (an informer waits for RBAC or credentials to come back instead), 429/5xx and broken
connections are transient. This module does no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from slonkd.core.errors import SlonkdError, TerminalError, TransientError


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One kind of API call, as RBAC sees it."""

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    namespace: str | None = None
    name: str = ""

    @property
    def rule(self) -> str:
        """The RBAC rule that allows this call, as a ClusterRole/Role would spell it."""
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f" in namespace {self.namespace}" if self.namespace else " (cluster scope)"
        return f'apiGroups: ["{self.group}"], resources: ["{res}"], verbs: ["{self.verb}"]{where}'

    def __str__(self) -> str:
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        target = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.verb} {res} {target}".rstrip()


class KubeConflict(TransientError):
    """409: the object changed since it was read (or already exists); re-read and retry."""


class KubeNotFound(TerminalError):
    """404: the object (or its namespace) does not exist."""


class KubeGone(TransientError):
    """410: the resourceVersion or continue token is too old; list again."""


class KubeForbidden(TerminalError):
    """403: the ServiceAccount lacks an RBAC rule; the message names it."""


class KubeUnauthorized(TerminalError):
    """401: the credentials were rejected (an expired or revoked token)."""


class KubeInvalid(TerminalError):
    """400/422 and other 4xx: the request is wrong and retrying cannot fix it."""


class KubeUnavailable(TransientError):
    """429 (not from an eviction), 5xx, timeouts and broken connections."""


class KubeTooManyRequests(KubeUnavailable):
    """429: throttled, or (from the Eviction API) a PodDisruptionBudget says "not now"."""


def status_message(body: Any) -> str:
    """The ``message`` of a Status body (bytes, str or dict), shortened."""
    if isinstance(body, bytes | bytearray):
        body = body.decode(errors="replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return str(body)[:500]
    if isinstance(body, dict):
        return str(body.get("message", body.get("reason", "")))[:500]
    return str(body)[:500]


def error_for_status(status: int, body: Any, call: Call) -> SlonkdError:
    """The slonkd error for a non-2xx answer to ``call``."""
    message = status_message(body)
    text = f"{call}: HTTP {status}: {message}"
    if status == 409:
        return KubeConflict(text)
    if status == 404:
        return KubeNotFound(text)
    if status == 410:
        return KubeGone(text)
    if status == 403:
        return KubeForbidden(f"{text}; missing RBAC rule: {call.rule}")
    if status == 401:
        return KubeUnauthorized(f"{text}; the credentials were rejected")
    if status == 429:
        return KubeTooManyRequests(text)
    if status >= 500:
        return KubeUnavailable(text)
    return KubeInvalid(text)


def error_for_exception(exc: BaseException, call: Call) -> SlonkdError:
    """The slonkd error for a connection failure or timeout during ``call``."""
    return KubeUnavailable(f"{call}: {type(exc).__name__}: {exc}")

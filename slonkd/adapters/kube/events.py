"""Kubernetes Events about Nodes and Pods, de-duplicated and rate-limited like client-go's.

An Event that repeats (same object, type, reason and message) within the de-duplication
window is not created again: the existing Event's ``count`` and ``lastTimestamp`` are
patched instead. Each involved object has a token bucket (a burst, then one Event per refill
period) so a flapping node cannot flood the apiserver; Events over the limit are DROPPED and
counted. The buckets are bounded: a full bucket (idle long enough to refill) is dropped, as
a new one would be the same; past ``max_buckets`` the fullest are forgotten too. Node Events
go to a configured namespace ("default", where ``kubectl describe node`` looks), Pod Events to
the pod's namespace.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from slonkd.adapters.kube.errors import Call, KubeNotFound
from slonkd.adapters.kube.nodes import now_rfc3339
from slonkd.adapters.kube.transport import MERGE_PATCH, KubeTransport
from slonkd.core.kube_changes import ChangeOutcome, ChangeResult, ObjectRef

COMPONENT = "slonkd"
_SEEN_MAX = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class EventSettings:
    """Limits of the recorder (client-go: burst 25, one more every 5 minutes)."""

    burst: int = 25
    refill_s: float = 300.0
    dedupe_window_s: float = 600.0
    node_event_namespace: str = "default"
    max_buckets: int = 10_000
    """Objects whose rate-limit buckets are kept; past it, idle ones are forgotten."""

    def __post_init__(self) -> None:
        if self.burst < 1 or self.max_buckets < 1:
            raise ValueError("burst and max_buckets must be at least 1")
        if self.refill_s <= 0 or self.dedupe_window_s < 0:
            raise ValueError("refill_s must be positive and dedupe_window_s not negative")


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


@dataclass(slots=True)
class _Seen:
    name: str
    namespace: str
    count: int
    stamp: float


class EventRecorder:
    """Creates core/v1 Events for slonkd's actions."""

    def __init__(
        self,
        transport: KubeTransport,
        settings: EventSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self._settings = settings or EventSettings()
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._seen: dict[tuple[str, str, str, str], _Seen] = {}
        self.dropped = 0

    @property
    def tracked_objects(self) -> int:
        """Objects with a rate-limit bucket now (bounded by ``max_buckets``)."""
        return len(self._buckets)

    def _prune(self, now: float) -> None:
        """Drop full buckets; past 3/4 of the bound still, the fullest go first."""
        s = self._settings

        def tokens(bucket: _Bucket) -> float:
            return bucket.tokens + (now - bucket.stamp) / s.refill_s

        kept = {k: b for k, b in self._buckets.items() if tokens(b) < s.burst}
        keep = s.max_buckets * 3 // 4
        if len(kept) > keep:  # many objects busy at once: forget the least limited
            ranked = sorted(kept.items(), key=lambda kv: tokens(kv[1]))
            kept = dict(ranked[:keep])
        self._buckets = kept

    def _take_token(self, key: str) -> bool:
        now = self._clock()
        s = self._settings
        if key not in self._buckets and len(self._buckets) >= s.max_buckets:
            self._prune(now)
        bucket = self._buckets.setdefault(key, _Bucket(tokens=float(s.burst), stamp=now))
        bucket.tokens = min(float(s.burst), bucket.tokens + (now - bucket.stamp) / s.refill_s)
        bucket.stamp = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    async def record(
        self, target: ObjectRef, *, type_: str, reason: str, message: str
    ) -> ChangeResult:
        """Record one Event (``type_`` is Normal or Warning) about ``target``."""
        namespace = target.namespace or self._settings.node_event_namespace
        object_key = f"{target.kind}/{target.namespace}/{target.name}/{target.uid}"
        if not self._take_token(object_key):
            self.dropped += 1
            return ChangeResult(outcome=ChangeOutcome.DROPPED, detail="event rate limit")
        key = (object_key, type_, reason, message)
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen.stamp <= self._settings.dedupe_window_s:
            call = Call(verb="patch", resource="events", namespace=seen.namespace, name=seen.name)
            body = {"count": seen.count + 1, "lastTimestamp": now_rfc3339()}
            try:
                await self._transport.request(
                    call,
                    "PATCH",
                    f"/api/v1/namespaces/{seen.namespace}/events/{seen.name}",
                    body=body,
                    content_type=MERGE_PATCH,
                )
            except KubeNotFound:
                pass  # the Event expired (TTL): create a fresh one below
            else:
                seen.count += 1
                seen.stamp = now
                return ChangeResult(outcome=ChangeOutcome.UNCHANGED, detail=seen.name)
        name = f"{target.name}.{secrets.token_hex(8)}"
        stamp = now_rfc3339()
        body_new = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "kind": target.kind,
                "name": target.name,
                "namespace": target.namespace,
                "uid": target.uid,
                "apiVersion": target.api_version,
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": COMPONENT},
        }
        call = Call(verb="create", resource="events", namespace=namespace)
        await self._transport.request(
            call, "POST", f"/api/v1/namespaces/{namespace}/events", body=body_new
        )
        if len(self._seen) > _SEEN_MAX:
            window = self._settings.dedupe_window_s
            self._seen = {k: v for k, v in self._seen.items() if now - v.stamp <= window}
        self._seen[key] = _Seen(name=name, namespace=namespace, count=1, stamp=now)
        return ChangeResult(outcome=ChangeOutcome.CHANGED, detail=name)

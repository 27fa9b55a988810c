"""An informer: a local cache of one kind of object, kept equal to the server by list + watch.

The cache lists (paged, or from the apiserver's watch cache with ``resourceVersion=0``), then
watches from the list's resourceVersion with bookmarks. A watch that ends is resumed from
the last resourceVersion seen; a broken connection is retried with jittered exponential
backoff; a 410 Gone (history compacted) triggers a consistent relist whose difference with
the cache becomes events, so an object deleted while the watch was down still produces a
DELETED event. ``synced`` is set once the first list is in the cache.

Handlers are plain functions called in event order, inside the informer's task, after the
cache holds the change (a handler that reads the cache sees the event's object); they must
be quick (the runtime's handlers only put a name on a queue or set a flag). The informer
never decides anything and never writes.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

import structlog

from slonkd.adapters.kube.errors import Call, KubeForbidden, KubeGone, KubeUnauthorized
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import ParseError, TerminalError, TransientError

T = TypeVar("T")
log = structlog.get_logger(__name__)


class EventType(StrEnum):
    """What happened to an object in the cache."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheEvent(Generic[T]):
    """One change of the cache: for DELETED, ``obj`` is the last state the cache held."""

    type: EventType
    key: str
    obj: T
    old: T | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Source(Generic[T]):
    """Where the objects come from and how to read one."""

    call: Call
    path: str
    parse: Callable[[Mapping[str, Any]], T]
    label_selector: str = ""
    field_selector: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class InformerSettings:
    """Timing of the list/watch loop; defaults follow client-go's reflector."""

    page_size: int = 500
    from_watch_cache: bool = False
    """First list with resourceVersion=0 (served by the apiserver's cache; for agents)."""
    watch_timeout_s: tuple[int, int] = (300, 600)
    """Server-side timeout of each watch, drawn uniformly to spread reconnects."""
    idle_timeout_s: float = 180.0
    """Silence after which a watch counts as broken. A quiet watch on 1.36 got its first
    bookmark after 120 s, so this must stay well above that."""
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 30.0


@dataclass(slots=True)
class InformerStats:
    """Counters for metrics and tests."""

    lists: int = 0
    watches: int = 0
    gone: int = 0
    reconnects: int = 0
    events: int = 0


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Informer(Generic[T]):
    """A cache of one resource kept in step with the apiserver."""

    def __init__(
        self,
        transport: KubeTransport,
        source: Source[T],
        settings: InformerSettings | None = None,
    ) -> None:
        self._transport = transport
        self._source = source
        self._settings = settings or InformerSettings()
        self._cache: dict[str, T] = {}
        self._handlers: list[Callable[[CacheEvent[T]], None]] = []
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.stats = InformerStats()
        self.refused: str | None = None
        """While the apiserver refuses this informer (401, 403): its last answer (readiness)."""

    # -- reading the cache -----------------------------------------------------------------

    def get(self, key: str) -> T | None:
        """The cached object (``name`` or ``namespace/name``), None if absent."""
        return self._cache.get(key)

    def items(self) -> dict[str, T]:
        """A snapshot of the cache."""
        return dict(self._cache)

    def __len__(self) -> int:
        return len(self._cache)

    def add_handler(self, handler: Callable[[CacheEvent[T]], None]) -> None:
        """Call ``handler`` for every later change, in order."""
        self._handlers.append(handler)

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch forever; relist on 410, reconnect with backoff on failures.

        Run again after a cancellation, an informer that has synced resumes its watch from
        the last resourceVersion it saw (and relists only if the server answers 410).
        A 401 or 403 (a revoked RoleBinding, a rejected token) does not end it: it keeps
        trying with capped backoff, sets ``refused`` and logs ``kube.informer_refused`` once,
        then ``kube.informer_recovered`` once a list succeeds again.
        """
        must_list = not self.synced.is_set()
        consistent = not self._settings.from_watch_cache
        attempt = 0

        def backoff() -> float:
            nonlocal attempt
            delay: float = min(
                self._settings.backoff_max_s,
                self._settings.backoff_initial_s * (2**attempt),
            )
            attempt = min(attempt + 1, 16)
            return delay * random.uniform(0.5, 1.0)  # noqa: S311 (jitter, not cryptography)

        while True:
            try:
                if must_list:
                    await self._relist(consistent=consistent)
                    must_list = False
                    consistent = True
                    if self.refused is not None:
                        self.refused = None
                        log.info("kube.informer_recovered", path=self._source.path)
                await self._watch()
                attempt = 0
            except KubeGone as exc:
                self.stats.gone += 1
                log.info("kube.watch_expired", path=self._source.path, error=str(exc))
                must_list = True
            except (KubeForbidden, KubeUnauthorized) as exc:
                # RBAC or credentials: an operator or a token rotation fixes it, a restart
                # does not; the cache stays as it was, readiness says why
                self.stats.reconnects += 1
                if self.refused is None:
                    log.error(
                        "kube.informer_refused",
                        path=self._source.path,
                        error=str(exc),
                        retry_max_s=self._settings.backoff_max_s,
                    )
                self.refused = str(exc)
                must_list = True  # what changed while refused is found by a list
                await asyncio.sleep(backoff())
            except TerminalError:
                raise
            except TransientError as exc:
                self.stats.reconnects += 1
                delay = backoff()
                log.warning(
                    "kube.watch_reconnecting",
                    path=self._source.path,
                    delay_s=round(delay, 3),
                    error=str(exc),
                )
                await asyncio.sleep(delay)

    def _query(self) -> dict[str, str]:
        query: dict[str, str] = {}
        if self._source.label_selector:
            query["labelSelector"] = self._source.label_selector
        if self._source.field_selector:
            query["fieldSelector"] = self._source.field_selector
        return query

    async def _relist(self, *, consistent: bool) -> None:
        fresh: dict[str, T] = {}
        query = self._query()
        if consistent:
            query["limit"] = str(self._settings.page_size)
        else:
            query["resourceVersion"] = "0"
        while True:
            page = await self._transport.request(
                self._source.call, "GET", self._source.path, query=query
            )
            for raw in page.get("items") or ():
                fresh[_key(raw)] = self._source.parse(raw)
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
            query["continue"] = token
        self.stats.lists += 1
        old, self._cache = self._cache, fresh
        self.resource_version = str(meta.get("resourceVersion", ""))
        for key, obj in old.items():
            if key not in fresh:
                self._emit(CacheEvent(type=EventType.DELETED, key=key, obj=obj))
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                self._emit(CacheEvent(type=EventType.ADDED, key=key, obj=obj))
            elif prev != obj:
                self._emit(CacheEvent(type=EventType.MODIFIED, key=key, obj=obj, old=prev))
        self.synced.set()
        log.info("kube.cache_listed", path=self._source.path, objects=len(fresh))

    async def _watch(self) -> None:
        low, high = self._settings.watch_timeout_s
        query = self._query()
        query.update(
            watch="1",
            allowWatchBookmarks="true",
            resourceVersion=self.resource_version,
            timeoutSeconds=str(random.randint(low, high)),  # noqa: S311 (spread, not secrets)
        )
        self.stats.watches += 1
        stream = self._transport.stream(
            self._source.call,
            self._source.path,
            query=query,
            idle_timeout_s=self._settings.idle_timeout_s,
        )
        async with aclosing(stream):
            async for line in stream:
                self._on_line(line)

    def _on_line(self, line: Mapping[str, Any]) -> None:
        kind = line.get("type")
        raw = line.get("object") or {}
        if kind == "ERROR":
            code = raw.get("code")
            message = f"{self._source.call}: watch error {code}: {raw.get('message')}"
            if code == 410:
                raise KubeGone(message)
            raise TransientError(message)
        rv = str((raw.get("metadata") or {}).get("resourceVersion", ""))
        if kind == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            return
        try:
            obj = self._source.parse(raw)
        except ParseError as exc:
            log.error("kube.object_unreadable", path=self._source.path, error=str(exc))
            self.resource_version = rv or self.resource_version
            return
        key = _key(raw)
        prev = self._cache.get(key)
        if kind == "DELETED":
            self._cache.pop(key, None)
            self._emit(CacheEvent(type=EventType.DELETED, key=key, obj=obj, old=prev))
        elif kind in ("ADDED", "MODIFIED"):
            self._cache[key] = obj
            etype = EventType.ADDED if prev is None else EventType.MODIFIED
            self._emit(CacheEvent(type=etype, key=key, obj=obj, old=prev))
        self.resource_version = rv or self.resource_version

    def _emit(self, event: CacheEvent[T]) -> None:
        self.stats.events += 1
        for handler in self._handlers:
            try:
                handler(event)
            except Exception as exc:  # a bad handler must not stop the cache
                log.exception("kube.handler_failed", path=self._source.path, error=str(exc))

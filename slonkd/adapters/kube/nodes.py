"""slonkd's changes to Node objects, each idempotent and marked so it can be undone exactly.

- Cordon sets ``spec.unschedulable`` and the annotation ``slonk.dev/cordoned-by``. Uncordon
  lifts only a cordon slonkd made and nobody re-made since: the annotation must be there and
  managedFields must show slonkd (its field manager) as the only owner of
  ``spec.unschedulable``. An admin who uncordons and cordons again takes that field over, so
  slonkd then drops its mark and leaves the node cordoned. ``kubectl cordon`` on a node
  slonkd cordoned sends nothing (kubectl sees it cordoned), so nothing tells that cordon from
  slonkd's; an operator keeps it with ``slonk.dev/hold``, by removing slonkd's annotation, or
  by a server-side apply of ``spec.unschedulable`` (co-ownership: slonkd then leaves it).
- Taints: only keys under ``slonk.dev/`` are added, and only taints slonkd added are
  removed: each taint slonkd adds is recorded (key, effect, value) in the annotation
  ``slonk.dev/taints-added`` in the same patch, and a taint is removed only while the record
  lists it exactly. An operator's taint under ``slonk.dev/`` (``manual-repair`` put there
  by hand, or slonkd's taint whose value someone changed) is left as it is, and slonkd does
  not take over a taint of the same key and effect that someone else put there. The taints
  list is replaced whole by every patch type, so each change is a read-modify-write with the
  node's resourceVersion as precondition, retried on conflict, keeping everyone else's
  taints. Record entries whose taint is gone are dropped at slonkd's next taint write.
- The ``SlurmHealthy`` condition goes to the status subresource by strategic merge (merged by
  type, so other conditions stay); lastTransitionTime moves only when the status changes.
- Labels and annotations: only ``slonk.dev/`` keys, merge patch (``None`` removes a key).

This module decides nothing: callers say what they want; it reports a ChangeResult.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from slonkd.adapters.kube.errors import Call, KubeConflict, KubeNotFound
from slonkd.adapters.kube.parsing import field_owners, taint_to_json
from slonkd.adapters.kube.transport import MERGE_PATCH, STRATEGIC_PATCH, KubeTransport
from slonkd.core.errors import TerminalError, TransientError
from slonkd.core.kube_changes import ChangeOutcome, ChangeResult
from slonkd.core.kube_objects import (
    CORDONED_BY_ANNOTATION,
    SLONK_PREFIX,
    SLURM_HEALTHY,
    TAINTS_BY_ANNOTATION,
    Taint,
    TaintEffect,
    decode_taint_record,
    encode_taint_record,
)

log = structlog.get_logger(__name__)

Mutation = tuple[dict[str, Any] | None, ChangeResult]
"""A patch to send (None: nothing to send) and the result to report once it is applied."""


def now_rfc3339() -> str:
    """The current UTC time as the apiserver writes metav1.Time."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _identity(raw: Mapping[str, Any]) -> tuple[str, str, str]:
    """(key, effect, value) of one raw taint, as slonkd's record lists it."""
    return (str(raw.get("key") or ""), str(raw.get("effect") or ""), str(raw.get("value") or ""))


def _record(
    node: Mapping[str, Any], raw: list[dict[str, Any]]
) -> tuple[set[tuple[str, str, str]], str | None]:
    """slonkd's record of its taints, less the ones no longer on the node; and its text."""
    text = (node["metadata"].get("annotations") or {}).get(TAINTS_BY_ANNOTATION)
    present = {_identity(r) for r in raw}
    return set(decode_taint_record(text)) & present, text


def _record_patch(record: set[tuple[str, str, str]], was: str | None) -> dict[str, Any] | None:
    """A patch that drops stale entries from the record (None: it is up to date)."""
    now = encode_taint_record(record)
    if now == was:
        return None
    return {"metadata": {"annotations": {TAINTS_BY_ANNOTATION: now}}}


def _taints_patch(
    taints: list[dict[str, Any]], record: set[tuple[str, str, str]]
) -> dict[str, Any]:
    """A patch that sets the node's taints and slonkd's record of its own in one write."""
    annotations = {TAINTS_BY_ANNOTATION: encode_taint_record(record)}
    return {"spec": {"taints": taints}, "metadata": {"annotations": annotations}}


def _tainting(wanted: Taint) -> Callable[[dict[str, Any]], Mutation]:
    """The change that makes slonkd's taint ``wanted`` present (:meth:`NodeWriter.set_taint`)."""
    key, effect, value = wanted.key, wanted.effect, wanted.value

    def mutate(node: dict[str, Any]) -> Mutation:
        raw = node.get("spec", {}).get("taints") or []
        record, was = _record(node, raw)
        mine = [r for r in raw if r.get("key") == key and r.get("effect") == effect]
        if mine and _identity(mine[0]) not in record:
            return _record_patch(record, was), ChangeResult(
                outcome=ChangeOutcome.FOREIGN,
                detail=f"taint {key}:{effect} was put there by someone else; left as it is",
            )
        if mine and (mine[0].get("value") or "") == value:
            return _record_patch(record, was), ChangeResult(outcome=ChangeOutcome.UNCHANGED)
        taints = [r for r in raw if not (r.get("key") == key and r.get("effect") == effect)]
        taints.append(taint_to_json(wanted))
        record = {t for t in record if t[:2] != (key, str(effect))} | {wanted.identity}
        return _taints_patch(taints, record), ChangeResult(outcome=ChangeOutcome.CHANGED)

    return mutate


def _merge_into(patch: dict[str, Any], part: Mapping[str, Any]) -> None:
    """Merge ``part`` into ``patch`` (nested objects merged, the rest replaced)."""
    for key, value in part.items():
        if isinstance(value, Mapping):
            if not isinstance(patch.get(key), dict):
                patch[key] = {}
            _merge_into(patch[key], value)
        else:
            patch[key] = value


def _check_ours(key: str) -> None:
    if not key.startswith(SLONK_PREFIX):
        raise TerminalError(f"slonkd writes only keys under {SLONK_PREFIX}, not {key!r}")


class NodeWriter:
    """Ownership-marked changes to Nodes."""

    def __init__(self, transport: KubeTransport, *, conflict_retries: int = 8) -> None:
        self._transport = transport
        self._retries = conflict_retries
        self.conflicts = 0
        """Read-modify-writes that had to be retried because the node changed meanwhile."""

    @property
    def manager(self) -> str:
        """The field manager slonkd's writes carry."""
        return self._transport.field_manager

    async def _rmw(
        self,
        name: str,
        mutate: Callable[[dict[str, Any]], Mutation],
        *,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> ChangeResult:
        results = await self._rmw_many(
            name, [mutate], subresource=subresource, content_type=content_type
        )
        return results[0]

    async def _rmw_many(
        self,
        name: str,
        mutates: Sequence[Callable[[dict[str, Any]], Mutation]],
        *,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> list[ChangeResult]:
        """Read the node, apply every change to what was read, write them as one patch.

        The changes must touch different fields (their patches are merged). A conflict
        (the node changed since the read) reads and decides again, all changes together.
        """
        get = Call(verb="get", resource="nodes", name=name)
        patch_call = Call(verb="patch", resource="nodes", subresource=subresource, name=name)
        path = f"/api/v1/nodes/{name}"
        for _attempt in range(self._retries):
            try:
                node = await self._transport.request(get, "GET", path)
            except KubeNotFound:
                gone = ChangeResult(outcome=ChangeOutcome.GONE, detail=f"node {name} not found")
                return [gone] * len(mutates)
            patch: dict[str, Any] = {}
            results = []
            for mutate in mutates:
                part, result = mutate(node)
                results.append(result)
                if part is not None:
                    _merge_into(patch, part)
            if not patch:
                return results
            patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"][
                "resourceVersion"
            ]
            target = f"{path}/{subresource}" if subresource else path
            try:
                await self._transport.request(
                    patch_call, "PATCH", target, body=patch, content_type=content_type
                )
            except KubeConflict:
                self.conflicts += 1
                log.info("kube.node_conflict", node=name, subresource=subresource)
                continue
            except KubeNotFound:
                gone = ChangeResult(outcome=ChangeOutcome.GONE, detail=f"node {name} not found")
                return [gone] * len(mutates)
            return results
        raise TransientError(f"node {name}: still conflicting after {self._retries} attempts")

    # -- cordon ----------------------------------------------------------------------------

    async def cordon(self, name: str, *, cause: str) -> ChangeResult:
        """Cordon the node and mark the cordon as slonkd's; a foreign cordon is left alone."""
        return await self._rmw(name, self._cordoning(cause))

    async def cordon_and_taint(
        self, name: str, *, cause: str, key: str, effect: TaintEffect, value: str = ""
    ) -> tuple[ChangeResult, ChangeResult]:
        """:meth:`cordon` and :meth:`set_taint` in one read and one write.

        Each keeps its own rule (a foreign cordon or taint is left alone) and result. One
        write, not two: right after a cordon the node lifecycle controller adds its
        ``node.kubernetes.io/unschedulable`` taint, so a second read-modify-write nearly
        always met a conflict and read again (issue 21's cordon latency).
        """
        _check_ours(key)
        cordon, taint = await self._rmw_many(
            name, [self._cordoning(cause), _tainting(Taint(key=key, effect=effect, value=value))]
        )
        return cordon, taint

    def _cordoning(self, cause: str) -> Callable[[dict[str, Any]], Mutation]:
        def mutate(node: dict[str, Any]) -> Mutation:
            annotations = node["metadata"].get("annotations") or {}
            if node.get("spec", {}).get("unschedulable"):
                if CORDONED_BY_ANNOTATION in annotations and self._owns_cordon(node):
                    return None, ChangeResult(outcome=ChangeOutcome.UNCHANGED)
                return None, ChangeResult(
                    outcome=ChangeOutcome.FOREIGN, detail="already cordoned by someone else"
                )
            patch = {
                "metadata": {"annotations": {CORDONED_BY_ANNOTATION: cause}},
                "spec": {"unschedulable": True},
            }
            return patch, ChangeResult(outcome=ChangeOutcome.CHANGED, detail=cause)

        return mutate

    async def uncordon(self, name: str) -> ChangeResult:
        """Lift slonkd's own cordon; a cordon someone else made (or re-made) stays."""

        def mutate(node: dict[str, Any]) -> Mutation:
            annotations = node["metadata"].get("annotations") or {}
            cordoned = bool(node.get("spec", {}).get("unschedulable"))
            marked = CORDONED_BY_ANNOTATION in annotations
            if not marked:
                outcome = ChangeOutcome.FOREIGN if cordoned else ChangeOutcome.UNCHANGED
                return None, ChangeResult(outcome=outcome)
            unmark: dict[str, Any] = {"metadata": {"annotations": {CORDONED_BY_ANNOTATION: None}}}
            if not cordoned:
                # Someone uncordoned already: only the stale mark goes.
                return unmark, ChangeResult(outcome=ChangeOutcome.UNCHANGED)
            if not self._owns_cordon(node):
                return unmark, ChangeResult(
                    outcome=ChangeOutcome.FOREIGN,
                    detail="re-cordoned by someone else since slonkd cordoned; left cordoned",
                )
            unmark["spec"] = {"unschedulable": None}
            return unmark, ChangeResult(outcome=ChangeOutcome.CHANGED)

        return await self._rmw(name, mutate)

    def _owns_cordon(self, node: Mapping[str, Any]) -> bool:
        return field_owners(node, "spec", "unschedulable") == {self.manager}

    # -- taints ----------------------------------------------------------------------------

    async def set_taint(
        self, name: str, key: str, effect: TaintEffect, value: str = ""
    ) -> ChangeResult:
        """Make slonkd's taint ``key`` present with this effect and value; others' stay.

        A taint of that key and effect that slonkd did not add is left alone (FOREIGN).
        """
        _check_ours(key)
        return await self._rmw(name, _tainting(Taint(key=key, effect=effect, value=value)))

    async def remove_taint(
        self, name: str, key: str, effect: TaintEffect | None = None
    ) -> ChangeResult:
        """Remove slonkd's taint ``key`` (of one effect, or all) if slonkd added it exactly.

        Someone else's taint of that key (not in slonkd's record) stays (FOREIGN).
        """
        _check_ours(key)

        def mutate(node: dict[str, Any]) -> Mutation:
            raw = node.get("spec", {}).get("taints") or []
            record, was = _record(node, raw)

            def matches(r: Mapping[str, Any]) -> bool:
                return r.get("key") == key and (effect is None or r.get("effect") == effect)

            ours = [r for r in raw if matches(r) and _identity(r) in record]
            foreign = [r for r in raw if matches(r) and _identity(r) not in record]
            if not ours:
                outcome = ChangeOutcome.FOREIGN if foreign else ChangeOutcome.UNCHANGED
                detail = f"taint {key} was not added by slonkd; left as it is" if foreign else ""
                return _record_patch(record, was), ChangeResult(outcome=outcome, detail=detail)
            taints = [r for r in raw if not (matches(r) and _identity(r) in record)]
            record -= {_identity(r) for r in ours}
            return _taints_patch(taints, record), ChangeResult(outcome=ChangeOutcome.CHANGED)

        return await self._rmw(name, mutate)

    # -- condition -------------------------------------------------------------------------

    async def set_slurm_healthy(
        self, name: str, *, healthy: bool, reason: str, message: str = ""
    ) -> ChangeResult:
        """Set the node's ``SlurmHealthy`` condition; other conditions are not touched."""
        status = "True" if healthy else "False"

        def mutate(node: dict[str, Any]) -> Mutation:
            conditions = node.get("status", {}).get("conditions") or []
            old = next((c for c in conditions if c.get("type") == SLURM_HEALTHY), None)
            if (
                old is not None
                and old.get("status") == status
                and old.get("reason") == reason
                and old.get("message", "") == message
            ):
                return None, ChangeResult(outcome=ChangeOutcome.UNCHANGED)
            now = now_rfc3339()
            since = (
                None
                if old is None or old.get("status") != status
                else old.get("lastTransitionTime")
            )
            condition = {
                "type": SLURM_HEALTHY,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": since or now,
            }
            patch = {"status": {"conditions": [condition]}}
            return patch, ChangeResult(outcome=ChangeOutcome.CHANGED, detail=status)

        return await self._rmw(name, mutate, subresource="status", content_type=STRATEGIC_PATCH)

    # -- labels and annotations ------------------------------------------------------------

    async def set_labels(self, name: str, labels: Mapping[str, str | None]) -> ChangeResult:
        """Set (or with None remove) slonkd's labels on the node."""
        return await self._set_meta(name, "labels", labels)

    async def set_annotations(
        self, name: str, annotations: Mapping[str, str | None]
    ) -> ChangeResult:
        """Set (or with None remove) slonkd's annotations on the node."""
        return await self._set_meta(name, "annotations", annotations)

    async def _set_meta(
        self, name: str, field: str, values: Mapping[str, str | None]
    ) -> ChangeResult:
        for key in values:
            _check_ours(key)

        def mutate(node: dict[str, Any]) -> Mutation:
            current = node["metadata"].get(field) or {}
            if all(current.get(k) == v for k, v in values.items()):
                return None, ChangeResult(outcome=ChangeOutcome.UNCHANGED)
            patch = {"metadata": {field: dict(values)}}
            return patch, ChangeResult(outcome=ChangeOutcome.CHANGED)

        return await self._rmw(name, mutate)

"""The coordinator's topology task: node labels -> ``topology.conf`` -> ``scontrol reconfigure``.

While leading, the coordinator runs :meth:`TopologySync.run` as one extra task. It reuses the
coordinator's node and pod informers: a worker pod's SLURM node is the pod's name and its
labels are those of the K8s node the pod runs on (``pod.spec.nodeName``), so a pod that moves
moves its SLURM node in the topology. Only a Running pod places its node: one whose pod is
absent or not Running (deleted and not yet made again, Pending, scheduled or not) keeps its
place in the last rendering, so replacing a worker pod reconfigures nothing unless its
successor runs elsewhere. Every SLURM node slurmctld knows is rendered (one never placed by a
pod, or whose K8s node lacks the labels, goes to the documented default of
:mod:`slonkd.core.topology`); pods that are not SLURM nodes are left out, since slurmctld
refuses a file naming unknown nodes.

On changes (debounced) and on a resync period it renders the file, and when its content hash
differs from what slurmctld was last reconfigured with it publishes the stamped file (the first
line carries the hash) to the ConfigMap it owns and/or a path, waits until slurmctld's copy (a
file the coordinator can read: the kubelet updates a mounted ConfigMap late) carries the new
hash, then runs ``scontrol reconfigure`` once; the loop runs at most one in
``min_reconfigure_interval_s`` (24.11 restarts slurmctld on each): a change within it waits,
unpublished, and the labels as they are when it ends are applied. A new leader whose desired
file slurmctld already runs (its copy carries the hash and ``scontrol show topology``
matches) does not reconfigure. :meth:`TopologySync.status` reports hashes, the last
reconfigure and the drift between the labels and ``scontrol show topology``.

A rendering slurmctld would die on (:func:`slonkd.core.topology.check`: 24.11's
``topology/block`` rules) is never published: it is logged (``topology.refused``) and shown
as ``refused`` in the status, and slurmctld keeps the file it runs. Blocks left out for being
smaller than the base block size are logged (``topology.blocks_left_out``) and shown as
``left_out_blocks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from slonkd.adapters.kube.configmaps import OwnedConfigMap
from slonkd.adapters.kube.informer import CacheEvent, EventType, Informer
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.errors import SlonkdError, TerminalError
from slonkd.core.kube_changes import ChangeOutcome
from slonkd.core.kube_objects import Node, Pod, PodPhase
from slonkd.core.topology import (
    Rendered,
    UnsafeTopology,
    check,
    drift,
    leaf_membership,
    render,
    stamped,
    stamped_hash,
)
from slonkd.runtime.level_loop import Cause, Debounce, run_level_triggered
from slonkd.runtime.topology_settings import TopologySettings

log = structlog.get_logger("slonkd.topology")

_CAUSES = {Cause.START: "start", Cause.CHANGE: "labels", Cause.RESYNC: "resync"}
"""The cause a sync logs and publishes, by why the loop ran it."""

DRIFT_SHOWN = 50
"""Most drifting nodes listed by name in :meth:`TopologySync.status` (all are counted)."""


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader sees the old or the new file, whole."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_if_changed(path: Path, text: str, sha256: str) -> bool:
    """Write the stamped ``text`` unless ``path`` already carries ``sha256``; True: written."""
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = ""
    if stamped_hash(current) == sha256:
        return False
    write_atomically(path, text)
    return True


def labels_by_slurm_node(
    slurm_names: Sequence[str],
    pods: Mapping[str, Pod],
    nodes: Callable[[str], Node | None],
    last: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Mapping[str, str]]:
    """``{SLURM node: labels of the K8s node its pod runs on}``.

    A Running pod places its SLURM node on its K8s node (no labels when that node is not
    known: deleted). A SLURM node whose pod is absent or not Running keeps its labels in
    ``last`` (the previous rendering's): a pod merely pending or being replaced moves
    nothing. One not in ``last`` gets the labels of the K8s node its pod is scheduled to, or
    none.
    """
    by_name: dict[str, Pod] = {p.name: p for p in pods.values()}
    out: dict[str, Mapping[str, str]] = {}
    for name in slurm_names:
        pod = by_name.get(name)
        running = pod is not None and pod.phase is PodPhase.RUNNING and bool(pod.node_name)
        if not running and last is not None and name in last:
            out[name] = last[name]
            continue
        kube_name = pod.node_name if pod is not None else None
        kube = nodes(kube_name) if kube_name else None
        out[name] = kube.labels if kube is not None else {}
    return out


@dataclass(slots=True)
class _State:
    desired: Rendered | None = None
    applied: str | None = None
    """The hash slurmctld was reconfigured with (or found running), None: unknown."""
    copy_hash: str | None = None
    last_reconfigure: dict[str, Any] | None = None
    reconfigures: int = 0
    drift: dict[str, tuple[str, str]] = field(default_factory=dict)
    drift_checked_at: float | None = None
    waiting_since: float | None = None
    error: str = ""
    refused: str = ""
    """Why the latest rendering was not published ("": it was not refused)."""
    renders: int = 0
    last_render: dict[str, Any] | None = None
    """When and why labels were last rendered (a resync renders too, silently when unchanged)."""
    reconfigure_began: float | None = None
    """When the last ``scontrol reconfigure`` began (monotonic), None: none in this term."""
    deferred_until: float | None = None
    """A changed rendering waits until then (monotonic) for its publish and reconfigure."""
    deferred_cause: str = ""
    """Why the rendering that waits was made (its apply logs that cause, not the timer's)."""


class TopologyApplier:
    """Renders labels and brings slurmctld to the result: publish, wait, reconfigure."""

    def __init__(
        self,
        s: TopologySettings,
        *,
        configmap: OwnedConfigMap | None,
        slurm: ScontrolBackend,
        check_valid: Callable[[], int] = lambda: 0,
    ) -> None:
        self.s = s
        self.configmap = configmap
        self.slurm = slurm
        self.check_valid = check_valid
        self.state = _State()

    async def apply(
        self, labels: Mapping[str, Mapping[str, str]], *, cause: str, not_before: float = 0.0
    ) -> bool:
        """Render ``labels``; if slurmctld does not run it yet, publish, wait, reconfigure.

        A rendering that fails :func:`check` is refused: nothing is published (False). A
        changed rendering before ``not_before`` (monotonic; the loop's reconfigure interval)
        is deferred: nothing is published yet (False, ``reconfigure_deferred_until``).
        """
        st = self.state
        if st.deferred_until is not None and cause == "resync":
            cause = st.deferred_cause or cause  # the deferred change, applied by the timer
        st.renders += 1
        st.last_render = {"at": time.time(), "cause": cause}
        try:
            rendered = render(labels, self.s.spec)
            problems = check(rendered.text, self.s.spec.plugin, known=labels.keys())
            if problems:
                raise UnsafeTopology("; ".join(problems))
        except UnsafeTopology as exc:
            if st.refused != str(exc):
                log.error(
                    "topology.refused",
                    error=str(exc)[:300],
                    nodes=len(labels),
                    cause=cause,
                    detail="not published: slurmctld keeps the file it runs",
                )
            st.refused = str(exc)[:300]
            return False
        st.refused = ""
        st.desired = rendered
        if rendered.sha256 != st.applied and time.monotonic() < not_before:
            self._defer(rendered, not_before, cause)
            return False
        st.deferred_until, st.deferred_cause = None, ""
        if rendered.sha256 == st.applied:
            if cause != "resync":
                log.info("topology.unchanged", sha256=rendered.sha256[:16], cause=cause)
            if self._drift_due():
                await self.refresh_drift()
            return False
        await self._publish(rendered, cause)
        if not await self._wait_for_copy(rendered.sha256):
            return False
        shown = await self.show_topology()
        if st.applied is None and leaf_membership(shown) == leaf_membership(rendered.text):
            st.applied = rendered.sha256  # a new leader: slurmctld already runs this file
            self._set_drift(shown)
            log.info("topology.already_applied", sha256=rendered.sha256[:16], cause=cause)
            return False
        token = self.check_valid()  # a paused old leader stops here
        began = time.monotonic()
        st.reconfigure_began = began  # a failed one counts too: it may have restarted slurmctld
        await self.slurm.runner.run("scontrol", "reconfigure")
        took = time.monotonic() - began
        st.applied = rendered.sha256
        st.reconfigures += 1
        st.last_reconfigure = {"at": time.time(), "sha256": rendered.sha256, "took_s": took}
        log.info(
            "topology.reconfigured",
            sha256=rendered.sha256[:16],
            nodes=len(labels),
            cause=cause,
            owner="coordinator",
            took_s=round(took, 3),
            fencing_token=token,
        )
        await self.refresh_drift()
        return True

    # -- steps -------------------------------------------------------------------------------

    def _defer(self, rendered: Rendered, until: float, cause: str) -> None:
        """Keep ``rendered`` unpublished until ``until``; logged once per deferral."""
        st = self.state
        if st.deferred_until is None:
            log.info(
                "topology.reconfigure_deferred",
                sha256=rendered.sha256[:16],
                cause=cause,
                wait_s=round(until - time.monotonic(), 3),
                detail="at most one reconfigure per min_reconfigure_interval_s",
            )
            st.deferred_cause = cause
        st.deferred_until = until

    async def _publish(self, rendered: Rendered, cause: str) -> None:
        text = stamped(rendered)
        token = self.check_valid()
        if rendered.left_out:
            log.warning(
                "topology.blocks_left_out",
                blocks=dict(rendered.left_out),
                cause=cause,
                detail="fewer nodes than the base block size: their nodes are in no block",
            )
        if self.configmap is not None:
            result = await self.configmap.publish({self.s.configmap_key: text})
            if result.outcome is ChangeOutcome.FOREIGN:
                raise TerminalError(result.detail)
            log.info(
                "topology.configmap_published",
                configmap=self.configmap.name,
                sha256=rendered.sha256[:16],
                outcome=result.outcome.value,
                cause=cause,
                fencing_token=token,
            )
        if self.s.path is not None:
            path = Path(self.s.path)
            if write_if_changed(path, text, rendered.sha256):
                log.info(
                    "topology.file_written",
                    path=str(path),
                    sha256=rendered.sha256[:16],
                    cause=cause,
                    fencing_token=token,
                )

    def read_copy_hash(self) -> str | None:
        """The hash slurmctld's copy carries now (None: missing, unstamped or mid-update)."""
        assert self.s.copy is not None  # noqa: S101 - settings refuse None
        try:
            text = Path(self.s.copy).read_text()
        except FileNotFoundError:
            text = ""
        self.state.copy_hash = stamped_hash(text)
        return self.state.copy_hash

    async def _wait_for_copy(self, sha256: str) -> bool:
        st = self.state
        st.waiting_since = time.time()
        deadline = time.monotonic() + self.s.copy_timeout_s
        while self.read_copy_hash() != sha256:
            if time.monotonic() >= deadline:
                log.warning(
                    "topology.copy_stale",
                    path=self.s.copy,
                    want=sha256[:16],
                    have=(st.copy_hash or "")[:16],
                    waited_s=self.s.copy_timeout_s,
                    detail="slurmctld's copy did not get the new file: not reconfiguring yet",
                )
                st.waiting_since = None
                return False
            await asyncio.sleep(self.s.copy_poll_s)
        waited = time.time() - st.waiting_since
        st.waiting_since = None
        log.info("topology.copy_current", path=self.s.copy, waited_s=round(waited, 3))
        return True

    async def show_topology(self) -> str:
        """``scontrol show topology`` as slurmctld runs it now."""
        return await self.slurm.runner.run("scontrol", "show", "topology")

    def _drift_due(self) -> bool:
        at = self.state.drift_checked_at
        return at is None or time.monotonic() - at >= self.s.resync_s

    async def refresh_drift(self) -> None:
        """Compare the labels' leaves with slurmctld's (``scontrol show topology``)."""
        self._set_drift(await self.show_topology())

    def _set_drift(self, shown: str) -> None:
        st = self.state
        desired = leaf_membership(st.desired.text) if st.desired else {}
        st.drift = drift(desired, leaf_membership(shown))
        st.drift_checked_at = time.monotonic()
        if st.drift:
            log.warning(
                "topology.drift", nodes=len(st.drift), sample=sorted(st.drift)[:DRIFT_SHOWN]
            )

    # -- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """JSON-able state for ``slonkd status``."""
        st = self.state
        return {
            "plugin": self.s.spec.plugin,
            "desired_sha256": st.desired.sha256 if st.desired else None,
            "slurmctld_copy_sha256": st.copy_hash,
            "applied_sha256": st.applied,
            "waiting_for_copy_since": st.waiting_since,
            "last_reconfigure": st.last_reconfigure,
            "reconfigures": st.reconfigures,
            "renders": st.renders,
            "last_render": st.last_render,
            "reconfigure_deferred_until": (
                None
                if st.deferred_until is None
                else time.time() + st.deferred_until - time.monotonic()
            ),
            "drift_count": len(st.drift),
            "drift": {
                n: {"labels": want, "slurmctld": have}
                for n, (want, have) in list(st.drift.items())[:DRIFT_SHOWN]
            },
            "error": st.error,
            "refused": st.refused,
            "left_out_blocks": dict(st.desired.left_out) if st.desired else {},
        }


class TopologySync(TopologyApplier):
    """Keeps slurmctld's topology in step with the node labels (one leader's task)."""

    def __init__(
        self,
        s: TopologySettings,
        *,
        transport: KubeTransport,
        namespace: str,
        nodes: Informer[Node],
        pods: Informer[Pod],
        slurm: ScontrolBackend,
        check_valid: Callable[[], int] = lambda: 0,
    ) -> None:
        configmap = (
            OwnedConfigMap(transport, namespace, s.configmap) if s.configmap is not None else None
        )
        super().__init__(s, configmap=configmap, slurm=slurm, check_valid=check_valid)
        self.nodes = nodes
        self.pods = pods
        self._placed: dict[str, Mapping[str, str]] = {}
        """The labels each SLURM node was last rendered with (its place while it has no pod)."""
        self._dirty = asyncio.Event()
        nodes.add_handler(self._on_node)
        pods.add_handler(lambda _e: self._dirty.set())

    def _on_node(self, event: CacheEvent[Node]) -> None:
        """Mark dirty on a node added, deleted or relabelled (status heartbeats do not matter).

        Only a mark: the loop renders from the caches, which already hold the change (the
        informer updates its cache before it calls handlers), so any later render sees it.
        A deleted node is a change: the pods still naming it lose its labels.
        """
        old = event.old
        if event.type is not EventType.MODIFIED or old is None or old.labels != event.obj.labels:
            self._dirty.set()

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Sync now, then on (debounced) changes and on every resync, until cancelled."""
        await self.nodes.synced.wait()
        await self.pods.synced.wait()
        log.info("topology.started", plugin=self.s.spec.plugin, configmap=self.s.configmap)
        await run_level_triggered(
            self._dirty,
            self._pass,
            debounce=Debounce(quiet_s=self.s.debounce_s, max_wait_s=self.s.max_delay_s),
        )

    async def _pass(self, cause: Cause) -> float:
        """One sync; a failure is kept in the state and retried at the next wake."""
        why = _CAUSES[cause]
        try:
            await self.sync_once(cause=why)
            self.state.error = ""
        except (SlonkdError, OSError) as exc:
            self.state.error = str(exc)[:300]
            log.warning("topology.sync_failed", error=self.state.error, cause=why)
        until = self.state.deferred_until
        if until is not None:  # look again when the interval is over, not a resync later
            return min(self.s.resync_s, max(0.01, until - time.monotonic()))
        return self.s.resync_s

    def not_before(self) -> float:
        """When the next reconfigure may begin (monotonic): the interval after the last."""
        began = self.state.reconfigure_began
        return 0.0 if began is None else began + self.s.min_reconfigure_interval_s

    async def sync_once(self, *, cause: str) -> bool:
        """Render from the caches; publish and reconfigure if it changed. True: reconfigured."""
        names = [n.name for n in await self.slurm.read_nodes()]
        labels = labels_by_slurm_node(names, self.pods.items(), self.nodes.get, self._placed)
        self._placed = labels
        return await self.apply(labels, cause=cause, not_before=self.not_before())

"""Bringing slurmctld to a rendered ``topology.conf``: publish, wait for its copy, reconfigure.

:class:`TopologyApplier` renders the labels it is given (:mod:`slonkd.core.topology`), and
when the content hash differs from what slurmctld was last reconfigured with it publishes the
stamped file (the first line carries the hash) to the ConfigMap it owns and/or a path, waits
until slurmctld's copy (a file the coordinator can read: the kubelet updates a mounted
ConfigMap late) carries the new hash, then runs ``scontrol reconfigure`` once. A changed
rendering before the caller's ``not_before`` (the reconfigure interval) waits, unpublished. A
new leader whose desired file slurmctld already runs (its copy carries the hash and ``scontrol
show topology`` matches) does not reconfigure. :meth:`TopologyApplier.status` reports hashes,
the last reconfigure and the drift between the labels and ``scontrol show topology``.

A rendering slurmctld would die on (:func:`slonkd.core.topology.check`: 24.11's
``topology/block`` rules) is never published: it is logged (``topology.refused``) and shown
as ``refused`` in the status, and slurmctld keeps the file it runs. Blocks left out for being
smaller than the base block size are logged (``topology.blocks_left_out``) and shown as
``left_out_blocks``.

The leader's task that feeds it the labels and keeps the interval is
:class:`~slonkd.runtime.coordinating.topology_sync.TopologySync`
(:mod:`slonkd.runtime.coordinating.topology_sync`);
the settings are :mod:`slonkd.runtime.coordinating.topology_settings`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from slonkd.adapters.kube.configmaps import OwnedConfigMap
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.core.errors import TerminalError
from slonkd.core.kube_changes import ChangeOutcome
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
from slonkd.runtime.coordinating.topology_settings import TopologySettings

log = structlog.get_logger("slonkd.topology")

DRIFT_SHOWN = 50
"""Most drifting nodes listed by name in :meth:`TopologyApplier.status` (all are counted)."""


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
        slurm: SlurmBackend,
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
        self.check_valid()  # a paused old leader stops here
        began = time.monotonic()
        st.reconfigure_began = began  # a failed one counts too: it may have restarted slurmctld
        await self.slurm.reconfigure()
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
        self.check_valid()  # a paused old leader stops here
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
            )
        if self.s.path is not None:
            path = Path(self.s.path)
            if write_if_changed(path, text, rendered.sha256):
                log.info(
                    "topology.file_written",
                    path=str(path),
                    sha256=rendered.sha256[:16],
                    cause=cause,
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
        return await self.slurm.show_topology()

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

"""The coordinator's ``topology`` settings: what to render, where to publish it, timings.

Parsed from the ``topology`` object of the coordinator's JSON config by
:func:`topology_settings` (unknown keys and wrong types are refused with the key's name);
used by :mod:`slonkd.runtime.coordinating.topology_sync` (the task that renders ``topology.conf``),
:mod:`slonkd.runtime.coordinating.topology_apply` (which publishes it and reconfigures slurmctld)
and the
coordinator's settings (:mod:`slonkd.runtime.coordinating.settings`).
The rendering rules themselves are :mod:`slonkd.core.topology`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slonkd.core.topology import TopologySpec, block_sizes

_TIMES = (
    "debounce_s",
    "max_delay_s",
    "resync_s",
    "copy_timeout_s",
    "copy_poll_s",
    "min_reconfigure_interval_s",
)
"""The settings that are seconds (each a non-negative number), checked in this order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologySettings:
    """What to render, where to publish it, where slurmctld's copy is read, and timings."""

    spec: TopologySpec = field(default_factory=TopologySpec)
    configmap: str | None = "slonkd-topology"
    """The ConfigMap slonkd owns in the coordinator's namespace (None: publish no ConfigMap)."""
    configmap_key: str = "topology.conf"
    path: str | None = None
    """Also (or only) write the file here, atomically (None: write no file)."""
    slurmctld_copy: str | None = None
    """The file slurmctld reads, as the coordinator sees it; None: ``path``."""
    debounce_s: float = 2.0
    """A render starts once no label or pod change arrived for this long ..."""
    max_delay_s: float = 10.0
    """... or this long after the first change of a burst."""
    resync_s: float = 60.0
    """Render (and compare) at least this often, and refresh the drift."""
    copy_timeout_s: float = 300.0
    """How long to wait for slurmctld's copy to carry a new hash before trying again later."""
    copy_poll_s: float = 1.0
    min_reconfigure_interval_s: float = 60.0
    """At most one ``scontrol reconfigure`` in this long (24.11 restarts slurmctld on each):
    a change within it is published and applied once it is over, the latest labels then."""

    def __post_init__(self) -> None:
        if self.configmap is None and self.path is None:
            raise ValueError("topology: set configmap and/or path (where to publish the file)")
        if self.copy is None:
            raise ValueError(
                "topology: set slurmctld_copy (the file slurmctld reads, as the coordinator "
                "sees it): reconfigure waits until it carries the new content"
            )
        for name in _TIMES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"topology: {name} must be a non-negative number")
        if self.spec.plugin not in ("tree", "block"):
            raise ValueError(f"topology: plugin must be tree or block, not {self.spec.plugin!r}")

    @property
    def copy(self) -> str | None:
        """Where slurmctld's copy is read."""
        return self.slurmctld_copy or self.path


_SPEC_KEYS = {"plugin", "tree_keys", "block_key", "block_sizes"}
_KEYS = _SPEC_KEYS | set(_TIMES) | {"configmap", "configmap_key", "path", "slurmctld_copy"}


def topology_settings(doc: Any, *, default_configmap: str | None = None) -> TopologySettings:
    """Settings from the ``topology`` object of the coordinator's JSON config; ValueError."""
    if not isinstance(doc, dict):
        raise ValueError("topology: must be a JSON object")
    if set(doc) - _KEYS:
        raise ValueError(f"topology: unknown keys {sorted(set(doc) - _KEYS)}")
    spec_args: dict[str, Any] = {k: doc[k] for k in _SPEC_KEYS & set(doc)}
    if "tree_keys" in spec_args:
        keys = spec_args["tree_keys"]
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise ValueError("topology: tree_keys must be a non-empty list of label keys")
        spec_args["tree_keys"] = tuple(keys)
    if "block_sizes" in spec_args:
        sizes = spec_args["block_sizes"]
        if not isinstance(sizes, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes
        ):
            raise ValueError("topology: block_sizes must be a list of positive integers")
        try:
            spec_args["block_sizes"] = block_sizes(sizes)
        except ValueError as exc:
            raise ValueError(f"topology: {exc}") from None
    for key in ("plugin", "block_key", "configmap", "configmap_key", "path", "slurmctld_copy"):
        if key in doc and doc[key] is not None and not isinstance(doc[key], str):
            raise ValueError(f"topology: {key} must be a string")
    rest = {k: v for k, v in doc.items() if k not in _SPEC_KEYS}
    if "configmap" not in rest and default_configmap:
        rest["configmap"] = default_configmap
    try:
        return TopologySettings(spec=TopologySpec(**spec_args), **rest)
    except TypeError as exc:
        raise ValueError(f"topology: {exc}") from None

"""The agent's health settings: which checks run, with their thresholds, deadlines and periods.

:class:`HealthSettings` is the ``health`` object of the agent's config (every field a key,
see :mod:`slonkd.cli.agent`) and the options of ``slonkd check``; it refuses a malformed
value with the key's name. The checks it asks for are built by
:func:`slonkd.adapters.health.checks.build_checks`, their probes are
:mod:`slonkd.adapters.health.probes`'s; thresholds and parsers are the core's
(:mod:`slonkd.core.gpu_health`, :mod:`slonkd.core.node_health`, :mod:`slonkd.core.nvlink_health`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from slonkd.core import gpu_health, node_health, nvlink_health

_DCGM_HOST_RE: Final = re.compile(
    r"unix://(/[A-Za-z0-9._-]+)+|[A-Za-z0-9][A-Za-z0-9.-]{0,252}(:\d{1,5})?"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthSettings:
    """Which checks run, with their thresholds, deadlines and periods (seconds)."""

    expected_gpus: int = 0
    gpu: gpu_health.GpuThresholds | None = None
    xid: gpu_health.XidPolicy = field(default_factory=gpu_health.XidPolicy)
    xid_lookback_s: float = 0.0
    """On the first kernel log read, Xids older than the agent's start minus this count only
    if a reboot or a person must fix them (see ``gpu_health.XidTracker``)."""
    dcgm: bool = True
    """Run ``dcgmi diag`` on the heavy schedule (DCGM is optional: missing -> unknown)."""
    dcgm_level: int = 1
    """Its run level on the schedule (``-r``: 1 quick, 2 medium, 3 and 4 long)."""
    dcgm_recheck_level: int = 0
    """Its run level when a recheck asks for every check now (proof of health before a node
    returns from repair, ``slonkd recheck``); 0: ``dcgm_level``. Give ``dcgm_timeout_s`` the
    time that level takes."""
    dcgm_timeout_s: float = 180.0
    dcgm_host: str = ""
    """nv-hostengine to ask (``dcgmi --host``): ``unix:///path/to/socket`` or ``host[:port]``;
    empty: dcgmi's default, localhost:5555."""
    nvlink_links: int = 0
    """Active NVLink links every GPU must have (0: no NVLink check; H100/H200 SXM: 18)."""
    nvlink_warn_growth: Mapping[str, int] | None = None
    """NVLink counter growth between two runs that warns, per counter (``replay``,
    ``recovery``, ``crc``, ...); None: ``nvlink_health``'s defaults; a table replaces them
    whole (a counter it leaves out never warns)."""
    nvlink_fail_growth: Mapping[str, int] | None = None
    """The same for a fail."""
    fabric: bool = True
    """Read the fabric state from ``nvidia-smi -q`` (NVSwitch systems; N/A elsewhere)."""
    fabric_required: bool = False
    """This node must have a fabric (HGX): no fabric section / N/A fails instead of passing."""
    disk_paths: Sequence[str] = ("/",)
    disk: node_health.DiskThresholds = field(default_factory=node_health.DiskThresholds)
    mounts: Sequence[str] = ()
    slurmd_port: int | None = None
    peers: Sequence[str] = ()
    nic_interfaces: Sequence[str] = ()
    ib_expected_ports: int = 0
    ib: node_health.IbThresholds = field(default_factory=node_health.IbThresholds)
    pcie_vendors: Sequence[str] = ("0x10de", "0x15b3")
    """PCI vendor ids whose links are checked (NVIDIA GPUs, Mellanox/NVIDIA NICs)."""
    sysfs_root: str = "/sys"
    kmsg_path: str = "/dev/kmsg"
    timeout_s: float = 10.0
    mount_timeout_s: float = 5.0
    fast_period_s: float = 30.0
    slow_period_s: float = 300.0
    heavy_period_s: float = 3600.0
    """Period of the heavy checks (dcgmi diag), jittered like the others."""

    def __post_init__(self) -> None:
        for flag in ("dcgm", "fabric", "fabric_required"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be true or false")
        if isinstance(self.nvlink_links, bool) or not isinstance(self.nvlink_links, int):
            raise ValueError("nvlink_links must be a whole number")
        if not 0 <= self.nvlink_links <= 64:
            raise ValueError("nvlink_links must be between 0 and 64")
        if self.dcgm_level not in (1, 2, 3, 4) or self.dcgm_recheck_level not in (0, 1, 2, 3, 4):
            raise ValueError("dcgm_level must be 1 to 4, dcgm_recheck_level 0 (the same) to 4")
        for name in ("dcgm_timeout_s", "heavy_period_s", "xid_lookback_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name} must be a number of seconds >= 0")
        for name in ("timeout_s", "mount_timeout_s", "fast_period_s", "slow_period_s"):
            value = getattr(
                self, name
            )  # 0 would run a check in a tight loop or never let it finish
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{name} must be a number of seconds > 0")
        for name in ("disk_paths", "mounts", "peers", "nic_interfaces", "pcie_vendors"):
            value = getattr(self, name)  # a string would be iterated character by character
            if isinstance(value, str | bytes) or not isinstance(value, Sequence):
                raise ValueError(f"{name} must be a list of strings, not {type(value).__name__}")
            if not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"{name} must be a list of non-empty strings")
        for name in ("expected_gpus", "ib_expected_ports"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0")
        port = self.slurmd_port
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
        ):
            raise ValueError("slurmd_port must be a port number (1-65535) or null")
        for name in ("sysfs_root", "kmsg_path"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a path")
        if not isinstance(self.dcgm_host, str) or (
            self.dcgm_host and not _DCGM_HOST_RE.fullmatch(self.dcgm_host)
        ):
            raise ValueError("dcgm_host must be unix:///socket/path or host[:port]")
        if self.dcgm_timeout_s <= 0 or self.heavy_period_s <= 0:
            raise ValueError("dcgm_timeout_s and heavy_period_s must be positive")
        self.nvlink_limits()  # raises on bad thresholds

    def nvlink_limits(self) -> nvlink_health.NvlinkThresholds:
        """The NVLink thresholds these settings describe (ValueError when malformed)."""
        return nvlink_health.NvlinkThresholds(
            expected_links=self.nvlink_links,
            warn_growth=self.nvlink_warn_growth,
            fail_growth=self.nvlink_fail_growth,
        )

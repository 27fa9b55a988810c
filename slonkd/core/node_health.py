"""Host and fabric health parsers: disk, InfiniBand ports, NIC carrier, PCIe links, peers.

Each function takes what a runner read (sysfs file contents, statvfs numbers, probe
outcomes) and returns a :class:`~slonkd.core.health.CheckResult`. Counters that only grow
(IB errors, carrier changes) are judged by their increase since the previous run, so the
caller passes both readings. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from slonkd.core.health import CheckResult, Remediation, fail, ok, unknown, warn, worst


@dataclass(frozen=True, slots=True, kw_only=True)
class DiskThresholds:
    """Free space limits for a path (fraction of the filesystem and absolute bytes)."""

    fail_free_fraction: float = 0.02
    warn_free_fraction: float = 0.10
    fail_free_bytes: int = 1 << 30


def judge_disk(
    path: str, *, free_bytes: int, total_bytes: int, limits: DiskThresholds
) -> CheckResult:
    """Fail when ``path``'s filesystem is (nearly) full, warn when it is getting there."""
    name = "disk"
    if total_bytes <= 0:
        return unknown(name, "disk-unreadable", f"{path}: total size {total_bytes}")
    fraction = free_bytes / total_bytes
    gib = 2**30
    evidence = (
        f"{path}: {free_bytes / gib:.1f} of {total_bytes / gib:.1f} GiB free ({fraction:.1%})"
    )
    if fraction < limits.fail_free_fraction or free_bytes < limits.fail_free_bytes:
        return fail(name, "disk-full", Remediation.MANUAL, evidence)
    if fraction < limits.warn_free_fraction:
        return warn(name, "disk-low", evidence)
    return ok(name, evidence)


# --- InfiniBand -----------------------------------------------------------------------------

_STATE_RE: Final = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")
_RATE_RE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
IB_ERROR_COUNTERS: Final = ("symbol_error", "link_downed", "port_rcv_errors")


@dataclass(frozen=True, slots=True, kw_only=True)
class IbPort:
    """What sysfs says about one port: ``state``, ``phys_state``, ``rate`` and counters."""

    name: str
    """``<device>/<port>``, e.g. ``mlx5_0/1``."""
    state: str
    phys_state: str
    rate: str
    counters: Mapping[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class IbThresholds:
    """Expected rate and the largest tolerated counter increase between two runs."""

    min_rate_gbps: float = 0.0
    max_increase: Mapping[str, int] | None = None

    def limit(self, counter: str) -> int:
        """The tolerated increase of ``counter`` (default: symbol errors 10, others 0)."""
        defaults = {"symbol_error": 10, "link_downed": 0, "port_rcv_errors": 10}
        return (self.max_increase or {}).get(counter, defaults.get(counter, 0))


def _state_word(raw: str) -> str:
    match = _STATE_RE.match(raw)
    return match.group(2).upper() if match else raw.strip().upper()


def judge_ib(
    ports: Sequence[IbPort], previous: Mapping[str, IbPort], limits: IbThresholds, *, expected: int
) -> CheckResult:
    """Fail on a port that is down, slow, or whose error counters jumped since last run."""
    name = "infiniband"
    if expected and not ports:
        return fail(name, "ib-port-missing", Remediation.REBOOT, f"no IB port, {expected} expected")
    found = []
    if expected and len(ports) < expected:
        found.append(
            fail(
                name,
                "ib-port-missing",
                Remediation.REBOOT,
                f"{len(ports)} IB ports, {expected} expected",
            )
        )
    for port in ports:
        state, phys = _state_word(port.state), _state_word(port.phys_state)
        if state != "ACTIVE" or phys != "LINKUP":
            found.append(
                fail(
                    name,
                    "ib-port-down",
                    Remediation.MANUAL,
                    f"{port.name}: state {state}, physical {phys}",
                )
            )
            continue
        rate = _RATE_RE.match(port.rate)
        if rate is None:
            found.append(unknown(name, "ib-rate-unreadable", f"{port.name}: rate {port.rate!r}"))
        elif float(rate.group(1)) < limits.min_rate_gbps:
            found.append(
                fail(
                    name,
                    "ib-rate-degraded",
                    Remediation.MANUAL,
                    f"{port.name}: {port.rate.strip()}, {limits.min_rate_gbps} Gb/s expected",
                )
            )
        before = previous.get(port.name)
        for counter in IB_ERROR_COUNTERS:
            if before is None or counter not in port.counters or counter not in before.counters:
                continue
            grew = port.counters[counter] - before.counters[counter]
            if grew > limits.limit(counter):
                cause = "ib-link-downed" if counter == "link_downed" else "ib-errors"
                found.append(
                    fail(
                        name,
                        cause,
                        Remediation.MANUAL,
                        f"{port.name}: {counter} +{grew} since the last run",
                    )
                )
    return worst(name, found) if found else ok(name, f"{len(ports)} IB ports active")


# --- NIC carrier --------------------------------------------------------------------------


def judge_carrier(
    current: Mapping[str, tuple[str, int]],
    previous: Mapping[str, tuple[str, int]],
    *,
    interfaces: Sequence[str],
    max_flaps: int = 2,
) -> CheckResult:
    """``{iface: (operstate, carrier_changes)}`` now and at the last run -> down or flapping."""
    name = "nic"
    found = []
    for iface in interfaces:
        if iface not in current:
            found.append(fail(name, "nic-missing", Remediation.REBOOT, f"{iface}: not present"))
            continue
        operstate, changes = current[iface]
        if operstate.strip().lower() not in {"up", "unknown"}:
            found.append(
                fail(
                    name, "nic-down", Remediation.MANUAL, f"{iface}: operstate {operstate.strip()}"
                )
            )
        if iface in previous:
            flaps = changes - previous[iface][1]
            if flaps > max_flaps:
                found.append(
                    fail(
                        name,
                        "nic-carrier-flap",
                        Remediation.MANUAL,
                        f"{iface}: carrier changed {flaps} times since the last run",
                    )
                )
    return worst(name, found) if found else ok(name, f"{len(interfaces)} interfaces up")


# --- PCIe -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PcieLink:
    """A device's link as sysfs reports it (width as a number, speed as text)."""

    address: str
    current_width: int
    max_width: int
    current_speed: str
    max_speed: str


def _gts(speed: str) -> float | None:
    match = re.match(r"\s*(\d+(?:\.\d+)?)\s*GT/s", speed)
    return float(match.group(1)) if match else None


def judge_pcie(links: Sequence[PcieLink]) -> CheckResult:
    """Fail on a link narrower than the device's maximum; warn on a slower one.

    GPUs lower their link speed when idle to save power, so speed alone never fails.
    """
    name = "pcie"
    found = []
    for link in links:
        if 0 < link.current_width < link.max_width:
            found.append(
                fail(
                    name,
                    "pcie-width-degraded",
                    Remediation.MANUAL,
                    f"{link.address}: x{link.current_width} of x{link.max_width}",
                )
            )
        cur, top = _gts(link.current_speed), _gts(link.max_speed)
        if cur is not None and top is not None and cur < top:
            found.append(
                warn(
                    name,
                    "pcie-speed-below-max",
                    f"{link.address}: {link.current_speed.strip()} of {link.max_speed.strip()}",
                )
            )
    return worst(name, found) if found else ok(name, f"{len(links)} links at full width")


# --- peers, mounts, slurmd ------------------------------------------------------------------


def judge_peers(reachable: Mapping[str, bool]) -> CheckResult:
    """Fail when most configured peers are unreachable, warn when some are."""
    name = "peers"
    if not reachable:
        return ok(name, "no peers configured")
    down = sorted(p for p, up in reachable.items() if not up)
    if not down:
        return ok(name, f"{len(reachable)} peers reachable")
    evidence = f"unreachable: {', '.join(down[:10])} ({len(down)} of {len(reachable)})"
    if len(down) * 2 > len(reachable):
        return fail(name, "net-peers-unreachable", Remediation.MANUAL, evidence)
    return warn(name, "net-peer-unreachable", evidence)


def judge_mount(
    path: str, *, responded: bool, is_mount: bool | None, error: str = ""
) -> CheckResult:
    """A mount that did not answer in time is unknown (hysteresis makes repeats a fail)."""
    name = "mount"
    if not responded:
        return unknown(name, "nfs-hung", f"{path}: no answer before the deadline", timed_out=True)
    if error:
        return fail(name, "mount-error", Remediation.MANUAL, f"{path}: {error}")
    if is_mount is False:
        return fail(name, "mount-missing", Remediation.MANUAL, f"{path}: not a mount point")
    return ok(name, f"{path} responsive")


def judge_slurmd(port: int, *, listening: bool, error: str = "") -> CheckResult:
    """slurmd must accept connections on its port."""
    name = "slurmd"
    if listening:
        return ok(name, f"slurmd listening on {port}")
    return fail(name, "slurmd-dead", Remediation.RESTART_POD, f"port {port}: {error or 'refused'}")

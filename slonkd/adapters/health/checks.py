"""The health checks: each one a runner (probe with a deadline) plus a pure parser from the core.

A :class:`Check` keeps what it needs between runs (previous counter readings, the kernel
log position) and returns one :class:`~slonkd.core.health.CheckResult` per run. A tool that
is missing or late gives ``unknown``, never ``ok``. :func:`build_checks` makes the set that
:class:`~slonkd.adapters.health.settings.HealthSettings` asks for
(:mod:`slonkd.adapters.health.settings`); ``slonkd check`` runs them once, the agent on
schedules. The probes are :mod:`slonkd.adapters.health.probes`'s.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slonkd.adapters.health import probes
from slonkd.adapters.health.settings import HealthSettings
from slonkd.core import dcgm_health, gpu_health, node_health, nvlink_health
from slonkd.core.health import CheckResult, unknown

Runner = Callable[[], Coroutine[Any, Any, CheckResult]]


@dataclass(slots=True)
class Check:
    """One named check with its period and runner."""

    name: str
    period_s: float
    run: Runner
    retry_period_s: float | None = None
    """After a failing run, the next comes this soon (a heavy check confirms a failure in
    minutes, not in N of its hourly periods); None: always ``period_s``."""
    on_demand: Runner | None = None
    """What a run asked for now (a recheck) runs instead of ``run``: a longer diagnostic;
    None: ``run``."""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def read_ib_ports(root: Path) -> list[node_health.IbPort]:
    """Every port under ``<root>/class/infiniband`` with state, rate and error counters."""
    ports = []
    base = root / "class" / "infiniband"
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            counters = {
                c: _int(_read(port / "counters" / c))
                for c in node_health.IB_ERROR_COUNTERS
                if (port / "counters" / c).exists()
            }
            ports.append(
                node_health.IbPort(
                    name=f"{dev.name}/{port.name}",
                    state=_read(port / "state"),
                    phys_state=_read(port / "phys_state"),
                    rate=_read(port / "rate"),
                    counters=counters,
                )
            )
    return ports


def read_carrier(root: Path, interfaces: Sequence[str]) -> dict[str, tuple[str, int]]:
    """``{iface: (operstate, carrier_changes)}`` for the interfaces that exist."""
    out = {}
    for iface in interfaces:
        d = root / "class" / "net" / iface
        if d.is_dir():
            out[iface] = (_read(d / "operstate"), _int(_read(d / "carrier_changes")))
    return out


def read_pcie(root: Path, vendors: Sequence[str]) -> list[node_health.PcieLink]:
    """Links of PCI devices from the given vendors that report link width and speed."""
    links = []
    base = root / "bus" / "pci" / "devices"
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        if _read(dev / "vendor") not in vendors or not (dev / "max_link_width").exists():
            continue
        links.append(
            node_health.PcieLink(
                address=dev.name,
                current_width=_int(_read(dev / "current_link_width")),
                max_width=_int(_read(dev / "max_link_width")),
                current_speed=_read(dev / "current_link_speed"),
                max_speed=_read(dev / "max_link_speed"),
            )
        )
    return links


def build_checks(s: HealthSettings, guard: probes.ProbeGuard) -> list[Check]:
    """The checks ``s`` asks for (GPU checks only when GPUs are expected)."""
    checks: list[Check] = []
    sysfs = Path(s.sysfs_root)

    if s.expected_gpus > 0:
        limits = s.gpu or gpu_health.GpuThresholds(expected_gpus=s.expected_gpus)
        query = ",".join(gpu_health.NVIDIA_SMI_FIELDS)

        async def nvidia_smi() -> CheckResult:
            out = await probes.run_command(
                "nvidia-smi",
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,nounits"],
                timeout_s=s.timeout_s,
                guard=guard,
            )
            if out.missing:
                return unknown("nvidia-smi", "tool-missing", "nvidia-smi not found")
            if out.timed_out:
                return unknown(
                    "nvidia-smi", "nvidia-smi-hung", "no answer before the deadline", timed_out=True
                )
            return gpu_health.parse_nvidia_smi(out.stdout, out.stderr, out.rc or 0, limits)

        checks.append(Check(name="nvidia-smi", period_s=s.fast_period_s, run=nvidia_smi))
        reader = probes.KmsgReader(s.kmsg_path)
        tracker = gpu_health.XidTracker(
            policy=s.xid,
            started_us=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000,
            lookback_s=s.xid_lookback_s,
        )

        async def xid() -> CheckResult:
            try:
                records = await asyncio.to_thread(reader.read_new)
            except OSError as exc:
                return unknown("xid", "kmsg-unreadable", f"{s.kmsg_path}: {exc.strerror}")
            return tracker.observe(gpu_health.find_xids(records))

        checks.append(Check(name="xid", period_s=s.fast_period_s, run=xid))
        checks += _gpu_extra_checks(s, guard)

    for path in s.disk_paths:

        async def disk(path: str = path) -> CheckResult:
            try:
                st = await asyncio.to_thread(os.statvfs, path)
            except OSError as exc:
                return unknown("disk", "disk-unreadable", f"{path}: {exc.strerror}")
            return node_health.judge_disk(
                path,
                free_bytes=st.f_bavail * st.f_frsize,
                total_bytes=st.f_blocks * st.f_frsize,
                limits=s.disk,
            )

        checks.append(Check(name=f"disk:{path}", period_s=s.fast_period_s, run=disk))

    for mount in s.mounts:

        async def mount_check(mount: str = mount) -> CheckResult:
            got = await probes.probe_path(mount, timeout_s=s.mount_timeout_s, guard=guard)
            return node_health.judge_mount(
                mount, responded=got.responded, is_mount=got.is_mount, error=got.error
            )

        checks.append(Check(name=f"mount:{mount}", period_s=s.fast_period_s, run=mount_check))

    if s.slurmd_port is not None:
        port = s.slurmd_port

        async def slurmd() -> CheckResult:
            up, why = await probes.tcp_listening("127.0.0.1", port, timeout_s=s.timeout_s)
            return node_health.judge_slurmd(port, listening=up, error=why)

        checks.append(Check(name="slurmd", period_s=s.fast_period_s, run=slurmd))

    if s.peers:

        async def peers() -> CheckResult:
            answers = await asyncio.gather(
                *(probes.ping(p, timeout_s=2, guard=guard) for p in s.peers)
            )
            return node_health.judge_peers(dict(zip(s.peers, answers, strict=True)))

        checks.append(Check(name="peers", period_s=s.fast_period_s, run=peers))

    if s.nic_interfaces:
        last_nic: dict[str, tuple[str, int]] = {}

        async def nic() -> CheckResult:
            now = await asyncio.to_thread(read_carrier, sysfs, s.nic_interfaces)
            result = node_health.judge_carrier(now, last_nic, interfaces=s.nic_interfaces)
            last_nic.clear()
            last_nic.update(now)
            return result

        checks.append(Check(name="nic", period_s=s.fast_period_s, run=nic))

    if s.ib_expected_ports:
        last_ib: dict[str, node_health.IbPort] = {}

        async def infiniband() -> CheckResult:
            ports = await asyncio.to_thread(read_ib_ports, sysfs)
            result = node_health.judge_ib(ports, last_ib, s.ib, expected=s.ib_expected_ports)
            last_ib.clear()
            last_ib.update({p.name: p for p in ports})
            return result

        checks.append(Check(name="infiniband", period_s=s.fast_period_s, run=infiniband))

    if s.pcie_vendors and (s.expected_gpus or s.ib_expected_ports):

        async def pcie() -> CheckResult:
            return node_health.judge_pcie(await asyncio.to_thread(read_pcie, sysfs, s.pcie_vendors))

        checks.append(Check(name="pcie", period_s=s.slow_period_s, run=pcie))
    return checks


async def _smi(
    key: str, argv: list[str], timeout_s: float, guard: probes.ProbeGuard, check: str
) -> probes.Outcome | CheckResult:
    """Run a GPU tool; the ``unknown`` result when it is missing or late."""
    out = await probes.run_command(key, argv, timeout_s=timeout_s, guard=guard)
    if out.missing:
        return unknown(check, "tool-missing", f"{argv[0]} not installed")
    if out.timed_out:
        return unknown(
            check,
            f"{argv[0]}-hung",
            "still stuck from an earlier run" if out.stuck else "no answer before the deadline",
            timed_out=True,
        )
    return out


def _gpu_extra_checks(s: HealthSettings, guard: probes.ProbeGuard) -> list[Check]:
    """dcgmi diag (heavy), NVLink state and errors, fabric state (slow)."""
    checks: list[Check] = []
    if s.dcgm:

        def dcgm_diag(level: int) -> Runner:
            async def run() -> CheckResult:
                host = ["--host", s.dcgm_host] if s.dcgm_host else []
                argv = ["dcgmi", "diag", *host, "-r", str(level), "-j"]
                out = await _smi("dcgmi", argv, s.dcgm_timeout_s, guard, "dcgm-diag")
                if isinstance(out, CheckResult):
                    return out
                return dcgm_health.judge_dcgm_diag(out.stdout, out.stderr, out.rc or 0)

            return run

        deeper = s.dcgm_recheck_level not in (0, s.dcgm_level)
        checks.append(
            Check(
                name="dcgm-diag",
                period_s=s.heavy_period_s,
                run=dcgm_diag(s.dcgm_level),
                retry_period_s=min(s.slow_period_s, s.heavy_period_s),
                on_demand=dcgm_diag(s.dcgm_recheck_level) if deeper else None,
            )
        )

    if s.nvlink_links > 0:
        limits = s.nvlink_limits()
        last: dict[tuple[int, int], dict[str, int]] = {}
        seen = [False]

        async def nvlink() -> CheckResult:
            status = await _smi(
                "nvlink-status", ["nvidia-smi", "nvlink", "--status"], s.timeout_s, guard, "nvlink"
            )
            if isinstance(status, CheckResult):
                return status
            errors = await _smi(
                "nvlink-errors", ["nvidia-smi", "nvlink", "-e"], s.timeout_s, guard, "nvlink"
            )
            if isinstance(errors, CheckResult):
                return errors
            result, counters = nvlink_health.judge_nvlink_run(
                status.stdout + status.stderr,
                errors.stdout + errors.stderr,
                last if seen[0] else None,
                limits,
                expected_gpus=s.expected_gpus,
            )
            if counters is not None:
                last.clear()
                last.update(counters)
                seen[0] = True
            return result

        checks.append(Check(name="nvlink", period_s=s.fast_period_s, run=nvlink))

    if s.fabric:

        async def fabric() -> CheckResult:
            out = await _smi("nvidia-smi-q", ["nvidia-smi", "-q"], s.timeout_s, guard, "fabric")
            if isinstance(out, CheckResult):
                return out
            if out.rc not in (0, None) and "GPU " not in out.stdout:
                lost = nvlink_health.smi_lost(out.stdout + out.stderr)
                if lost is None:
                    return unknown("fabric", "nvidia-smi-error", f"rc {out.rc}: {out.stderr[:200]}")
            return nvlink_health.judge_fabric(
                out.stdout + "\n" + out.stderr,
                required=s.fabric_required,
                expected_gpus=s.expected_gpus,
            )

        checks.append(Check(name="fabric", period_s=s.slow_period_s, run=fabric))
    return checks

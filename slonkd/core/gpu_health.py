"""GPU health parsers: ``nvidia-smi --query-gpu`` CSV, its failure texts, and Xid kernel messages.

Pure functions from a tool's output (and thresholds) to :class:`~slonkd.core.health.CheckResult`.
The query is asked with a header (``--format=csv,nounits``) and parsed by column name, so
the column order and the renames between driver versions (``clocks_throttle_reasons`` ->
``clocks_event_reasons``) do not matter. Values such as ``[N/A]`` or ``[Not Supported]``
are "no information", never zero; ``[Unknown Error]`` and ``[GPU is lost]`` mean the GPU
fell off the bus.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from slonkd.core.health import CheckResult, Remediation, fail, ok, unknown, warn, worst

NVIDIA_SMI_FIELDS: Final = (
    "index",
    "pci.bus_id",
    "uuid",
    "name",
    "temperature.gpu",
    "power.draw",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
)
"""What the runner asks for; a driver that lacks a field answers ``[N/A]`` or an error."""

_NO_INFO: Final = {"[N/A]", "[Not Supported]", "N/A", "[Unknown]", ""}
_LOST: Final = {"[Unknown Error]", "[GPU is lost]", "[GPU requires reset]"}


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuThresholds:
    """Limits for the nvidia-smi check (settings)."""

    expected_gpus: int = 8
    max_uncorrected_volatile: int = 0
    max_uncorrected_aggregate: int = 10
    max_temperature_c: float = 87.0


def _header_name(raw: str) -> str:
    return re.sub(r"\s*\[.*\]\s*$", "", raw.strip())


def _int(value: str) -> int | None:
    value = value.strip()
    if value in _NO_INFO:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def parse_nvidia_smi(stdout: str, stderr: str, rc: int, limits: GpuThresholds) -> CheckResult:
    """Judge one ``nvidia-smi --query-gpu=... --format=csv,nounits`` run."""
    name = "nvidia-smi"
    text = f"{stdout}\n{stderr}"
    if "couldn't communicate with the NVIDIA driver" in text:
        return fail(name, "gpu-driver", Remediation.REBOOT, _first_line(text, "NVIDIA driver"))
    if "Unable to determine the device handle" in text or "GPU is lost" in text:
        return fail(
            name,
            "gpu-fell-off-bus",
            Remediation.REBOOT,
            _first_line(text, "device handle") or _first_line(text, "GPU is lost"),
        )
    if "No devices were found" in text:
        if limits.expected_gpus > 0:
            return fail(
                name,
                "gpu-count",
                Remediation.REBOOT,
                f"no GPU found, {limits.expected_gpus} expected",
            )
        return ok(name, "no GPU expected, none found")
    if rc != 0:
        return unknown(name, "nvidia-smi-error", f"rc {rc}: {stderr.strip()[:300]}")
    rows = list(csv.reader(io.StringIO(stdout.strip())))
    if not rows:
        return unknown(name, "nvidia-smi-empty", "no output")
    header = [_header_name(h) for h in rows[0]]
    if "index" not in header:
        return unknown(name, "nvidia-smi-unparsable", f"header: {rows[0][:5]}")
    gpus: list[dict[str, str]] = []
    for row in rows[1:]:
        if len(row) != len(header):
            return unknown(name, "nvidia-smi-unparsable", f"row of {len(row)} fields")
        gpus.append({h: v.strip() for h, v in zip(header, row, strict=True)})
    findings = [_judge_gpu(g, limits) for g in gpus]
    if len(gpus) != limits.expected_gpus:
        findings.append(
            fail(
                name,
                "gpu-count",
                Remediation.REBOOT,
                f"{len(gpus)} GPUs visible, {limits.expected_gpus} expected",
            )
        )
    result = worst(name, findings)
    if result.verdict.value == "ok":
        return ok(name, f"{len(gpus)} GPUs healthy")
    return result


_MEMORY_FLAGS: Final = (
    ("remapped_rows.failure", "row-remap-failed", Remediation.MANUAL, "row remapping failed"),
    ("remapped_rows.pending", "row-remap-pending", Remediation.REBOOT,
     "row remap pending (needs a GPU reset)"),
    ("retired_pages.pending", "retired-pages-pending", Remediation.REBOOT,
     "page retirement pending"),
)  # fmt: skip
"""nvidia-smi's yes/no memory fields that fail a GPU: field, cause, remediation, evidence."""


def _judge_gpu(gpu: Mapping[str, str], limits: GpuThresholds) -> CheckResult:
    name = "nvidia-smi"
    where = f"GPU {gpu.get('index', '?')} ({gpu.get('pci.bus_id', '?')})"
    if any(v in _LOST for v in gpu.values()):
        return fail(name, "gpu-fell-off-bus", Remediation.REBOOT, f"{where}: GPU lost")
    found: list[CheckResult] = []
    for key, limit, cause, remediation, span in (
        ("ecc.errors.uncorrected.volatile.total", limits.max_uncorrected_volatile,
         "ecc-uncorrectable", Remediation.REBOOT, "since boot"),
        ("ecc.errors.uncorrected.aggregate.total", limits.max_uncorrected_aggregate,
         "ecc-uncorrectable-lifetime", Remediation.MANUAL, "in its lifetime"),
    ):  # fmt: skip
        errors = _int(gpu.get(key, ""))
        if errors is not None and errors > limit:
            evidence = f"{where}: {errors} uncorrected ECC errors {span}"
            found.append(fail(name, cause, remediation, evidence))
    for key, cause, remediation, what in _MEMORY_FLAGS:
        if gpu.get(key, "").lower() == "yes":
            found.append(fail(name, cause, remediation, f"{where}: {what}"))
    temp = _int(gpu.get("temperature.gpu", ""))
    if temp is not None and temp > limits.max_temperature_c:
        found.append(warn(name, "gpu-hot", f"{where}: {temp} C"))
    for key, cause in (
        ("clocks_event_reasons.hw_thermal_slowdown", "gpu-thermal-throttle"),
        ("clocks_event_reasons.hw_power_brake_slowdown", "gpu-power-brake"),
    ):
        if gpu.get(key, "").lower() == "active":
            found.append(warn(name, cause, f"{where}: {key.split('.')[-1]} active"))
    return worst(name, found)


def _first_line(text: str, needle: str) -> str:
    return next((line.strip() for line in text.splitlines() if needle in line), "")[:300]


# --- Xid ---------------------------------------------------------------------------------

_XID_RE: Final = re.compile(
    r"NVRM: Xid \((?P<dev>(?:PCI:)?[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\)"
    r": (?P<xid>\d{1,4})(?:,(?P<rest>.*))?"
)
"""The driver's record, matched from the first character of the message to its end:
``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., <text>`` (older drivers: no ``PCI:``).
Anchored (``fullmatch``), so Xid text quoted inside another message (the kernel's
``process 'x' launched '<path>' with NULL argv`` warning quotes a path a user chose) is not
an Xid."""


@dataclass(frozen=True, slots=True, kw_only=True)
class XidPolicy:
    """Which Xids take a node out, and how it is repaired (settings; NVIDIA's Xid catalogue)."""

    fatal: Mapping[int, Remediation] = field(
        default_factory=lambda: {
            48: Remediation.REBOOT,  # double-bit ECC error
            61: Remediation.REBOOT,  # internal micro-controller breakpoint
            62: Remediation.REBOOT,  # internal micro-controller halt
            63: Remediation.REBOOT,  # ECC page retirement / row remap pending
            64: Remediation.MANUAL,  # ECC page retirement / row remap failure
            74: Remediation.REBOOT,  # NVLink error
            79: Remediation.REBOOT,  # GPU has fallen off the bus
            92: Remediation.REBOOT,  # high single-bit ECC error rate
            94: Remediation.RESTART_POD,  # contained ECC error: the application must restart
            95: Remediation.REBOOT,  # uncontained ECC error
            119: Remediation.REBOOT,  # GSP RPC timeout
            120: Remediation.REBOOT,  # GSP error
        }
    )
    informational: frozenset[int] = frozenset({13, 31, 43, 45, 68})
    """Usually the application's fault (exceptions, MMU faults, preemptive cleanup)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class XidEvent:
    """One Xid message: device, number and the rest of the line."""

    device: str
    xid: int
    text: str
    at_us: int | None = None
    """Kernel log time of the record, microseconds since boot (None: the line had none)."""


_DMESG_PREFIX_RE: Final = re.compile(r"(?:<(?P<pri>\d{1,10})>)?(?:\[\s*\d+\.\d+\] ?)?")
"""``dmesg`` text: an optional ``<pri>`` (``dmesg -r``), then an optional ``[seconds]``."""
_KERNEL_FACILITY: Final = 0
"""syslog facility of the kernel's own messages; text that user space writes to
``/dev/kmsg`` always gets another one (the kernel forces ``LOG_USER`` when it asks for 0)."""


def _from_kernel(pri: str) -> bool:
    return pri.isdigit() and len(pri) <= 10 and int(pri) >> 3 == _KERNEL_FACILITY


def kernel_message(line: str) -> str | None:
    """The message of a kernel log line the kernel itself logged (None: user space wrote it).

    Lines are ``/dev/kmsg`` records (``pri,seq,ts,flags;message``) or dmesg text. A record
    or a ``dmesg -r`` line carries its syslog priority; a facility other than the kernel's
    means user space wrote it. Plain ``dmesg`` text carries none and counts as the kernel's.
    """
    head, sep, message = line.partition(";")
    fields = head.split(",")
    if sep and len(fields) >= 3 and fields[0].isdigit():
        return message if _from_kernel(fields[0]) else None
    match = _DMESG_PREFIX_RE.match(line)
    if match is None:
        return line
    if match["pri"] is not None and not _from_kernel(match["pri"]):
        return None
    return line[match.end() :]


_DMESG_TIME_RE: Final = re.compile(r"^(?:<\d{1,10}>)?\[\s*(\d{1,10})\.(\d{1,6})\]")


def record_time_us(line: str) -> int | None:
    """The time of a ``/dev/kmsg`` record or ``[ s.us]`` dmesg line, in microseconds since boot."""
    head, sep, _message = line.partition(";")
    fields = head.split(",")
    if sep and len(fields) >= 3 and fields[0].isdigit():
        return int(fields[2]) if fields[2].isdigit() and len(fields[2]) <= 18 else None
    match = _DMESG_TIME_RE.match(line)
    if match:
        return int(match[1]) * 1_000_000 + int(match[2].ljust(6, "0"))
    return None


def find_xids(lines: Iterable[str]) -> list[XidEvent]:
    """Every Xid record of the NVIDIA driver among kernel log lines (kmsg records or dmesg text).

    Only a whole kernel message in the driver's record format counts: Xid text elsewhere in
    a line, or in a record user space wrote to ``/dev/kmsg``, is text a user may control.
    """
    events = []
    for line in lines:
        message = kernel_message(line)
        match = _XID_RE.fullmatch(message) if message is not None else None
        if match:
            events.append(
                XidEvent(
                    device=match["dev"],
                    xid=int(match["xid"]),
                    text=(match["rest"] or "").strip(" ,")[:200],
                    at_us=record_time_us(line),
                )
            )
    return events


def judge_xids(events: Iterable[XidEvent], policy: XidPolicy) -> CheckResult:
    """Fail on a fatal Xid (the worst remediation wins), warn on others."""
    name = "xid"
    found = []
    for ev in events:
        where = f"Xid {ev.xid} on {ev.device}: {ev.text}"
        if ev.xid in policy.fatal:
            found.append(fail(name, f"gpu-xid-{ev.xid}", policy.fatal[ev.xid], where))
        elif ev.xid not in policy.informational:
            found.append(warn(name, f"gpu-xid-{ev.xid}", where))
    if not found:
        return ok(name)
    ladder = [Remediation.NONE, Remediation.RESTART_POD, Remediation.REBOOT, Remediation.MANUAL]
    fails = [r for r in found if r.verdict.value == "fail"]
    if fails:
        top = max(fails, key=lambda r: ladder.index(r.remediation))
        return fail(name, top.cause, top.remediation, "; ".join(r.evidence for r in fails))
    return worst(name, found)


# --- Xids across runs: latching and the first-run policy -----------------------------------

_OUTLIVES_POD: Final = frozenset({Remediation.REBOOT, Remediation.MANUAL})
MAX_LATCHED: Final = 64


@dataclass(slots=True, kw_only=True)
class XidTracker:
    """Judges each new batch of kernel log records, remembering fatal Xids between runs.

    The kernel log is read incrementally, so a fatal Xid is seen by exactly one run; it is
    *latched*: every later run of this agent still fails with it, so the hysteresis (N of
    M runs) turns it into a fail verdict, and only the remediation clears it.

    First-run policy. The first read returns the whole ring buffer, i.e. everything since
    boot, including Xids logged before this agent (pod) started. Of those, only Xids whose
    remediation outlives a pod restart (reboot, manual: the hardware stays broken until the
    node reboots, which also empties the ring buffer) are latched as failures. Restart-pod
    class Xids (e.g. 94, a contained ECC error) from before the start were already remedied
    by the very pod restart that started this agent: they are reported once as history
    (``warn``) and never fail, so a restarted pod does not fail again on its own past.
    "Before the start" is ``record time < started_us - lookback_s``; records without a
    time count as current.
    """

    policy: XidPolicy
    started_us: int
    """When this agent started, on the kernel log clock (CLOCK_MONOTONIC, microseconds)."""
    lookback_s: float = 0.0
    """Records this much older than the start still count as current (a slow pod start)."""
    latched: dict[tuple[str, int], XidEvent] = field(default_factory=dict)

    def _history(self, ev: XidEvent) -> bool:
        cutoff = self.started_us - int(self.lookback_s * 1_000_000)
        return ev.at_us is not None and ev.at_us < cutoff

    def observe(self, events: Iterable[XidEvent]) -> CheckResult:
        """The verdict after reading ``events`` (the records new since the last run)."""
        name = "xid"
        history: list[CheckResult] = []
        for ev in events:
            remediation = self.policy.fatal.get(ev.xid)
            if self._history(ev) and remediation not in _OUTLIVES_POD:
                if remediation is not None or ev.xid not in self.policy.informational:
                    history.append(
                        warn(
                            name,
                            f"gpu-xid-{ev.xid}",
                            f"before this agent started (history): Xid {ev.xid} on {ev.device}",
                        )
                    )
                continue
            if remediation is not None and len(self.latched) < MAX_LATCHED:
                self.latched.setdefault((ev.device, ev.xid), ev)
            elif remediation is None and ev.xid not in self.policy.informational:
                history.append(warn(name, f"gpu-xid-{ev.xid}", f"Xid {ev.xid} on {ev.device}"))
        if self.latched:
            return judge_xids(list(self.latched.values()), self.policy)
        return worst(name, history)

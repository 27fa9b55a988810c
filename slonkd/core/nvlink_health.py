"""NVLink and fabric parsers: ``nvidia-smi nvlink --status``/``-e`` and ``nvidia-smi -q``.

Why these outputs: ``nvidia-smi -q`` does not list NVLink links at all, and its XML/CSV
forms have no per-link state either, so link state and error counters come from the
``nvlink`` subcommand, whose text is stable across drivers 450-570::

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
         Link 0: 26.562 GB/s            (--status; a down link reads "<inactive>")
         Link 0: Replay Errors: 0       (-e; also Recovery Errors, CRC Errors, ...)

The fabric (NVSwitch systems: HGX H100/H200, GB200) is only visible to a container through
NVML, i.e. ``nvidia-smi -q``'s ``Fabric`` section (``State: Completed`` + ``Status:
Success`` once the fabric manager has trained the GPU; ``In Progress``/``Not Started`` or
another status otherwise). GPUs without a fabric print the section with ``N/A`` values (or,
on old drivers, no section): that is "not applicable", reported as ok with evidence "no
fabric", unless the settings say this node must have one. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from slonkd.core.health import CheckResult, Remediation, fail, ok, unknown, warn, worst

NVLINK: Final = "nvlink"
FABRIC: Final = "fabric"

_GPU_RE: Final = re.compile(r"^GPU (\d{1,3}): (.{0,200})$")
_LINK_RE: Final = re.compile(r"^Link (\d{1,3}): (.{0,200})$")
_COUNTER_RE: Final = re.compile(r"^([A-Za-z][A-Za-z /_-]{0,60}?)\s*:\s*(\S{1,40})$")
_NO_INFO: Final = {"N/A", "[N/A]", "Not Supported", "[Not Supported]"}
_LOST: Final = ("Unable to determine the device handle", "GPU is lost", "Unknown Error")


class NvlinkParseError(ValueError):
    """The output is not an nvidia-smi nvlink listing this parser understands."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NvlinkThresholds:
    """Per-GPU link count and error-counter growth limits between two runs (settings)."""

    expected_links: int = 18
    """Active links every GPU must have (H100/H200 SXM: 18, A100 SXM: 12)."""
    warn_growth: Mapping[str, int] | None = None
    fail_growth: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        for table in (self.warn_growth, self.fail_growth):
            if table is None:
                continue
            if not isinstance(table, Mapping):
                raise ValueError("NVLink growth thresholds must map counter names to numbers")
            for name, limit in table.items():
                if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9-]{1,40}", name):
                    raise ValueError(f"NVLink counter name {str(name)[:40]!r} is not valid")
                if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                    raise ValueError(f"NVLink threshold for {name} must be a whole number >= 1")

    def warn_at(self, counter: str) -> int | None:
        """Growth of ``counter`` that warns (None: never)."""
        table = self.warn_growth if self.warn_growth is not None else _WARN_GROWTH
        return table.get(counter)

    def fail_at(self, counter: str) -> int | None:
        """Growth of ``counter`` that fails (None: never)."""
        table = self.fail_growth if self.fail_growth is not None else _FAIL_GROWTH
        return table.get(counter)


_WARN_GROWTH: Final = {"replay": 100, "recovery": 1, "crc": 100}
_FAIL_GROWTH: Final = {"replay": 10_000, "recovery": 10, "crc": 10_000}
"""Defaults: recoveries (a link retrained) matter most; replays and CRC errors occur at low
rates on healthy links and count only in bulk."""


def smi_lost(text: str) -> CheckResult | None:
    """The failure an nvidia-smi text reports instead of data, if any (driver gone, GPU lost)."""
    if "couldn't communicate with the NVIDIA driver" in text:
        return fail(NVLINK, "gpu-driver", Remediation.REBOOT, _line(text, "NVIDIA driver"))
    for needle in _LOST:
        if needle in text:
            return fail(NVLINK, "gpu-fell-off-bus", Remediation.REBOOT, _line(text, needle))
    return None


def _line(text: str, needle: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if needle in ln), "")[:300]


def _blocks(text: str) -> dict[int, list[str]]:
    """``{gpu index: [lines under its header]}``; NvlinkParseError on stray lines."""
    gpus: dict[int, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        header = _GPU_RE.match(line)
        if header:
            current = gpus.setdefault(int(header[1]), [])
            continue
        if current is None:
            raise NvlinkParseError(f"line before any GPU header: {line[:60]!r}")
        current.append(line)
    return gpus


def parse_nvlink_status(text: str) -> dict[int, dict[int, str]]:
    """``{gpu: {link: "26.562 GB/s" | "<inactive>" | ...}}`` from ``nvidia-smi nvlink -s``."""
    out: dict[int, dict[int, str]] = {}
    for gpu, lines in _blocks(text).items():
        links: dict[int, str] = {}
        for line in lines:
            match = _LINK_RE.match(line)
            if not match:
                raise NvlinkParseError(f"GPU {gpu}: not a link line: {line[:60]!r}")
            links[int(match[1])] = match[2].strip()
        out[gpu] = links
    if not out:
        raise NvlinkParseError("no GPU in the output")
    return out


def link_is_up(state: str) -> bool:
    """Whether a ``--status`` value is an active link (a speed), not ``<inactive>``/down."""
    return bool(re.fullmatch(r"\d+(\.\d+)?\s*GB/s", state))


def _counter_name(raw: str) -> str:
    """``Replay Errors`` -> ``replay``, ``CRC Errors`` -> ``crc``, ...."""
    name = re.sub(r"\s+errors?$", "", raw.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def parse_nvlink_errors(text: str) -> dict[tuple[int, int], dict[str, int]]:
    """``{(gpu, link): {counter: value}}`` from ``nvidia-smi nvlink -e``; N/A counters left out."""
    out: dict[tuple[int, int], dict[str, int]] = {}
    for gpu, lines in _blocks(text).items():
        for line in lines:
            match = _LINK_RE.match(line)
            if not match:
                raise NvlinkParseError(f"GPU {gpu}: not a link line: {line[:60]!r}")
            counters = out.setdefault((gpu, int(match[1])), {})
            for part in match[2].split(","):  # some builds print all counters on one line
                counter = _COUNTER_RE.match(part.strip())
                if not counter:
                    raise NvlinkParseError(f"GPU {gpu}: not a counter: {part.strip()[:60]!r}")
                value = counter[2]
                if value in _NO_INFO:
                    continue
                if not value.isdigit():
                    raise NvlinkParseError(f"GPU {gpu}: counter value {value[:20]!r}")
                counters[_counter_name(counter[1])] = int(value)
    return out


def judge_nvlink(
    status: Mapping[int, Mapping[int, str]],
    errors: Mapping[tuple[int, int], Mapping[str, int]],
    previous: Mapping[tuple[int, int], Mapping[str, int]] | None,
    limits: NvlinkThresholds,
    *,
    expected_gpus: int,
) -> CheckResult:
    """Links down below the expected count fail; error counters are judged by growth.

    ``previous`` is the last run's counters (None on the first run: counters since boot
    say nothing about now, so only link state is judged). A counter that went down was
    reset (``nvidia-smi nvlink -r``): its growth is its new value.
    """
    findings: list[CheckResult] = []
    if expected_gpus and len(status) < expected_gpus:
        findings.append(
            fail(
                NVLINK,
                "nvlink-gpu-missing",
                Remediation.REBOOT,
                f"{len(status)} GPUs listed, {expected_gpus} expected",
            )
        )
    for gpu, links in sorted(status.items()):
        up = sorted(n for n, s in links.items() if link_is_up(s))
        if len(up) < limits.expected_links:
            down = sorted(n for n, s in links.items() if not link_is_up(s))
            findings.append(
                fail(
                    NVLINK,
                    "nvlink-down",
                    Remediation.REBOOT,
                    f"GPU {gpu}: {len(up)} of {limits.expected_links} links active"
                    + (f", down: {down[:18]}" if down else ""),
                )
            )
    if previous is not None:
        for key, counters in sorted(errors.items()):
            before = previous.get(key, {})
            for name, value in sorted(counters.items()):
                old = before.get(name)
                if old is None:
                    continue
                growth = value - old if value >= old else value
                where = f"GPU {key[0]} link {key[1]}: {name} errors +{growth}"
                fail_at, warn_at = limits.fail_at(name), limits.warn_at(name)
                if fail_at is not None and growth >= fail_at:
                    cause = f"nvlink-{name}-errors"
                    findings.append(fail(NVLINK, cause, Remediation.REBOOT, where))
                elif warn_at is not None and growth >= warn_at:
                    findings.append(warn(NVLINK, f"nvlink-{name}-errors", where))
    result = worst(NVLINK, findings)
    if result.verdict.value == "ok":
        total = sum(len(v) for v in status.values())
        return ok(NVLINK, f"{len(status)} GPUs, {total} links active")
    return result


def judge_nvlink_run(
    status_text: str,
    errors_text: str,
    previous: Mapping[tuple[int, int], Mapping[str, int]] | None,
    limits: NvlinkThresholds,
    *,
    expected_gpus: int,
) -> tuple[CheckResult, dict[tuple[int, int], dict[str, int]] | None]:
    """Parse both outputs and judge them; the counters read (None when unreadable)."""
    lost = smi_lost(f"{status_text}\n{errors_text}")
    if lost is not None:
        return lost, None
    try:
        status = parse_nvlink_status(status_text)
        errors = parse_nvlink_errors(errors_text)
    except NvlinkParseError as exc:
        return unknown(NVLINK, "nvlink-unreadable", str(exc)), None
    return judge_nvlink(status, errors, previous, limits, expected_gpus=expected_gpus), errors


# --- fabric ------------------------------------------------------------------------------

_SECTION_RE: Final = re.compile(r"^(\s*)(\S[^:]*?)\s*(?::\s*(.*?))?\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricInfo:
    """The ``Fabric`` section of one GPU in ``nvidia-smi -q`` (None: no section)."""

    gpu: str
    state: str | None
    status: str | None
    bandwidth: str | None = None


def parse_fabric(text: str) -> list[FabricInfo]:
    """One entry per ``GPU <bus id>`` block of ``nvidia-smi -q``, with its fabric fields."""
    gpus: list[FabricInfo] = []
    gpu: str | None = None
    fields: dict[str, str] = {}
    in_fabric = -1  # indentation of the Fabric header, -1 when outside it
    seen_fabric = False

    def close() -> None:
        if gpu is not None:
            gpus.append(
                FabricInfo(
                    gpu=gpu,
                    state=fields.get("state") if seen_fabric else None,
                    status=fields.get("status") if seen_fabric else None,
                    bandwidth=fields.get("bandwidth"),
                )
            )

    for raw in text.splitlines():
        if not raw.strip():
            continue
        if raw.startswith("GPU "):  # "GPU 00000000:18:00.0": the colons are not a key/value
            close()
            gpu, fields, in_fabric, seen_fabric = raw[4:].strip()[:40], {}, -1, False
            continue
        match = _SECTION_RE.match(raw)
        if not match:
            continue
        indent, key, value = len(match[1].expandtabs()), match[2], match[3]
        if gpu is None:
            continue
        if value is None and key == "Fabric":
            in_fabric, seen_fabric = indent, True
            continue
        if in_fabric >= 0:
            if indent <= in_fabric:
                in_fabric = -1
            elif value is not None:
                fields.setdefault(key.lower(), value.strip()[:80])
    close()
    return gpus


def judge_fabric(text: str, *, required: bool, expected_gpus: int) -> CheckResult:
    """Judge the fabric state of every GPU in one ``nvidia-smi -q`` output.

    Completed + Success is ok. In Progress (training stuck) and Not Started (the fabric
    manager is not running) fail: the GPU cannot run CUDA work until the fabric manager has
    trained it; so does any other status. No fabric on any GPU (N/A or no section) is ok
    with evidence "no fabric" unless ``required``; a mix of GPUs with and without one fails.
    """
    lost = smi_lost(text)
    if lost is not None:
        return fail(FABRIC, lost.cause, lost.remediation, lost.evidence)
    gpus = parse_fabric(text)
    if not gpus:
        return unknown(FABRIC, "fabric-unreadable", "no GPU block in nvidia-smi -q output")
    if expected_gpus and len(gpus) != expected_gpus:
        return fail(
            FABRIC,
            "gpu-count",
            Remediation.REBOOT,
            f"{len(gpus)} GPUs in nvidia-smi -q, {expected_gpus} expected",
        )
    absent = [g for g in gpus if g.state is None or g.state in _NO_INFO]
    if len(absent) == len(gpus):
        if required:
            return fail(
                FABRIC,
                "fabric-missing",
                Remediation.MANUAL,
                f"no GPU reports a fabric (state {gpus[0].state or 'absent'}), one is required",
            )
        return ok(FABRIC, "no fabric")
    findings: list[CheckResult] = []
    for g in gpus:
        where = f"GPU {g.gpu}: state {g.state or 'absent'}, status {g.status or 'absent'}"
        state = (g.state or "").lower()
        status = (g.status or "").lower()
        if g in absent:
            findings.append(fail(FABRIC, "fabric-missing", Remediation.REBOOT, where))
        elif state == "completed" and status == "success":
            if (g.bandwidth or "").lower() not in {"", "full", "n/a"}:
                where += f", bandwidth {g.bandwidth}"
                findings.append(warn(FABRIC, "fabric-degraded", where))
            else:
                findings.append(ok(FABRIC))
        elif state == "in progress":
            findings.append(fail(FABRIC, "fabric-not-ready", Remediation.REBOOT, where))
        elif state == "not started":  # the fabric manager is not running: a reboot won't start it
            findings.append(fail(FABRIC, "fabric-not-started", Remediation.MANUAL, where))
        else:
            findings.append(fail(FABRIC, "fabric-failed", Remediation.REBOOT, where))
    result = worst(FABRIC, findings)
    if result.verdict.value == "ok":
        return ok(FABRIC, f"{len(gpus)} GPUs: fabric completed")
    return result

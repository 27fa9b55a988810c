"""Health parsers and hysteresis, table-tested on the fixtures under tests/data/health."""

from __future__ import annotations

from pathlib import Path

import pytest

from slonkd.core import gpu_health, node_health
from slonkd.core.health import (
    CheckResult,
    Hysteresis,
    Remediation,
    Verdict,
    fail,
    judge,
    ok,
    unknown,
)

DATA = Path(__file__).parent.parent / "data" / "health"
LIMITS = gpu_health.GpuThresholds(expected_gpus=8)


@pytest.mark.parametrize(
    ("fixture", "verdict", "cause", "remediation"),
    [
        ("healthy-8.handwritten.csv", Verdict.OK, "", Remediation.NONE),
        ("ecc-storm.handwritten.csv", Verdict.FAIL, "ecc-uncorrectable", Remediation.REBOOT),
        ("row-remap-failed.handwritten.csv", Verdict.FAIL, "row-remap-failed", Remediation.MANUAL),
        (
            "row-remap-pending.handwritten.csv",
            Verdict.FAIL,
            "row-remap-pending",
            Remediation.REBOOT,
        ),
        ("gpu-lost.handwritten.csv", Verdict.FAIL, "gpu-fell-off-bus", Remediation.REBOOT),
        ("seven-gpus.handwritten.csv", Verdict.FAIL, "gpu-count", Remediation.REBOOT),
        ("throttled.handwritten.csv", Verdict.WARN, "gpu-hot", Remediation.NONE),
    ],
)
def test_nvidia_smi_query_outputs(
    fixture: str, verdict: Verdict, cause: str, remediation: Remediation
) -> None:
    """Each recorded query output gives its verdict, cause and remediation class."""
    text = (DATA / "nvidia-smi" / fixture).read_text()
    result = gpu_health.parse_nvidia_smi(text, "", 0, LIMITS)
    assert (result.verdict, result.cause, result.remediation) == (verdict, cause, remediation)
    if verdict is not Verdict.OK:
        assert "GPU" in result.evidence


def test_nvidia_smi_failures_outside_the_csv() -> None:
    """A lost device handle and a missing driver fail; an odd exit is unknown, never ok."""
    handle = (DATA / "nvidia-smi" / "no-device-handle.handwritten.txt").read_text()
    assert gpu_health.parse_nvidia_smi("", handle, 15, LIMITS).cause == "gpu-fell-off-bus"
    driver = (DATA / "nvidia-smi" / "no-driver.handwritten.txt").read_text()
    assert gpu_health.parse_nvidia_smi(driver, "", 9, LIMITS).cause == "gpu-driver"
    assert (
        gpu_health.parse_nvidia_smi("", "Segmentation fault", 139, LIMITS).verdict
        is Verdict.UNKNOWN
    )
    assert gpu_health.parse_nvidia_smi("garbage\nmore", "", 0, LIMITS).verdict is Verdict.UNKNOWN
    assert gpu_health.parse_nvidia_smi("", "", 0, LIMITS).verdict is Verdict.UNKNOWN


def test_nvidia_smi_columns_are_read_by_name_not_position() -> None:
    """Reordered columns and unit suffixes in the header still parse."""
    lines = (DATA / "nvidia-smi" / "ecc-storm.handwritten.csv").read_text().splitlines()
    rows = [[c.strip() for c in line.split(",")] for line in lines]
    reordered = "\n".join(", ".join(reversed(r)) for r in rows)
    assert gpu_health.parse_nvidia_smi(reordered, "", 0, LIMITS).cause == "ecc-uncorrectable"


def test_xids_from_kernel_log() -> None:
    """Fatal Xids fail with the heaviest remediation; application Xids alone pass."""
    lines = (DATA / "kmsg" / "xid-mixed.handwritten.txt").read_text().splitlines()
    events = gpu_health.find_xids(lines)
    assert [e.xid for e in events] == [13, 31, 94, 48, 79]
    assert events[-1].device == "PCI:0000:9a:00"
    policy = gpu_health.XidPolicy()
    result = gpu_health.judge_xids(events, policy)
    assert result.verdict is Verdict.FAIL
    assert result.remediation is Remediation.REBOOT
    assert "Xid 79" in result.evidence
    app_only = gpu_health.judge_xids(events[:2], policy)
    assert app_only.verdict is Verdict.OK
    contained = gpu_health.judge_xids([events[2]], policy)
    assert (contained.cause, contained.remediation) == ("gpu-xid-94", Remediation.RESTART_POD)


def test_dmesg_text_lines_parse_like_kmsg_records() -> None:
    """A dmesg line with a [seconds] prefix yields the same Xid as a kmsg record."""
    line = (
        "[ 905.870011] NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', GPU has fallen off the bus."
    )
    assert [e.xid for e in gpu_health.find_xids([line])] == [79]


FORGED_XID_LINES = [
    # The kernel's own warning quotes the executed path: user-controlled text in a kernel record.
    "4,2001,1000000000,-;process 'evil' launched '/tmp/x NVRM: Xid (PCI:0000:3b:00): 79, pid=1'"
    " with NULL argv: empty string added",
    "[ 1000.000001] process 'evil' launched '/tmp/x NVRM: Xid (PCI:0000:3b:00): 79, pid=1'"
    " with NULL argv: empty string added",
    # A process name or other user text in front of the forged record.
    "[ 1000.000002] python[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, forged",
    "4,2002,1000000002,-;usb 1-1: Product: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x",
    # Written to /dev/kmsg from user space: the kernel forces a non-kernel facility (LOG_USER).
    "12,2003,1000000003,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, forged",
    "<12>[ 1000.000003] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, forged",
    # A kmsg continuation (dictionary) line and a device that is no PCI address.
    " DEVICE=+pci:0000:3b:00.0 NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
    "4,2004,1000000004,-;NVRM: Xid (evil): 79, pid=1, name=x",
]


@pytest.mark.parametrize("line", FORGED_XID_LINES)
def test_forged_xid_in_user_controlled_text_is_not_an_xid(line: str) -> None:
    """Xid text that is not the driver's own record opening a kernel message latches nothing."""
    assert gpu_health.find_xids([line]) == []
    tracker = gpu_health.XidTracker(policy=gpu_health.XidPolicy(), started_us=0)
    assert tracker.observe(gpu_health.find_xids([line])).verdict is Verdict.OK
    assert tracker.latched == {}


def test_driver_xid_records_in_every_kernel_log_form_parse() -> None:
    """The driver's record parses from a kmsg record, dmesg, dmesg -r and a bare message."""
    record = (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>,"
        " GPU has fallen off the bus."
    )
    lines = [
        f"4,1422,905870011,-;{record}",
        f"[ 905.870011] {record}",
        f"<4>[ 905.870011] {record}",
        record,
        "[  12.5] NVRM: Xid (0000:3b:00): 13, 0001 00000000 0000a1c0 00001850 00000000 00000080",
    ]
    events = gpu_health.find_xids(lines)
    assert [(e.device, e.xid) for e in events] == [("PCI:0000:3b:00", 79)] * 4 + [
        ("0000:3b:00", 13)
    ]
    assert events[0].text.startswith("pid='<unknown>'")
    assert [e.at_us for e in events] == [905_870_011] * 3 + [None, 12_500_000]


def _port(name: str = "mlx5_0/1", **kw: object) -> node_health.IbPort:
    base: dict[str, object] = {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "400 Gb/sec (4X NDR)",
        "counters": {"symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0},
    }
    base.update(kw)
    return node_health.IbPort(name=name, **base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("now", "before", "cause"),
    [
        (_port(), None, ""),
        (_port(state="1: DOWN", phys_state="3: Disabled"), None, "ib-port-down"),
        (_port(rate="100 Gb/sec (4X EDR)"), None, "ib-rate-degraded"),
        (
            _port(counters={"symbol_error": 500, "link_downed": 0, "port_rcv_errors": 0}),
            _port(),
            "ib-errors",
        ),
        (
            _port(counters={"symbol_error": 0, "link_downed": 2, "port_rcv_errors": 0}),
            _port(),
            "ib-link-downed",
        ),
        (_port(counters={"symbol_error": 500, "link_downed": 0, "port_rcv_errors": 0}), None, ""),
    ],
)
def test_infiniband_ports(
    now: node_health.IbPort, before: node_health.IbPort | None, cause: str
) -> None:
    """Down, slow and erroring ports fail; counters are judged by growth, not absolute value."""
    limits = node_health.IbThresholds(min_rate_gbps=400)
    previous = {before.name: before} if before else {}
    result = node_health.judge_ib([now], previous, limits, expected=1)
    assert result.cause == cause
    assert result.verdict is (Verdict.OK if not cause else Verdict.FAIL)


def test_missing_ib_ports_fail() -> None:
    """Fewer ports than expected is a failure, none at all too."""
    limits = node_health.IbThresholds()
    assert node_health.judge_ib([], {}, limits, expected=2).cause == "ib-port-missing"
    assert node_health.judge_ib([_port()], {}, limits, expected=2).cause == "ib-port-missing"


def test_nic_carrier_flaps_and_down_links() -> None:
    """A carrier that changed more than allowed since the last run, or a down link, fails."""
    before = {"eth0": ("up", 4)}
    flap = node_health.judge_carrier({"eth0": ("up", 12)}, before, interfaces=["eth0"])
    assert flap.cause == "nic-carrier-flap"
    assert (
        node_health.judge_carrier({"eth0": ("up", 5)}, before, interfaces=["eth0"]).verdict
        is Verdict.OK
    )
    assert (
        node_health.judge_carrier({"eth0": ("down", 4)}, before, interfaces=["eth0"]).cause
        == "nic-down"
    )
    assert node_health.judge_carrier({}, before, interfaces=["eth0"]).cause == "nic-missing"


def _x16_link(width: int, speed: str) -> node_health.PcieLink:
    """A x16, 32 GT/s link that runs at ``width`` lanes and ``speed``."""
    return node_health.PcieLink(
        address="0000:18:00.0",
        current_width=width,
        max_width=16,
        current_speed=speed,
        max_speed="32.0 GT/s PCIe",
    )


def test_pcie_width_fails_but_speed_only_warns() -> None:
    """A narrower link fails; a slower one (GPUs downclock when idle) only warns."""
    narrow = _x16_link(8, "32.0 GT/s PCIe")
    slow = _x16_link(16, "2.5 GT/s PCIe")
    assert node_health.judge_pcie([narrow]).cause == "pcie-width-degraded"
    assert node_health.judge_pcie([slow]).verdict is Verdict.WARN


def test_disk_thresholds() -> None:
    """Nearly full fails, getting full warns, otherwise ok; a zero-size filesystem is unknown."""
    limits = node_health.DiskThresholds()
    gib = 2**30
    assert (
        node_health.judge_disk("/", free_bytes=gib // 2, total_bytes=500 * gib, limits=limits).cause
        == "disk-full"
    )
    assert (
        node_health.judge_disk("/", free_bytes=25 * gib, total_bytes=500 * gib, limits=limits).cause
        == "disk-low"
    )
    assert (
        node_health.judge_disk(
            "/", free_bytes=250 * gib, total_bytes=500 * gib, limits=limits
        ).verdict
        is Verdict.OK
    )
    assert (
        node_health.judge_disk("/", free_bytes=0, total_bytes=0, limits=limits).verdict
        is Verdict.UNKNOWN
    )


def test_peers_majority_rule() -> None:
    """Most peers unreachable fails (it is this node), some unreachable warns (it may be them)."""
    assert node_health.judge_peers({"a": False, "b": False, "c": True}).verdict is Verdict.FAIL
    assert node_health.judge_peers({"a": False, "b": True, "c": True}).verdict is Verdict.WARN
    assert node_health.judge_peers({}).verdict is Verdict.OK


def _runs(*verdicts: str) -> list[CheckResult]:
    table = {
        "ok": ok("c"),
        "fail": fail("c", "gpu-xid-79", Remediation.REBOOT),
        "late": unknown("c", "hung", timed_out=True),
        "unknown": unknown("c", "tool-missing"),
    }
    return [table[v] for v in verdicts]


@pytest.mark.parametrize(
    ("history", "failing", "expected"),
    [
        (["fail"], False, Verdict.WARN),  # one noisy sample never drains
        (["ok", "fail", "ok", "fail"], False, Verdict.WARN),
        (["fail", "ok", "fail", "ok", "fail"], False, Verdict.FAIL),  # 3 of the last 5
        (
            ["fail", "fail", "fail", "ok", "ok", "ok", "ok", "ok"],
            False,
            Verdict.OK,
        ),  # out of the window
        (["late", "late", "ok", "late"], False, Verdict.FAIL),  # missed deadlines count as failures
        (
            ["unknown", "unknown", "unknown"],
            False,
            Verdict.UNKNOWN,
        ),  # missing tool: unknown, not ok
        (["fail", "ok", "ok"], True, Verdict.FAIL),  # held until K passes
        (["fail", "ok", "ok", "ok"], True, Verdict.OK),
        (["ok", "ok", "unknown"], True, Verdict.FAIL),  # unknown never clears a fail
    ],
)
def test_hysteresis(history: list[str], failing: bool, expected: Verdict) -> None:
    """N of M failures make a fail, K consecutive passes clear it, unknown is never ok."""
    assert (
        judge(_runs(*history), Hysteresis(fail_n=3, window_m=5, clear_k=3), failing=failing).verdict
        is expected
    )


def test_hysteresis_rejects_impossible_policies() -> None:
    """fail_n must fit in the window and clear_k must be positive."""
    with pytest.raises(ValueError, match="fail_n"):
        Hysteresis(fail_n=6, window_m=5)
    with pytest.raises(ValueError, match="clear_k"):
        Hysteresis(clear_k=0)


def test_verdicts_round_trip_through_the_status_encoding() -> None:
    """encode_verdict/decode_verdict keep verdict, cause and remediation; junk is unknown."""
    from slonkd.core.health import decode_verdict, encode_verdict

    for result in (
        ok("c"),
        fail("c", "gpu-xid-79", Remediation.REBOOT),
        unknown("c", "tool-missing"),
        CheckResult(check="c", verdict=Verdict.WARN, cause="disk-low"),
    ):
        back = decode_verdict("c", encode_verdict(result))
        assert (back.verdict, back.cause, back.remediation) == (
            result.verdict,
            result.cause,
            result.remediation,
        )
    assert decode_verdict("c", "maybe:x").verdict is Verdict.UNKNOWN

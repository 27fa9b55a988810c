"""dcgmi diag, NVLink and fabric parsers and the first-run Xid policy, on tests/data/health."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slonkd.core import dcgm_health, gpu_health, nvlink_health
from slonkd.core.health import CheckResult, Remediation, Verdict

DATA = Path(__file__).parent.parent / "data" / "health"


def _read(*parts: str) -> str:
    return DATA.joinpath(*parts).read_text()


# --- dcgmi diag ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "rc", "verdict", "cause", "remediation"),
    [
        ("diag-r1-pass.handwritten.json", 0, Verdict.OK, "", Remediation.NONE),
        ("diag-r1-pass-3.1-uppercase.handwritten.json", 0, Verdict.OK, "", Remediation.NONE),
        (
            "diag-r1-row-remap-fail.handwritten.json",
            226,
            Verdict.FAIL,
            "dcgm-page-retirement-row-remap",
            Remediation.REBOOT,
        ),
        (
            "diag-r1-persistence-warn.handwritten.json",
            0,
            Verdict.WARN,
            "dcgm-persistence-mode-warn",
            Remediation.NONE,
        ),
        ("diag-runtime-error.handwritten.json", 1, Verdict.UNKNOWN, "dcgm-unreadable", None),
        (
            "hostengine-down.handwritten.txt",
            1,
            Verdict.UNKNOWN,
            "dcgm-hostengine-unreachable",
            None,
        ),
    ],
)
def test_dcgm_diag_outputs(
    fixture: str, rc: int, verdict: Verdict, cause: str, remediation: Remediation | None
) -> None:
    """Pass, a failed test with its GPU and message, a warning, a diagnostic that did not run."""
    result = dcgm_health.judge_dcgm_diag(_read("dcgmi", fixture), "", rc)
    assert (result.verdict, result.cause) == (verdict, cause)
    if remediation is not None:
        assert result.remediation is remediation
    if verdict is Verdict.FAIL:
        assert "GPU 3" in result.evidence
        assert "row remapping failed" in result.evidence
    if verdict is Verdict.OK:
        assert "passed" in result.evidence


def test_dcgm_failure_names_only_the_failing_gpu() -> None:
    """The parsed report keeps per-GPU results; only GPU 3's is a failure."""
    report = dcgm_health.parse_dcgm_diag(_read("dcgmi", "diag-r1-row-remap-fail.handwritten.json"))
    failed = [r for r in report.results if r.status is dcgm_health.DiagStatus.FAIL]
    assert [(r.test, r.gpus) for r in failed] == [("Page Retirement/Row Remap", "3")]
    assert report.version == "3.3.5"


def _doc(results: list[object], root: str = "DCGM GPU Diagnostic") -> str:
    tests = [{"name": "Inforom", "results": results}]
    return json.dumps({root: {"test_categories": [{"category": "Deployment", "tests": tests}]}})


@pytest.mark.parametrize(
    ("stdout", "rc", "cause"),
    [
        ("", 0, "dcgm-unreadable"),
        ("not json at all", 0, "dcgm-unreadable"),
        ('{"DCGM GPU Diagnostic": {"test_categories": [', 0, "dcgm-unreadable"),
        ("[" * 50_000 + "]" * 50_000, 0, "dcgm-unreadable"),
        ("{" + '"a":{' * 50_000 + "}" * 50_001, 0, "dcgm-unreadable"),
        ('{"something else": {}}', 0, "dcgm-unreadable"),
        ('{"DCGM GPU Diagnostic": {"version": "3.3.5"}}', 0, "dcgm-unreadable"),
        ('{"DCGM GPU Diagnostic": {"test_categories": {}}}', 0, "dcgm-unreadable"),
        (_doc([{"gpu_ids": "0", "status": "Maybe"}]), 0, "dcgm-unreadable"),
        (_doc([{"gpu_ids": "0", "status": 1}]), 0, "dcgm-unreadable"),
        (_doc([{"gpu_ids": True, "status": "Pass"}]), 0, "dcgm-unreadable"),
        (_doc([{"gpu_ids": ["0"], "status": "Pass"}]), 0, "dcgm-unreadable"),
        (_doc([{"gpu_ids": "0; rm -rf /", "status": "Pass"}]), 0, "dcgm-unreadable"),
        (_doc(["Pass"]), 0, "dcgm-unreadable"),
        (_doc([]), 0, "dcgm-nothing-ran"),
        (_doc([{"gpu_ids": "0", "status": "Skip"}]), 0, "dcgm-nothing-ran"),
        (_doc([{"gpu_ids": "0", "status": "Pass"}]), 3, "dcgm-error"),
        ("x" * (dcgm_health.MAX_DOCUMENT + 1), 0, "dcgm-unreadable"),
    ],
)
def test_dcgm_unreadable_or_inconclusive_is_unknown_never_ok(
    stdout: str, rc: int, cause: str
) -> None:
    """Malformed, truncated, hostile or inconclusive documents are unknown with a reason."""
    result = dcgm_health.judge_dcgm_diag(stdout, "", rc)
    assert (result.verdict, result.cause) == (Verdict.UNKNOWN, cause)


def test_dcgm_4_root_and_entity_ids_parse() -> None:
    """DCGM 4's root name and ``entity_id`` results read like 3.x's."""
    doc = _doc(
        [{"entity_id": 0, "status": "Pass"}, {"entity_id": 1, "status": "Fail", "info": "bad"}],
        root="DCGM Diagnostic",
    )
    result = dcgm_health.judge_dcgm_diag(doc, "", 226)
    assert (result.verdict, result.cause, result.remediation) == (
        Verdict.FAIL,
        "dcgm-inforom",
        Remediation.MANUAL,
    )
    assert "GPU 1: bad" in result.evidence


FAIL_DOC = _read("dcgmi", "diag-r1-row-remap-fail.handwritten.json")


@given(cut=st.integers(min_value=0, max_value=len(FAIL_DOC.rstrip()) - 1))
def test_truncated_dcgm_document_is_unknown(cut: int) -> None:
    """A cut-off failing document is unknown: never ok, never a partial verdict."""
    result = dcgm_health.judge_dcgm_diag(FAIL_DOC[:cut], "", 226)
    assert result.verdict is Verdict.UNKNOWN


@given(
    pos=st.integers(min_value=0, max_value=len(FAIL_DOC) - 1),
    junk=st.text(alphabet=' ,:[]{}"0123456789\n', min_size=1, max_size=20),
)
@settings(max_examples=300)
def test_junk_in_a_failing_dcgm_document_never_passes(pos: int, junk: str) -> None:
    """Junk spliced into a failing document gives fail or unknown, never ok or warn."""
    result = dcgm_health.judge_dcgm_diag(FAIL_DOC[:pos] + junk + FAIL_DOC[pos:], "", 226)
    assert result.verdict in (Verdict.FAIL, Verdict.UNKNOWN)


@given(data=st.text(max_size=2000))
@settings(max_examples=150)
def test_dcgm_garbage_never_raises(data: str) -> None:
    """Random text is judged (unknown), never an exception."""
    assert dcgm_health.judge_dcgm_diag(data, data, 0).verdict is Verdict.UNKNOWN


# --- NVLink ------------------------------------------------------------------------------

LINKS = nvlink_health.NvlinkThresholds(expected_links=18)
STATUS_OK = _read("nvlink", "status-h100-18.handwritten.txt")
STATUS_DOWN = _read("nvlink", "status-gpu2-two-links-down.handwritten.txt")
ERRORS_CLEAN = _read("nvlink", "errors-h100-clean.handwritten.txt")
ERRORS_GROWN = _read("nvlink", "errors-h100-gpu5-recoveries.handwritten.txt")


def _nvlink(status: str, errors: str, before: str | None = None, gpus: int = 8) -> CheckResult:
    previous = nvlink_health.parse_nvlink_errors(before) if before is not None else None
    result, _ = nvlink_health.judge_nvlink_run(status, errors, previous, LINKS, expected_gpus=gpus)
    return result


def test_nvlink_healthy_and_links_down() -> None:
    """18 active links per GPU pass; two inactive links on GPU 2 fail with reboot."""
    healthy = _nvlink(STATUS_OK, ERRORS_CLEAN)
    assert (healthy.verdict, healthy.evidence) == (Verdict.OK, "8 GPUs, 144 links active")
    down = _nvlink(STATUS_DOWN, ERRORS_CLEAN)
    assert (down.verdict, down.cause, down.remediation) == (
        Verdict.FAIL,
        "nvlink-down",
        Remediation.REBOOT,
    )
    assert down.evidence == "GPU 2: 16 of 18 links active, down: [5, 11]"


def test_nvlink_error_counters_are_judged_by_growth() -> None:
    """Counters since boot alone say nothing; growth past the limits warns or fails."""
    assert _nvlink(STATUS_OK, ERRORS_GROWN).verdict is Verdict.OK  # first run: no baseline
    grown = _nvlink(STATUS_OK, ERRORS_GROWN, before=ERRORS_CLEAN)
    assert (grown.verdict, grown.cause) == (Verdict.FAIL, "nvlink-recovery-errors")
    assert "GPU 5 link 7: recovery errors +14" in grown.evidence
    replay_only = ERRORS_GROWN.replace("Recovery Errors: 14", "Recovery Errors: 0")
    warned = _nvlink(STATUS_OK, replay_only, before=ERRORS_CLEAN)
    assert (warned.verdict, warned.cause) == (Verdict.WARN, "nvlink-replay-errors")
    assert _nvlink(STATUS_OK, ERRORS_GROWN, before=ERRORS_GROWN).verdict is Verdict.OK
    reset = _nvlink(STATUS_OK, ERRORS_CLEAN, before=ERRORS_GROWN)  # counters reset: growth 0
    assert reset.verdict is Verdict.OK


def test_nvlink_counter_formats() -> None:
    """N/A counters are left out; counters printed on one line parse too."""
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n"
        "\t Link 0: Replay Errors: 3, Recovery Errors: N/A, CRC Errors: 1\n"
    )
    assert nvlink_health.parse_nvlink_errors(text) == {(0, 0): {"replay": 3, "crc": 1}}


@pytest.mark.parametrize(
    ("status", "errors", "cause"),
    [
        ("", ERRORS_CLEAN, "nvlink-unreadable"),
        ("Link 0: 26.562 GB/s\n", ERRORS_CLEAN, "nvlink-unreadable"),
        (STATUS_OK, "GPU 0: x\n\t Link 0: Replay Errors: lots\n", "nvlink-unreadable"),
        (STATUS_OK + "\tsomething else\n", ERRORS_CLEAN, "nvlink-unreadable"),
        ("Unable to determine the device handle for GPU 0000:9A:00.0: Unknown Error\n", "", ""),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "", ""),
    ],
)
def test_nvlink_unreadable_or_lost(status: str, errors: str, cause: str) -> None:
    """Unparsable output is unknown; a lost GPU or driver fails with reboot."""
    result = _nvlink(status, errors)
    if cause:
        assert (result.verdict, result.cause) == (Verdict.UNKNOWN, cause)
    else:
        assert result.verdict is Verdict.FAIL
        assert result.remediation is Remediation.REBOOT


def test_nvlink_fewer_gpus_than_expected_fails() -> None:
    """A GPU missing from the listing is a failure, not a GPU with no links to check."""
    seven = STATUS_OK.split("GPU 7:")[0]
    assert _nvlink(seven, ERRORS_CLEAN).cause == "nvlink-gpu-missing"


@given(cut=st.integers(min_value=0, max_value=len(STATUS_OK.rstrip()) - 1))
def test_truncated_nvlink_status_never_passes(cut: int) -> None:
    """A cut-off link listing is a failure or unknown, never ok."""
    assert _nvlink(STATUS_OK[:cut], ERRORS_CLEAN).verdict is not Verdict.OK


@given(status=st.text(max_size=1500), errors=st.text(max_size=1500))
@settings(max_examples=200)
def test_nvlink_garbage_never_raises(status: str, errors: str) -> None:
    """Random text never crashes the NVLink parser and is never ok."""
    with contextlib.suppress(nvlink_health.NvlinkParseError):
        nvlink_health.parse_nvlink_status(status)
    assert _nvlink(status, errors).verdict is not Verdict.OK


# --- fabric ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "required", "verdict", "cause", "evidence"),
    [
        ("fabric-completed", False, Verdict.OK, "", "8 GPUs: fabric completed"),
        ("fabric-in-progress", False, Verdict.FAIL, "fabric-not-ready", "00000000:BA:00.0"),
        ("fabric-not-started", False, Verdict.FAIL, "fabric-not-started", "Not Started"),
        ("fabric-na-pcie", False, Verdict.OK, "", "no fabric"),
        ("fabric-absent-old-driver", False, Verdict.OK, "", "no fabric"),
        ("fabric-na-pcie", True, Verdict.FAIL, "fabric-missing", "required"),
        ("fabric-absent-old-driver", True, Verdict.FAIL, "fabric-missing", "absent"),
    ],
)
def test_fabric_states(
    fixture: str, required: bool, verdict: Verdict, cause: str, evidence: str
) -> None:
    """Completed/Success passes; not ready fails; no fabric passes unless one is required."""
    text = _read("nvidia-smi-q", f"{fixture}.handwritten.txt")
    result = nvlink_health.judge_fabric(text, required=required, expected_gpus=8)
    assert (result.verdict, result.cause) == (verdict, cause)
    assert evidence in result.evidence


def test_fabric_remediations_and_mixed_and_degraded() -> None:
    """In Progress -> reboot, Not Started -> manual; a mix fails; degraded bandwidth warns."""
    q = _read("nvidia-smi-q", "fabric-completed.handwritten.txt")
    progress = _read("nvidia-smi-q", "fabric-in-progress.handwritten.txt")
    started = _read("nvidia-smi-q", "fabric-not-started.handwritten.txt")
    assert nvlink_health.judge_fabric(progress, required=False, expected_gpus=8).remediation is (
        Remediation.REBOOT
    )
    assert nvlink_health.judge_fabric(started, required=False, expected_gpus=8).remediation is (
        Remediation.MANUAL
    )
    blocks = q.split("GPU 00000000:")
    na = _read("nvidia-smi-q", "fabric-na-pcie.handwritten.txt").split("GPU 00000000:")
    mixed = "GPU 00000000:".join([*blocks[:8], na[8]])
    assert nvlink_health.judge_fabric(mixed, required=False, expected_gpus=8).cause == (
        "fabric-missing"
    )
    degraded = q.replace("Bandwidth                     : Full", "Bandwidth : Degraded", 1)
    result = nvlink_health.judge_fabric(degraded, required=False, expected_gpus=8)
    assert (result.verdict, result.cause) == (Verdict.WARN, "fabric-degraded")
    assert nvlink_health.judge_fabric(q, required=False, expected_gpus=7).cause == "gpu-count"
    assert nvlink_health.judge_fabric("", required=False, expected_gpus=8).verdict is (
        Verdict.UNKNOWN
    )


PROGRESS = _read("nvidia-smi-q", "fabric-in-progress.handwritten.txt")


@given(cut=st.integers(min_value=0, max_value=len(PROGRESS) - 1))
@settings(max_examples=200)
def test_truncated_fabric_not_ready_never_passes(cut: int) -> None:
    """A cut-off output of a node whose fabric is not ready never passes."""
    result = nvlink_health.judge_fabric(PROGRESS[:cut], required=False, expected_gpus=8)
    assert result.verdict is not Verdict.OK


@given(data=st.text(max_size=2000))
@settings(max_examples=150)
def test_fabric_garbage_never_raises(data: str) -> None:
    """Random text is judged, never an exception."""
    nvlink_health.judge_fabric(data, required=True, expected_gpus=8)


# --- Xid first-run policy ----------------------------------------------------------------

START_US = 1_000_000_000  # the agent started 1000 s after boot


def _kmsg(seq: int, at_s: float, xid: int) -> str:
    return f"4,{seq},{int(at_s * 1_000_000)},-;NVRM: Xid (PCI:0000:9a:00): {xid}, pid=1, name=x, t"


def _tracker(lookback_s: float = 0.0) -> gpu_health.XidTracker:
    return gpu_health.XidTracker(
        policy=gpu_health.XidPolicy(), started_us=START_US, lookback_s=lookback_s
    )


def test_restart_class_xid_before_start_is_history_not_fail() -> None:
    """Xid 94 logged before this agent started warns once (history), then passes."""
    tracker = _tracker()
    first = tracker.observe(gpu_health.find_xids([_kmsg(1, 900, 94)]))
    assert (first.verdict, first.cause) == (Verdict.WARN, "gpu-xid-94")
    assert "before this agent started" in first.evidence
    assert tracker.observe([]).verdict is Verdict.OK


def test_reboot_class_xid_before_start_still_fails_and_stays_failing() -> None:
    """Xid 79 in the ring buffer means the GPU is still broken: fail on every run."""
    tracker = _tracker()
    lines = [_kmsg(1, 900, 94), _kmsg(2, 950, 79)]
    first = tracker.observe(gpu_health.find_xids(lines))
    assert (first.verdict, first.cause, first.remediation) == (
        Verdict.FAIL,
        "gpu-xid-79",
        Remediation.REBOOT,
    )
    for _ in range(3):
        again = tracker.observe([])
        assert (again.verdict, again.cause) == (Verdict.FAIL, "gpu-xid-79")


def test_xid_after_start_is_latched_for_this_agents_life() -> None:
    """A restart-class Xid after the start fails on every later run until the pod restarts."""
    tracker = _tracker()
    assert tracker.observe(gpu_health.find_xids([_kmsg(1, 900, 13)])).verdict is Verdict.OK
    hit = tracker.observe(gpu_health.find_xids([_kmsg(2, 1010, 94)]))
    assert (hit.verdict, hit.remediation) == (Verdict.FAIL, Remediation.RESTART_POD)
    assert tracker.observe([]).cause == "gpu-xid-94"
    restarted = _tracker()  # the next pod's agent reads the same ring buffer
    replay = restarted.observe(gpu_health.find_xids([_kmsg(1, 900, 13), _kmsg(2, 1010, 94)]))
    assert replay.verdict is Verdict.FAIL  # 1010 s is after START_US: still current
    later = gpu_health.XidTracker(policy=gpu_health.XidPolicy(), started_us=2_000_000_000)
    assert later.observe(gpu_health.find_xids([_kmsg(2, 1010, 94)])).verdict is Verdict.WARN


def test_lookback_counts_recent_pre_start_xids() -> None:
    """With a lookback, an Xid shortly before the start (a slow pod start) still counts."""
    assert _tracker(30).observe(gpu_health.find_xids([_kmsg(1, 980, 94)])).verdict is Verdict.FAIL
    assert _tracker(30).observe(gpu_health.find_xids([_kmsg(1, 960, 94)])).verdict is Verdict.WARN


def test_record_times_and_untimed_lines() -> None:
    """kmsg and dmesg times parse to microseconds; an untimed Xid line counts as current."""
    assert gpu_health.record_time_us("4,1,905870011,-;x") == 905_870_011
    assert gpu_health.record_time_us("[  905.87] NVRM: x") == 905_870_000
    assert gpu_health.record_time_us("NVRM: Xid (PCI:0000:9a:00): 79, x") is None
    untimed = gpu_health.find_xids(["NVRM: Xid (PCI:0000:9a:00): 94, pid=1, t"])
    assert _tracker().observe(untimed).verdict is Verdict.FAIL


def test_latched_xids_are_bounded() -> None:
    """An Xid storm on many devices latches at most MAX_LATCHED events."""
    tracker = _tracker()
    events = [
        gpu_health.XidEvent(device=f"PCI:{i}", xid=79, text="", at_us=START_US + i)
        for i in range(500)
    ]
    assert tracker.observe(events).verdict is Verdict.FAIL
    assert len(tracker.latched) == gpu_health.MAX_LATCHED

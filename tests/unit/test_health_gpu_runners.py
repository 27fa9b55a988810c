"""The dcgmi / NVLink / fabric / Xid runners, through real processes standing in for the tools.

No GPU here: small shell scripts named ``dcgmi`` and ``nvidia-smi`` on a private PATH print
the hand-written fixtures of tests/data/health, and refuse any argv other than the one the
runner must use, so these tests check the argv, the deadline, missing tools and the wiring
to the parsers (the parsers themselves are tested in test_health_gpu_extra.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slonkd.adapters.health.checks import Check, build_checks
from slonkd.adapters.health.probes import ProbeGuard
from slonkd.adapters.health.settings import HealthSettings
from slonkd.core.health import CheckResult, Remediation, Verdict

DATA = Path(__file__).parent.parent / "data" / "health"
ROOT = Path(__file__).parent.parent.parent

DCGMI = """#!/bin/sh
case "$*" in
  "diag -r "[1-4]" -j"|"diag --host unix:///run/nvidia-dcgm/hostengine.sock -r 1 -j") ;;
  *) echo "unexpected argv: $*" >&2; exit 64 ;;
esac
echo "$*" >> "$STUB_DIR/dcgmi.argv"
[ -f "$STUB_DIR/dcgmi.sleep" ] && exec /bin/sleep 30
/bin/cat "$STUB_DIR/dcgmi.out"
exit "$(/bin/cat "$STUB_DIR/dcgmi.rc")"
"""
NVIDIA_SMI = """#!/bin/sh
case "$*" in
  "nvlink --status") /bin/cat "$STUB_DIR/status.out" ;;
  "nvlink -e") /bin/cat "$STUB_DIR/errors.out" ;;
  "-q") /bin/cat "$STUB_DIR/q.out" ;;
  --query-gpu=*) /bin/cat "$STUB_DIR/query.out" ;;
  *) echo "unexpected argv: $*" >&2; exit 64 ;;
esac
"""


class Stubs:
    """The stub tools' directory; ``put`` chooses what they print next."""

    def __init__(self, root: Path) -> None:
        self.dir = root

    def put(self, name: str, fixture: str | None = None, text: str = "") -> None:
        """Make the stub's next output ``fixture`` (a path under tests/data/health) or text."""
        content = (DATA / fixture).read_text() if fixture else text
        (self.dir / name).write_text(content)


@pytest.fixture
def stubs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Stubs:
    """A PATH holding only the stub ``dcgmi`` and ``nvidia-smi``, with healthy outputs."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("dcgmi", DCGMI), ("nvidia-smi", NVIDIA_SMI)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("STUB_DIR", str(tmp_path))
    s = Stubs(tmp_path)
    s.put("dcgmi.out", "dcgmi/diag-r1-pass.handwritten.json")
    s.put("dcgmi.rc", text="0")
    s.put("status.out", "nvlink/status-h100-18.handwritten.txt")
    s.put("errors.out", "nvlink/errors-h100-clean.handwritten.txt")
    s.put("q.out", "nvidia-smi-q/fabric-completed.handwritten.txt")
    s.put("query.out", "nvidia-smi/healthy-8.handwritten.csv")
    return s


def _checks(tmp_path: Path, **kw: object) -> dict[str, Check]:
    kmsg = tmp_path / "kmsg"
    if not kmsg.exists():
        kmsg.write_text("")
    base: dict[str, object] = {
        "expected_gpus": 8,
        "disk_paths": (),
        "kmsg_path": str(kmsg),
        "nvlink_links": 18,
        "timeout_s": 5.0,
    }
    base.update(kw)
    return {c.name: c for c in build_checks(HealthSettings(**base), ProbeGuard())}  # type: ignore[arg-type]


async def _run(check: Check) -> CheckResult:
    return await check.run()


async def test_missing_tools_are_unknown_with_a_clear_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No dcgmi and no nvidia-smi: every GPU check is unknown, never ok."""
    monkeypatch.setenv("PATH", str(tmp_path))
    checks = _checks(tmp_path)
    dcgm = await _run(checks["dcgm-diag"])
    assert (dcgm.verdict, dcgm.cause, dcgm.evidence) == (
        Verdict.UNKNOWN,
        "tool-missing",
        "dcgmi not installed",
    )
    for name in ("nvlink", "fabric"):
        result = await _run(checks[name])
        assert (result.verdict, result.evidence) == (Verdict.UNKNOWN, "nvidia-smi not installed")


async def test_a_recheck_runs_dcgm_diag_at_its_own_level(stubs: Stubs, tmp_path: Path) -> None:
    """dcgm_recheck_level 3: the schedule runs ``-r 1``, a recheck (on demand) ``-r 3``."""
    check = _checks(tmp_path, dcgm_recheck_level=3)["dcgm-diag"]
    assert (await check.run()).verdict is Verdict.OK
    assert check.on_demand is not None
    assert (await check.on_demand()).verdict is Verdict.OK
    assert (tmp_path / "dcgmi.argv").read_text().splitlines() == ["diag -r 1 -j", "diag -r 3 -j"]
    assert _checks(tmp_path)["dcgm-diag"].on_demand is None  # 0: the schedule's level
    assert _checks(tmp_path, dcgm_level=2, dcgm_recheck_level=2)["dcgm-diag"].on_demand is None
    with pytest.raises(ValueError, match="dcgm_recheck_level"):
        _checks(tmp_path, dcgm_recheck_level=5)


async def test_dcgm_diag_runner(stubs: Stubs, tmp_path: Path) -> None:
    """dcgmi diag -r 1 -j: pass, then a failing run (non-zero exit, JSON on stdout)."""
    check = _checks(tmp_path)["dcgm-diag"]
    assert check.period_s == 3600.0
    assert (await _run(check)).verdict is Verdict.OK
    stubs.put("dcgmi.out", "dcgmi/diag-r1-row-remap-fail.handwritten.json")
    stubs.put("dcgmi.rc", text="226")
    failed = await _run(check)
    assert (failed.verdict, failed.cause, failed.remediation) == (
        Verdict.FAIL,
        "dcgm-page-retirement-row-remap",
        Remediation.REBOOT,
    )
    socket = "unix:///run/nvidia-dcgm/hostengine.sock"
    assert (await _run(_checks(tmp_path, dcgm_host=socket)["dcgm-diag"])).cause == (
        "dcgm-page-retirement-row-remap"
    )
    stubs.put("dcgmi.out", "dcgmi/hostengine-down.handwritten.txt")
    stubs.put("dcgmi.rc", text="1")
    assert (await _run(check)).cause == "dcgm-hostengine-unreachable"


async def test_a_hung_dcgmi_is_unknown_within_its_deadline(stubs: Stubs, tmp_path: Path) -> None:
    """A dcgmi that does not answer is killed at its deadline and reported as timed out."""
    stubs.put("dcgmi.sleep", text="")
    check = _checks(tmp_path, dcgm_timeout_s=0.5)["dcgm-diag"]
    began = time.monotonic()
    result = await _run(check)
    assert time.monotonic() - began < 5
    assert (result.verdict, result.timed_out) == (Verdict.UNKNOWN, True)


async def test_nvlink_runner_keeps_the_counters_between_runs(stubs: Stubs, tmp_path: Path) -> None:
    """First run: link state only; second run: counter growth fails; links down fail."""
    check = _checks(tmp_path)["nvlink"]
    stubs.put("errors.out", "nvlink/errors-h100-gpu5-recoveries.handwritten.txt")
    assert (await _run(check)).verdict is Verdict.OK  # counters since boot are no evidence
    assert (await _run(check)).verdict is Verdict.OK  # no growth
    stubs.put("errors.out", "nvlink/errors-h100-clean.handwritten.txt")  # reset
    assert (await _run(check)).verdict is Verdict.OK
    stubs.put("errors.out", "nvlink/errors-h100-gpu5-recoveries.handwritten.txt")
    grown = await _run(check)
    assert (grown.verdict, grown.cause) == (Verdict.FAIL, "nvlink-recovery-errors")
    stubs.put("status.out", "nvlink/status-gpu2-two-links-down.handwritten.txt")
    down = await _run(check)
    assert (down.verdict, down.cause) == (Verdict.FAIL, "nvlink-down")


async def test_fabric_runner(stubs: Stubs, tmp_path: Path) -> None:
    """nvidia-smi -q: completed passes, in progress fails, N/A passes as "no fabric"."""
    check = _checks(tmp_path)["fabric"]
    assert (await _run(check)).verdict is Verdict.OK
    stubs.put("q.out", "nvidia-smi-q/fabric-in-progress.handwritten.txt")
    assert (await _run(check)).cause == "fabric-not-ready"
    stubs.put("q.out", "nvidia-smi-q/fabric-na-pcie.handwritten.txt")
    result = await _run(check)
    assert (result.verdict, result.evidence) == (Verdict.OK, "no fabric")
    required = _checks(tmp_path, fabric_required=True)["fabric"]
    assert (await _run(required)).cause == "fabric-missing"


def _record(seq: int, at_us: int, xid: int) -> str:
    return f"4,{seq},{at_us},-;NVRM: Xid (PCI:0000:3a:00): {xid}, pid=7, name=python, x\n"


async def test_xid_runner_applies_the_first_run_policy(tmp_path: Path) -> None:
    """Xid 94 from before the agent started warns; a new Xid 94 after it fails and stays."""
    now_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(_record(1, now_us - 60_000_000, 94))
    check = _checks(tmp_path)["xid"]
    first = await _run(check)
    assert (first.verdict, first.cause) == (Verdict.WARN, "gpu-xid-94")
    assert (await _run(check)).verdict is Verdict.OK
    with kmsg.open("a") as f:
        f.write(_record(2, now_us + 5_000_000, 94))
    assert (await _run(check)).verdict is Verdict.FAIL
    assert (await _run(check)).verdict is Verdict.FAIL  # latched until the pod restarts
    again = _checks(tmp_path, xid_lookback_s=120)["xid"]  # a new agent with a lookback
    assert (await _run(again)).verdict is Verdict.FAIL


def test_optional_checks_can_be_left_out(tmp_path: Path) -> None:
    """dcgm=False, nvlink_links=0 and fabric=False build none of those checks."""
    names = set(_checks(tmp_path, dcgm=False, nvlink_links=0, fabric=False))
    assert names == {"nvidia-smi", "xid", "pcie"}


@pytest.mark.parametrize(
    ("health", "message"),
    [
        ({"dcgm": "yes"}, "dcgm must be true or false"),
        ({"nvlink_links": -1}, "nvlink_links"),
        ({"nvlink_links": 2.5}, "nvlink_links"),
        ({"heavy_period_s": 0}, "heavy_period_s"),
        ({"xid_lookback_s": -5}, "xid_lookback_s"),
        ({"dcgm_timeout": 10}, r"health: unknown keys \[.dcgm_timeout.\]"),
        ({"dcgm_host": "--help"}, "dcgm_host"),
        ({"nvlink_fail_growth": {"crc": 0}}, "crc must be a whole number"),
        ({"nvlink_warn_growth": {"CRC Errors": 5}}, "not valid"),
        ({"nvlink_warn_growth": [1, 2]}, "health.nvlink_warn_growth must be a JSON object"),
        ({"dcgm_host": "unix://relative"}, "dcgm_host"),
    ],
)
def test_bad_agent_health_settings_are_refused(
    tmp_path: Path, health: dict[str, object], message: str
) -> None:
    """The agent's settings file refuses bad values for the new keys with a clear reason."""
    from slonkd.cli.agent import load_settings

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"health": health}))
    env = {
        "POD_NAME": "w-0",
        "POD_NAMESPACE": "ns",
        "NODE_NAME": "n1",
        "SLONKD_CONFIG": str(config),
    }
    with pytest.raises(ValueError, match=message):
        load_settings(env)
    good = {"dcgm": False, "nvlink_links": 18, "nvlink_fail_growth": {"recovery": 3}}
    config.write_text(json.dumps({"health": good}))
    settings = load_settings(env)
    assert settings.health is not None
    assert (settings.health.dcgm, settings.health.nvlink_links) == (False, 18)
    limits = settings.health.nvlink_limits()
    assert (limits.expected_links, limits.fail_at("recovery"), limits.fail_at("crc")) == (
        18,
        3,
        None,
    )


def test_slonkd_check_runs_the_gpu_checks(stubs: Stubs, tmp_path: Path) -> None:
    """`slonkd check --only ... -o json` reports them; --prolog exits 1 only on a fail."""
    argv = [
        sys.executable,
        "-m",
        "slonkd.cli.main",
        "check",
        "--expected-gpus",
        "8",
        "--nvlink-links",
        "18",
        "--only",
        "dcgm",
        "--only",
        "nvlink",
        "--only",
        "fabric",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def check(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*argv, *args], capture_output=True, text=True, timeout=60, check=False, env=env
        )

    proc = check("-o", "json")
    doc = json.loads(proc.stdout)
    assert {r["check"]: r["verdict"] for r in doc["results"]} == {
        "dcgm-diag": "ok",
        "nvlink": "ok",
        "fabric": "ok",
    }
    assert proc.returncode == 0
    stubs.put("q.out", "nvidia-smi-q/fabric-not-started.handwritten.txt")
    proc = check("--prolog")
    assert proc.returncode == 1
    assert "fabric: fabric-not-started" in proc.stderr
    stubs.put("dcgmi.out", "dcgmi/diag-r1-row-remap-fail.handwritten.json")
    stubs.put("q.out", "nvidia-smi-q/fabric-completed.handwritten.txt")
    proc = check("--prolog")  # a prolog skips the slow dcgmi diag unless asked for it
    assert (proc.returncode, proc.stderr) == (0, "")
    proc = check("--prolog", "--dcgm")
    assert proc.returncode == 1
    assert "dcgm-diag: dcgm-page-retirement-row-remap" in proc.stderr
    stubs.put("q.out", "nvidia-smi-q/fabric-completed.handwritten.txt")
    proc = check("--no-dcgm", "-o", "json")
    assert "dcgm-diag" not in {r["check"] for r in json.loads(proc.stdout)["results"]}
    proc = check("--nvlink-links", "-3")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "slonkd check: nvlink_links must be between 0 and 64\n"

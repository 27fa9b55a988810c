"""bench/compare.py's pure parts: the direction of each key, the JSON line, the verdict rule."""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import pytest

from bench.compare import (
    DIRECTIONS,
    Bench,
    BenchOutputError,
    Side,
    UsageError,
    compare_rows,
    direction,
    main,
    parse_bench,
    parse_result,
    resolution,
    run_once,
    verdict,
    worse_by,
)

# keys of today's benches (bench/*.py), with the direction a reader expects
KNOWN = {
    # costs
    "check_run_s": "lower",  # health
    "agent_with_checks_rss_mb": "lower",
    "gpu_parse_ms": "lower",
    "hung_mount_unknown_s": "lower",
    "delivery_p99_at_1000_ms": "lower",  # kube
    "cache_rss_delta_5000_mb": "lower",
    "sync_1000_s": "lower",
    "issue_ms_median": "lower",  # bus
    "command_ms_p99": "lower",
    "drain_latency_p99_ms": "lower",  # agent
    "agent_idle_cpu_pct": "lower",
    "cordon_latency_p99_ms": "lower",  # coordinator
    "first_pass_5000_lease_s": "lower",
    "resync_1000_slurm_reads": "lower",
    "reads_per_s_1000": "lower",
    "slurmctld_rpc_per_s": "lower",
    "slurmctld_node_reads_per_s_fleet_off": "lower",
    "slurmctld_busy_ms_per_s_5000": "lower",
    "harness_cpu_pct": "lower",
    "loadavg_during_5000": "lower",
    "bulk_drain_1000_calls": "lower",  # slurm
    "overhead_ratio": "lower",
    "reasons_ratio_5000": "lower",
    "file_kb_1000": "lower",  # topology
    "render_reconfigure_5000_s": "lower",
    "triangulation_jobs_to_detect_p90": "lower",  # jobs
    "false_blames": "lower",
    "signal_to_requeue_p99_s": "lower",
    "revalidation_s": "lower",  # revalidation
    "real_drain_p99_ms": "lower",  # real_node
    "convergence_p99_s": "lower",  # soak
    "nodes_not_converged": "lower",
    "tools_cache_mb": "lower",  # harness
    # rates of useful work
    "events_per_s": "higher",
    "msgs_per_s": "higher",
    # no better side
    "raw_scontrol_update_ms": "info",  # the floor, not slonkd's
    "raw_reconfigure_1000_s": "info",
    "python_start_s": "info",
    "floor_ratio": "info",
    "cas_floor_ratio": "info",
    "poll30s_p99_ms": "info",  # a model
    "latency_slurmd_timeout_s": "info",  # settings
    "checkpoint_window_s": "info",
    "events": "info",
    "nodes_seen_5000": "info",
    "synced_objects_1000": "info",
    "agent_drains_counted": "info",
    "signal_to_requeue_rounds": "info",
    "real_samples": "info",
    "poll_minus_stamp_max_ms": "info",  # an offset
    "fd_slope_per_h": "info",
    "rss_longest_process_min": "info",
    "node_cpu_shares": "info",
    "jobs_lost_to_injected_faults": "info",
    "release": "info",
    "loadavg_1m_at_end": "info",  # the machine's, the run before's too
    "something_new": "info",  # no rule: never a verdict
}


@pytest.mark.parametrize(("key", "expected"), sorted(KNOWN.items()))
def test_every_known_key_has_its_direction(key: str, expected: str) -> None:
    """The table gives the costs, the rates and the keys without a better side as read."""
    assert direction(key) == expected


def test_the_table_is_small_and_every_rule_says_why() -> None:
    """An explicit table: a regex, a direction and a reason per rule."""
    assert len(DIRECTIONS) < 20
    assert all(why and way in {"lower", "higher", "info"} for _p, way, why in DIRECTIONS)


def test_the_last_line_is_the_result_after_a_table_and_blank_lines() -> None:
    """A table, then the JSON object; trailing blank lines do not count."""
    out = 'key   value\ncheck_run_s  0.4\n{"check_run_s": 0.4, "runs": 5}\n\n  \n'
    assert parse_result(out) == {"check_run_s": 0.4, "runs": 5}


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("", "no output"),
        ("\n \n", "no output"),
        ("a table\nno json here\n", "not JSON.*no json here"),
        ('{"a": 1}\ntrailing words', "not JSON"),
        ('{"a": 1', "not JSON"),
        ("[1, 2]\n", "a list, not an object"),
        ("3.5\n", "a float, not an object"),
    ],
)
def test_malformed_output_is_a_clear_error(stdout: str, message: str) -> None:
    """Output without a JSON object as its last line raises BenchOutputError, never a crash."""
    with pytest.raises(BenchOutputError, match=message):
        parse_result(stdout)


def test_a_cost_20_percent_higher_is_a_regression() -> None:
    """One round each: head 20 % slower than base."""
    assert verdict("lower", [1.0], [1.2]) == "regression"


def test_a_rate_20_percent_lower_is_a_regression() -> None:
    """A throughput falls: the bad direction of a higher-is-better key."""
    assert verdict("higher", [100.0], [80.0]) == "regression"
    assert verdict("higher", [100.0], [120.0]) == "better"


def test_within_10_percent_is_no_regression() -> None:
    """5 % slower, or 10 % exactly, is not a regression; 30 % faster is better."""
    assert verdict("lower", [1.0], [1.05]) == "ok"
    assert verdict("lower", [2.0], [2.2]) == "ok"
    assert verdict("lower", [1.0], [0.7]) == "better"


def test_overlapping_runs_are_noise_not_a_regression() -> None:
    """Medians 11 % apart, but head's best (1.2) is within 10 % of base's worst (1.25)."""
    assert verdict("lower", [1.0, 1.25], [1.2, 1.3]) == "noise"
    assert verdict("lower", [1.0, 1.05], [1.2, 1.3]) == "regression"  # no overlap: real


def test_info_keys_and_one_sided_keys_get_no_verdict() -> None:
    """No direction, or no runs on one side: no verdict."""
    assert verdict("info", [1.0], [5.0]) == "info"
    assert verdict("lower", [], [5.0]) == "-"


def test_a_base_of_zero() -> None:
    """0 -> 0 is no change, 0 -> 1 an infinite one (a count of bad things that appeared)."""
    assert worse_by(0.0, 0.0, "lower") == 0.0
    assert worse_by(0.0, 1.0, "lower") == math.inf
    assert worse_by(0.0, 1.0, "higher") == -math.inf
    assert verdict("lower", [0.0], [1.0]) == "regression"
    assert worse_by(-2.0, -1.0, "lower") == 0.5  # relative to |base|


def test_a_time_within_a_millisecond_is_no_change() -> None:
    """0 -> 0.1 ms (a phase that is 0 in most passes) is ok; 0 -> 2 ms and counts still count."""
    assert resolution("resync_5000_slurm_read_ms") == 1.0
    assert resolution("first_pass_5000_s") == 0.001
    assert resolution("false_blames") == 0.0
    assert resolution("slurmctld_busy_ms_per_s_5000") == 0.0  # a rate: no floor
    assert resolution("reads_per_s_1000") == 0.0
    assert resolution("cordon_latency_p99_ms") == 1.0
    assert verdict("lower", [0.0, 0.0], [0.1, 0.1], floor=1.0) == "ok"
    assert verdict("lower", [0.0, 0.0], [0.1, 0.1]) == "regression"  # without the floor
    assert verdict("lower", [0.0, 0.0], [2.0, 2.5], floor=1.0) == "regression"
    assert verdict("lower", [3.0, 3.1], [0.5, 0.6], floor=1.0) == "better"
    assert verdict("lower", [0.0005], [0.0009], floor=0.001) == "ok"
    rows = compare_rows(
        Side(runs=[{"x_slurm_read_ms": 0.0, "false_blames": 0}]),
        Side(runs=[{"x_slurm_read_ms": 0.1, "false_blames": 1}]),
    )
    assert [(r.key, r.verdict) for r in rows] == [
        ("x_slurm_read_ms", "ok"),
        ("false_blames", "regression"),
    ]


def test_rows_show_keys_of_one_side_and_non_numbers_without_verdict() -> None:
    """Keys only in base or head, and text values, are shown with "-"."""
    base = Side(runs=[{"a_s": 1.0, "gone_s": 3.0, "release": "22.05"}])
    head = Side(runs=[{"a_s": 1.5, "new_s": 2.0, "release": "22.05", "ok": True}])
    rows = {r.key: r for r in compare_rows(base, head)}
    assert rows["a_s"].verdict == "regression"
    assert rows["a_s"].change_pct == pytest.approx(50.0)
    assert (rows["new_s"].verdict, rows["new_s"].shown_base) == ("-", "-")
    assert (rows["gone_s"].verdict, rows["gone_s"].shown_head) == ("-", "-")
    assert (rows["release"].verdict, rows["release"].shown_head) == ("-", '"22.05"')
    assert rows["ok"].verdict == "-"  # a bool is not a number


def test_the_spread_is_shown_from_two_rounds() -> None:
    """Median and [min..max] per side."""
    base = Side(runs=[{"a_s": 1.0}, {"a_s": 1.2}])
    (row,) = compare_rows(base, Side(runs=[{"a_s": 1.0}, {"a_s": 1.1}]))
    assert row.shown_base == "1.1 [1..1.2]"


def test_bench_arguments_follow_a_colon_split_as_a_shell_would() -> None:
    """NAME, NAME:ARG, 'NAME:ARG ARG', quotes; a bad name or quoting is a usage error."""
    assert parse_bench("health") == Bench("health")
    assert parse_bench("kube:1000,5000") == Bench("kube", ("1000,5000",))
    assert parse_bench("coordinator:0 1000") == Bench("coordinator", ("0", "1000"))
    assert parse_bench("revalidation:--runs 1").label == "revalidation --runs 1"
    for bad in ("Health", "bench.kube", "../x", "compare", "", "kube:'1000"):
        with pytest.raises(UsageError):
            parse_bench(bad)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ef15df2"], "required: BENCH"),
        (["ef15df2", "health", "--rounds", "0"], "--rounds must be 1 or more"),
        (["no-such-rev-xyz", "health"], "names no commit"),
        (["HEAD", "no_such_bench"], "neither tree has bench/no_such_bench.py"),
        (["HEAD", "soak_check"], "not a bench"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit status 2 and one line on stderr naming the problem; nothing is run."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def _tree(tmp_path: Path, body: str) -> Path:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__init__.py").write_text("")
    (tmp_path / "bench" / "fake.py").write_text(body)
    return tmp_path


def test_a_run_imports_its_own_tree_and_gives_its_last_line(tmp_path: Path) -> None:
    """cwd and PYTHONPATH are the tree: its bench package is the one run."""
    tree = _tree(
        tmp_path,
        "import json, sys, bench\nprint('a table')\n"
        "print(json.dumps({'where': bench.__file__, 'argv': sys.argv[1:]}))\n",
    )
    result = run_once(tree, Bench("fake", ("1", "2")), timeout_s=60)
    assert result == {"where": str(tree / "bench" / "__init__.py"), "argv": ["1", "2"]}


def test_a_failing_or_slow_run_is_an_error_not_a_crash(tmp_path: Path) -> None:
    """A non-zero exit names its status; a run past its timeout is stopped, its group too."""
    tree = _tree(
        tmp_path,
        "import subprocess, sys, time\n"
        "if sys.argv[1:] == ['fail']:\n    sys.exit('broken')\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        "time.sleep(60)\n",
    )
    with pytest.raises(BenchOutputError, match="exit status 1"):
        run_once(tree, Bench("fake", ("fail",)), timeout_s=60)
    began = time.monotonic()
    with pytest.raises(BenchOutputError, match="timed out after 1 s"):
        run_once(tree, Bench("fake"), timeout_s=1)
    assert time.monotonic() - began < 15
    child = int((tree / "child.pid").read_text())
    for _ in range(50):  # reaped by whoever inherited it
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)


def test_a_timeout_stops_the_run_even_where_sigint_is_ignored(tmp_path: Path) -> None:
    """Started under ``nohup ... &`` SIGINT is ignored, and children inherit that.

    Found by a full run started that way: the timed-out fake bench kept sleeping through
    the SIGINT, and the run stopped only at the SIGKILL 30 s later (a real bench would not
    have stopped its services). Each run gets SIGINT back at its default.
    """
    tree = _tree(tmp_path, "import time\ntime.sleep(60)\n")
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        began = time.monotonic()
        with pytest.raises(BenchOutputError, match="timed out after 1 s"):
            run_once(tree, Bench("fake"), timeout_s=1)
    finally:
        signal.signal(signal.SIGINT, before)
    assert time.monotonic() - began < 15


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"

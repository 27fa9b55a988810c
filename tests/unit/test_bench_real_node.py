"""bench/real_node.py's pure parts: its percentiles, its cold-log reading and its JSON keys."""

from __future__ import annotations

import pytest

from bench.real_node import KEYS, Sample, cold_figures, percentile, summary

TIMINGS = {
    "images_build_or_cache_s": 0.1,
    "node_ready_s": 14.2,
    "image_import_s": 40.0,
    "image_import_again_s": 0.0,
    "install_to_ready_s": 19.6,
}


def test_percentile_is_nearest_rank() -> None:
    """p50 of 1..10 is 5, p99 of fewer than 100 samples is the maximum, p100 the maximum."""
    samples = [float(x) for x in range(10, 0, -1)]
    assert percentile(samples, 0.5) == 5.0
    assert percentile(samples, 0.99) == 10.0
    assert percentile(samples, 1.0) == 10.0
    assert percentile([float(x) for x in range(1, 201)], 0.99) == 198.0
    assert percentile([7.0], 0.5) == 7.0


def test_percentile_of_nothing_is_an_error() -> None:
    """An empty run has no percentile (a figure of 0 would pass any target)."""
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 0.99)


def test_the_json_line_starts_with_the_issues_keys_and_their_values() -> None:
    """The keys issue 14 names come first, exactly spelled, from the samples and the timings."""
    real = [
        Sample(
            worker=f"rel-cpu-{i % 3}", drain_ms=100.0 + i, agent_began_ms=50.0, agent_changed=True
        )
        for i in range(30)
    ]
    real[0] = Sample(worker="rel-cpu-0", drain_ms=90.0, poll_ms=95.0, poll_read_ms=4.0)
    standin = [20.0 + i for i in range(30)]
    out = summary(real, standin, TIMINGS, {"load_real_start": [1.0, 1.0, 1.0]})
    assert tuple(out)[: len(KEYS)] == KEYS
    assert KEYS == (
        "real_drain_p50_ms",
        "real_drain_p99_ms",
        "standin_drain_p99_ms",
        "real_node_ready_s",
        "chart_install_ready_s",
    )
    figures = {
        "real_drain_p50_ms": 114.0,
        "real_drain_p99_ms": 129.0,
        "standin_drain_p99_ms": 49.0,
        "real_node_ready_s": 14.2,
        "chart_install_ready_s": 19.6,
        "real_samples": 30,
        "standin_samples": 30,
        "validated": 1,
        "poll_minus_stamp_max_ms": 5.0,
        "drains_by_agent": 29,
        "agent_began_p50_ms": 50.0,
        "real_alone_samples": 30,
        "agent_call_to_drain_p50_ms": 65.0,
        "load_real_start": [1.0, 1.0, 1.0],
    }
    assert {key: out[key] for key in figures} == figures


def test_cold_figures_come_from_toolchain_and_image_build_logs() -> None:
    """Each tool's `built in` line, the longest build.sh run and each image's last export."""
    log = "\n".join(
        [
            "[toolchain]   done in 1267.2 s",
            "[toolchain] kubernetes 1.36.3 built in 1329 s -> /root/.cache/slonkd/tools/k",
            "[toolchain] kubelet 1.36.3 built in 153 s -> /root/.cache/slonkd/tools/kubelet",
            "[toolchain] kwok built in 130 s -> /root/.cache/slonkd/tools/kwok-0.8.0",
            "[chart-images] built base in 0 s",
            "[chart-images] built slonkd worker in 146 s",
            "[chart-images] built slonkd controller worker login mosquitto in 242 s",
            "[chart-images] exported localhost/slonk/slonkd:4f956e9ab61170b3 in 10 s",
            "[chart-images] exported localhost/slonk/slurm-worker:81f72125a95c0c99 in 26 s",
            "[chart-images] exported localhost/slonk/slurm-worker:39169857b9d9db2f in 18 s",
        ]
    )
    assert cold_figures(log) == {
        "cold_tool_kubernetes_s": 1329.0,
        "cold_tool_kubelet_s": 153.0,
        "cold_tool_kwok_s": 130.0,
        "cold_images_build_s": 242.0,
        "cold_export_slonkd_s": 10.0,
        "cold_export_slurm_worker_s": 18.0,
        "cold_images_export_s": 28.0,
    }
    assert (
        cold_figures("[toolchain] all tools ready in 0.0 s\n[chart-images] built base in 0 s") == {}
    )

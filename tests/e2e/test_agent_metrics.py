"""The agent's /healthz, /readyz and /metrics, scraped from real agents around real transitions."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.workloads import GATED_PRESTOP
from tests.cli import slonkd
from tests.e2e.conftest import AgentProcess, Workers

pytestmark = [pytest.mark.kube, pytest.mark.slurm]


def get(agent: AgentProcess, path: str) -> tuple[int, str]:
    """Status and body of one GET on the agent's HTTP port."""
    try:
        with urllib.request.urlopen(f"{agent.http_url}{path}", timeout=5) as response:  # noqa: S310 - http://127.0.0.1
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(agent: AgentProcess, name: str, **labels: str) -> float:
    """One sample scraped from /metrics (0 when the series does not exist yet)."""
    status, text = get(agent, "/metrics")
    assert status == 200
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


def transitions(agent: AgentProcess, action: str) -> float:
    """``slonkd_transitions_total`` for ``action`` with cause pod-terminating."""
    return metric(agent, "slonkd_transitions_total", action=action, cause="pod-terminating")


@pytest.mark.prestop(GATED_PRESTOP)
def test_metrics_count_the_drain_of_a_deleted_pod_and_its_release(workers: Workers) -> None:
    """Probes answer; deleting the pod raises the drain counter, its next pod the release one.

    The preStop waits for a gate, so the drain counted is the agent's own.
    """
    agent = workers.agents["w-0"]
    assert get(agent, "/healthz") == (200, "ok\n")
    assert get(agent, "/readyz") == (200, "ready\n")
    assert metric(agent, "slonkd_ready") == 1
    assert transitions(agent, "drain") == 0
    uid = workers.delete_pod("w-0")
    wait_for("drain counted", lambda: transitions(agent, "drain") == 1, timeout_s=10)
    assert "Reason=slonkd:pod-terminating" in workers.show("w-0")
    (workers.standin.root.parent / "open").write_text("")
    workers.wait_recreated("w-0", uid)
    wait_for("release counted", lambda: transitions(agent, "release") == 1, timeout_s=30)
    wait_for("w-0 resumed", lambda: workers.slurm.node_states().get("w-0") == "idle", timeout_s=30)
    assert transitions(agent, "drain") == 1  # one drain, never repeated by the resyncs
    assert metric(agent, "slonkd_reconcile_duration_seconds_count", outcome="ok") >= 2
    assert metric(agent, "slonkd_informer_events_total", resource="pods") >= 2
    assert metric(agent, "process_resident_memory_bytes") > 0
    other = workers.agents["w-1"]
    assert transitions(other, "drain") == transitions(other, "release") == 0


def test_readiness_does_not_depend_on_slurmctld(workers: Workers) -> None:
    """With slurmctld stopped the reconciles fail (counted as transient) and /readyz stays 200."""
    agent = workers.agents["w-1"]
    failed = metric(agent, "slonkd_errors_total", kind="transient")
    workers.slurm.stop_slurmctld()
    try:
        wait_for(
            "a reconcile failed on slurmctld",
            lambda: metric(agent, "slonkd_errors_total", kind="transient") > failed,
            timeout_s=60,
        )
        assert get(agent, "/readyz") == (200, "ready\n")
        assert get(agent, "/healthz") == (200, "ok\n")
    finally:
        workers.slurm.start_slurmctld()
    ok = metric(agent, "slonkd_reconcile_duration_seconds_count", outcome="ok")
    wait_for(
        "reconciles succeed again",
        lambda: metric(agent, "slonkd_reconcile_duration_seconds_count", outcome="ok") > ok,
        timeout_s=60,
    )


def _agent_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    config = {
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "current-context": "c",
    }
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    return {
        "PATH": os.environ["PATH"],
        "POD_NAME": "w-0",
        "POD_NAMESPACE": "ns",
        "NODE_NAME": "n",
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        **extra,
    }


def test_bad_metrics_port_exits_2_with_one_line(tmp_path: Path) -> None:
    """A metrics port that is not a port number is a bad setting: exit 2, one line."""
    proc = slonkd("agent", env=_agent_env(tmp_path, SLONKD_METRICS_PORT="99999"), timeout_s=30)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "metrics_port '99999' is not a port number" in proc.stderr


def test_metrics_port_in_use_exits_at_once_naming_it(tmp_path: Path) -> None:
    """A port someone else holds stops the agent at start (exit 1) with the address logged."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _agent_env(
            tmp_path, SLONKD_METRICS_PORT=str(port), SLONKD_METRICS_ADDRESS="127.0.0.1"
        )
        proc = subprocess.run(
            [sys.executable, "-m", "slonkd.cli.main", "agent"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert proc.returncode == 1
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    (failed,) = [e for e in lines if e["event"] == "agent.cannot_serve"]
    assert f"cannot listen on 127.0.0.1:{port}" in failed["error"]

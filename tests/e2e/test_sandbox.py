"""``slonkd sandbox up``, ``demo`` and ``down`` end to end, in a private directory.

A real Prometheus scrapes the sandbox through the demo: every query of the chart's Grafana
dashboard must return data after the scenes.

The commands run as a user runs them (separate processes). After the demo the test checks
the states the demo claims through ``scontrol`` and the apiserver itself, and after ``down``
that no process of the sandbox is left.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.dashboard import (
    FIRST_EVENT_PANELS,
    METRIC_NAME,
    evaluate,
    exposed,
    queries,
    sandbox_targets,
    sandbox_urls,
)
from slonkd_sandbox.prometheus import Prometheus
from slonkd_sandbox.sandbox.demo import OPERATOR_REASON
from slonkd_sandbox.sandbox.run import commands, descendants, proc_start_time
from tests.e2e.sandbox_cli import (
    private_sandbox_dir,
    processes_naming,
    sandbox_api,
    slonkd,
    up_sandbox,
)

pytestmark = [pytest.mark.kube, pytest.mark.slurm, pytest.mark.mqtt]


@pytest.fixture
def sandbox_dir() -> Iterator[Path]:
    """A private, short directory (unix socket paths); the sandbox in it is always downed."""
    with private_sandbox_dir("sbx-", down_timeout_s=180) as root:
        yield root


def test_sandbox_up_demo_down(sandbox_dir: Path) -> None:
    """up -> every service, coordinator and agents; demo's claims hold; down leaves nothing."""
    root = sandbox_dir
    hints = ("source ", "sinfo -R", "KUBECONFIG=", "SLURM_CONF=", "coordinator log")
    state = up_sandbox(root, timeout_s=900, hints=hints)
    api = sandbox_api(state)
    ns, workers = state["namespace"], state["workers"]
    env = {**os.environ, "SLURM_CONF": state["slurm_conf"]}

    def scontrol(*argv: str) -> str:
        return subprocess.run(
            ["scontrol", "-o", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout

    def job(job_id: str) -> dict[str, str]:
        return dict(t.split("=", 1) for t in scontrol("show", "job", job_id).split() if "=" in t)

    def pods() -> dict[str, dict[str, Any]]:
        items = api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        return {p["metadata"]["name"]: p for p in items}

    # up: the processes it claims run, among them the coordinator and one agent per pod
    supervisor = state["supervisor"]
    assert proc_start_time(supervisor["pid"]) == supervisor["start"]
    cmds = commands(descendants(supervisor["pid"]))
    assert sum("slonkd.cli.main coordinator" in c for c in cmds) == 1, cmds
    assert sum("slonkd.cli.main agent" in c for c in cmds) == len(workers), cmds
    before = pods()
    assert sorted(before) == workers
    sts_path = f"/apis/apps/v1/namespaces/{ns}/statefulsets/{state['statefulset']}"
    old_revision = api.request("GET", sts_path)["status"]["updateRevision"]

    # a real Prometheus scrapes the coordinator and every agent through the demo
    prom = Prometheus(root.parent / "prometheus", sandbox_targets(state))
    prom.start()
    try:
        prom.wait_scraped()
        demo = slonkd("sandbox", "demo", "--dir", str(root), timeout_s=900)
        assert demo.returncode == 0, demo.stdout[-4000:] + demo.stderr[-2000:]
        # every query of the chart's Grafana dashboard returns data after the scenes (those of
        # counters with no series before their first event: their metrics are exposed)
        answers = evaluate(prom, queries())
        by_cause = next(q for q in queries() if q.panel == "SLURM changes by cause")
        spread = prom.query(f"max_over_time(({by_cause.inner})[10m:2s])")
        by_action = next(q for q in queries() if q.panel == "SLURM changes by action")
        # over the demo, not now: the agents that released have been replaced since
        actions = prom.query(f"max_over_time(({by_action.inner})[10m:2s])")
    finally:
        prom.stop()
    empty = [q for q, result in answers.items() if not result]
    assert {q.panel for q in empty} <= FIRST_EVENT_PANELS, [(q.panel, q.inner) for q in empty]
    text = exposed([f"{u}/metrics" for u in sandbox_urls(state)])
    for q in empty:
        for name in METRIC_NAME.findall(q.inner):
            assert f"# HELP {name}" in text, name
    # the agents' drains of their own terminating pods are counted (a new series' first change)
    peaks = {r["metric"]["cause"]: float(r["value"][1]) for r in spread}
    assert peaks.get("pod-terminating", 0) >= 1, peaks
    changes = {r["metric"]["action"] for r in actions if float(r["value"][1]) >= 1}
    assert {"drain", "release", "cordon"} <= changes, changes
    record = json.loads((root / "demo.json").read_text())
    assert record["ok"] is True

    # 1 + 3: the jobs were requeued (by the preStop hook, by the rollout), never killed
    for job_id in (record["pod_deleted"]["job"], record["rollout"]["job"]):
        fields = job(job_id)
        assert int(fields["Restarts"]) >= 1, fields
        assert fields["JobState"] in ("PENDING", "RUNNING"), fields
    # 3: every pod replaced and on the StatefulSet's new revision, Running and Ready
    after = pods()
    new_revision = api.request("GET", sts_path)["status"]["updateRevision"]
    assert new_revision != old_revision
    for name, pod in after.items():
        assert pod["metadata"]["uid"] != before[name]["metadata"]["uid"], name
        assert pod["metadata"]["labels"]["controller-revision-hash"] == new_revision, name
        assert pod["status"]["phase"] == "Running", name
    # 2: the failed node's K8s node is cordoned, tainted and marked; an Event says why; the
    # pod was evicted and runs elsewhere
    failure = record["slurm_failure"]
    knode = api.request("GET", f"/api/v1/nodes/{failure['kube_node']}")
    assert knode["spec"].get("unschedulable") is True
    assert "slonk.dev/unhealthy" in {t["key"] for t in knode["spec"].get("taints") or []}
    conditions = {c["type"]: c["status"] for c in knode["status"]["conditions"]}
    assert conditions["SlurmHealthy"] == "False"
    events = api.request("GET", "/api/v1/namespaces/default/events")["items"]
    assert any(
        e["reason"] == "SlurmUnhealthy" and e["involvedObject"]["name"] == failure["kube_node"]
        for e in events
    )
    assert after[failure["pod"]]["spec"]["nodeName"] != failure["kube_node"]
    # 4: the operator's drain is still the operator's; the other nodes are in service
    drained = record["operator_drain"]["pod"]
    node = scontrol("show", "node", drained)
    assert "DRAIN" in node.split("State=", 1)[1].split()[0]
    assert f"Reason={OPERATOR_REASON}" in node
    sinfo = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N|%t|%E"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split("\n")
    rows = {line.split("|")[0]: line.split("|")[1:] for line in sinfo if line}
    for name in workers:
        if name != drained:
            assert rows[name][1] == "none", rows
            assert rows[name][0] in ("idle", "mix", "alloc"), rows

    # slonkd status reaches the sandbox's coordinator: the rollout is complete
    status = slonkd("status", "-o", "json", "--url", state["coordinator_url"], timeout_s=30)
    assert status.returncode == 0, status.stderr
    rollout = json.loads(status.stdout)["rollout"]
    assert rollout["complete"] is True, rollout
    assert rollout["updated"] == len(workers), rollout

    # down: stops exactly what up started, and nothing is left behind
    started = state["processes"] + descendants(supervisor["pid"])
    down = slonkd("sandbox", "down", "--dir", str(root), timeout_s=180)
    assert down.returncode == 0, down.stdout + down.stderr
    alive = [p for p in started if proc_start_time(p["pid"]) == p["start"]]
    assert not alive, alive
    assert proc_start_time(supervisor["pid"]) != supervisor["start"]
    assert processes_naming(root) == []
    again = slonkd("sandbox", "down", "--dir", str(root), timeout_s=60)
    assert again.returncode == 0


def test_up_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    """A directory with someone else's files is never wiped; nothing is started."""
    theirs = tmp_path / "notes.txt"
    theirs.write_text("mine")
    up = slonkd("sandbox", "up", "--dir", str(tmp_path), "--workers", "1", timeout_s=120)
    assert up.returncode != 0
    assert "was not made by a sandbox" in up.stdout + up.stderr
    assert theirs.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]

"""``slonkd sandbox up --real``, ``demo`` and ``down`` end to end: the chart on a real node.

The commands run as a user runs them (separate processes, as root). ``up --real`` installs
the chart on a real kubelet node (containerd, runc, CoreDNS; the images ``container/build.sh``
makes); the demo plays its four scenes through ``kubectl exec``, SSH as the user and the
apiserver; the test checks the demo's record and, itself, the states the demo left; after
``down`` no process, network namespace or mount of the sandbox is left. One test, several
minutes (about 3 to start with the images cached, 5 to 8 for the demo).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slonkd_sandbox.sandbox.demo import OPERATOR_REASON
from slonkd_sandbox.sandbox.run import descendants, proc_start_time
from tests.e2e.sandbox_cli import (
    private_sandbox_dir,
    processes_naming,
    sandbox_api,
    slonkd,
    up_sandbox,
)

pytestmark = [
    pytest.mark.kube,
    pytest.mark.real,
    pytest.mark.timeout(2400),
    pytest.mark.skipif(os.geteuid() != 0, reason="the real node needs root"),
]


def leftovers(root: Path, netns: str) -> list[str]:
    """Live processes naming ``root``, mounts below it, the node's network namespace."""
    left = [f"process {pid}" for pid in processes_naming(root)]
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    left += [f"mount {m.split()[4]}" for m in mounts if m.split()[4].startswith(f"{root}/")]
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.split()
    if netns in listed:
        left.append(f"netns {netns}")
    return left


@pytest.fixture
def sandbox_dir() -> Iterator[Path]:
    """A private, short directory; the sandbox in it is always downed."""
    with private_sandbox_dir("sbr-", down_timeout_s=400) as root:
        yield root


def test_sandbox_up_real_demo_down(sandbox_dir: Path) -> None:
    """up --real -> the chart Ready on a real node; demo's claims hold; down leaves nothing."""
    root = sandbox_dir
    hints = ("source ", "slurm sinfo -R", "login sbatch", "nsenter --net=", "kubectl -n ")
    state = up_sandbox(root, "--real", timeout_s=1900, hints=hints)
    assert state["mode"] == "real"
    api = sandbox_api(state)
    ns, workers = state["namespace"], state["workers"]
    kubectl = [state["kubectl"], f"--kubeconfig={state['kubeconfig']}"]
    ctl = state["controller"]

    def slurm(*argv: str) -> str:
        return subprocess.run(
            [*kubectl, "exec", "-n", ns, ctl["pod"], "-c", ctl["container"], "--", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout

    # up: every worker pod runs slurmd and the agent sidecar in containers, not as processes
    pods = api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    worker_pods = {
        p["metadata"]["name"]: p
        for p in pods
        if p["metadata"]["labels"].get("app.kubernetes.io/component") == "slurmd"
    }
    assert sorted(worker_pods) == workers
    assert all(p["spec"]["nodeName"] == state["kube_nodes"][0] for p in worker_pods.values())
    supervisor = state["supervisor"]
    cmds = [p["cmd"] for p in descendants(supervisor["pid"])]
    assert not any("slonkd.cli.main agent" in c for c in cmds), cmds
    sts_path = f"/apis/apps/v1/namespaces/{ns}/statefulsets/{state['statefulset']}"
    old_revision = api.request("GET", sts_path)["status"]["updateRevision"]

    demo = slonkd("sandbox", "demo", "--dir", str(root), timeout_s=1500)
    assert demo.returncode == 0, demo.stdout[-5000:] + demo.stderr[-2000:]
    record = json.loads((root / "demo.json").read_text())
    assert record["ok"] is True
    assert record["mode"] == "real"

    # 1: the job was requeued by the preStop hook, never killed (then cancelled by scene 3)
    first = record["pod_deleted"]["job"]
    fields = dict(
        t.split("=", 1) for t in slurm("scontrol", "-o", "show", "job", first).split() if "=" in t
    )
    assert int(fields["Restarts"]) >= 1, fields
    # 3: every worker pod replaced by helm upgrade's revision; the job completed
    new_revision = api.request("GET", sts_path)["status"]["updateRevision"]
    assert new_revision != old_revision
    after = {
        p["metadata"]["name"]: p
        for p in api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        if p["metadata"]["name"] in workers
    }
    for name, pod in after.items():
        assert pod["metadata"]["uid"] != worker_pods[name]["metadata"]["uid"], name
        assert pod["metadata"]["labels"]["controller-revision-hash"] == new_revision, name
    assert record["rollout"]["setting"].startswith("agent.health.checks.fast_period_s=")
    # 2: the SLURM failure marked the only node (then the operator uncordoned it)
    failure = record["slurm_failure"]
    assert failure["evictions"][failure["pod"]] <= 1, failure
    events = api.request("GET", "/api/v1/events")["items"]
    assert any(
        e["reason"] == "SlurmUnhealthy" and e["involvedObject"]["name"] == failure["kube_node"]
        for e in events
    )
    # 4: the operator's drain is still the operator's
    drained = record["operator_drain"]["pod"]
    node = slurm("scontrol", "-o", "show", "node", drained)
    assert "DRAIN" in node.split("State=", 1)[1].split()[0]
    assert f"Reason={OPERATOR_REASON}" in node

    # down: the node's tear-down leaves nothing behind
    netns = state["node"]["netns"]
    down = slonkd("sandbox", "down", "--dir", str(root), timeout_s=400)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "left behind" not in down.stdout, down.stdout
    assert proc_start_time(supervisor["pid"]) != supervisor["start"]
    assert leftovers(root, netns) == []
    final = json.loads((root / "state.json").read_text())
    assert final["leftovers"] == []
    again = slonkd("sandbox", "down", "--dir", str(root), timeout_s=60)
    assert again.returncode == 0

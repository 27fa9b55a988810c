"""slonkd prestop as the preStop hook of a real (kwok) pod bound to a real slurmd.

The kubelet stand-in runs the pod's preStop command, then stops its slurmd, then finishes
the deletion. With ``slonkd prestop`` the job is requeued before the slurmd dies and the
node is DOWN with slonkd's reason; with a preStop that does nothing, neither is true (the
same assertions fail: the test can fail).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from slonkd.testing.kube import KubeCluster
from slonkd.testing.kubelet import KubeletStandIn
from slonkd.testing.procs import wait_for
from slonkd.testing.slurm import SlurmCluster, SlurmLayout
from slonkd.testing.workloads import worker_statefulset
from tests.e2e.conftest import GRACE_S, PRESTOP

pytestmark = [pytest.mark.kube, pytest.mark.slurm]


def _job(slurm: SlurmCluster, job_id: str) -> tuple[str, int]:
    text = slurm.run("scontrol", "-o", "show", "job", job_id).stdout
    state = re.search(r"JobState=(\S+)", text)
    restarts = re.search(r"Restarts=(\d+)", text)
    return (state.group(1) if state else "?", int(restarts.group(1)) if restarts else -1)


@pytest.mark.parametrize("prestop_enabled", [True, False], ids=["slonkd-prestop", "no-prestop"])
def test_deleted_pod_requeues_its_job_and_downs_its_node(
    kube: KubeCluster,
    namespace: str,
    unique: Callable[[str], str],
    slurm_factory: Callable[..., SlurmCluster],
    tmp_path: Path,
    prestop_enabled: bool,
) -> None:
    """Delete a worker pod with a requeueable job running on its node.

    With slonkd prestop: when the slurmd is stopped the job is already requeued (Restarts 1,
    never FAILED, CANCELLED or NODE_FAIL) and the node is DOWN with slonkd's reason, not
    "Not responding". Without it, the job is still believed RUNNING on a dead node.
    """
    slurm = slurm_factory(SlurmLayout(nodes=("w-0",), autostart=False))
    label = {"slonk.dev/test": namespace}
    kube.add_fake_nodes([unique("pre")], labels=label)
    with KubeletStandIn(
        kube=kube, slurm=slurm, namespace=namespace, root=tmp_path / "k"
    ) as standin:
        sts = worker_statefulset(
            "w",
            replicas=1,
            node_selector=label,
            grace_s=GRACE_S,
            prestop=PRESTOP if prestop_enabled else ["/bin/true"],
        )
        kube.api.request("POST", f"/apis/apps/v1/namespaces/{namespace}/statefulsets", sts)
        slurm.wait_idle(["w-0"], timeout_s=60)
        job = slurm.run(
            "sbatch",
            "--parsable",
            "--requeue",
            "-w",
            "w-0",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 300",
        ).stdout.strip()
        wait_for("job running", lambda: _job(slurm, job)[0] == "RUNNING", timeout_s=30)
        uid = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/pods/w-0")["metadata"]["uid"]

        kube.api.request(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods/w-0", {"gracePeriodSeconds": GRACE_S}
        )
        wait_for(
            "slurmd stopped",
            lambda: any(
                e["event"] == "slurmd.stopped" and e.get("uid") == uid for e in standin.events()
            ),
            timeout_s=GRACE_S + 20,
        )
        state, restarts = _job(slurm, job)
        node = slurm.run("scontrol", "-o", "show", "node", "w-0").stdout
        requeued = state in {"PENDING", "REQUEUED", "REQUEUE_HOLD"} and restarts >= 1
        down_by_slonkd = "State=DOWN" in node and "Reason=slonkd:pod-terminating" in node
        assert state not in {"FAILED", "CANCELLED", "NODE_FAIL"} or not prestop_enabled
        if prestop_enabled:
            assert requeued, (state, restarts)
            assert down_by_slonkd, node
            assert "Not responding" not in node
        else:
            assert not requeued, (state, restarts)
            assert not down_by_slonkd, node
            assert state == "RUNNING"

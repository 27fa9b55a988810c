"""The kubelet stand-in binds pods to slurmd: preStop first, then the slurmd stops."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kubelet import KubeletStandIn
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.cluster import SlurmLayout
from slonkd_sandbox.workloads import worker_statefulset
from tests.rig import Rig

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

# The preStop command: note the pod's name, then wait for the test to open the gate.
PRESTOP = (
    "import os, pathlib, time\n"
    "d = pathlib.Path(os.environ['GATE_DIR'])\n"
    "(d / 'prestop-ran').write_text(os.environ['POD_NAME'] + ' ' + os.environ['SLURM_CONF'])\n"
    "while not (d / 'open').exists():\n"
    "    time.sleep(0.05)\n"
)


def _pod(kube: KubeCluster, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(kube.api.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}"))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def _kinds(standin: KubeletStandIn, uid: str) -> list[str]:
    return [e["event"] for e in standin.events() if e.get("uid") == uid]


def _ps() -> list[str]:
    out = subprocess.run(
        ["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True
    ).stdout
    return [line.strip() for line in out.splitlines()]


def test_terminating_pod_waits_for_prestop_then_its_slurmd_stops(
    rig: Rig,
) -> None:
    """A deleted pod stays Terminating while its preStop runs; its slurmd stops only after."""
    slurm = rig.slurm_factory(SlurmLayout(nodes=("w-0",), autostart=False))
    label = {"slonk.dev/test": rig.namespace}
    rig.kube.add_fake_nodes([rig.unique("bind")], labels=label)
    gate = rig.tmp_path / "gate"
    gate.mkdir()
    with rig.standin(slurm, "k") as standin:
        sts = worker_statefulset(
            "w",
            replicas=1,
            node_selector=label,
            prestop=[sys.executable, "-c", PRESTOP],
            grace_s=30,
            env={"GATE_DIR": str(gate)},
        )
        rig.create_statefulset(sts)
        slurm.wait_idle(["w-0"], timeout_s=60)
        first = _pod(rig.kube, rig.namespace, "w-0")
        assert first is not None
        uid = first["metadata"]["uid"]
        slurm.run("sbatch", "-o", "/dev/null", "-w", "w-0", "--wrap", "sleep 4343")
        wait_for("job step running", lambda: "sleep 4343" in _ps(), timeout_s=30)

        rig.kube.api.request(
            "DELETE", f"/api/v1/namespaces/{rig.namespace}/pods/w-0", {"gracePeriodSeconds": 30}
        )
        wait_for("preStop ran", (gate / "prestop-ran").exists, timeout_s=30)
        assert (gate / "prestop-ran").read_text() == f"w-0 {slurm.conf}"
        terminating = _pod(rig.kube, rig.namespace, "w-0")
        assert terminating is not None
        assert terminating["metadata"]["uid"] == uid
        assert terminating["metadata"].get("deletionTimestamp")
        assert slurm.slurmd_running("w-0")
        assert "sleep 4343" in _ps()

        (gate / "open").write_text("")
        wait_for(
            "pod deletion finished", lambda: "pod.deleted" in _kinds(standin, uid), timeout_s=60
        )
        steps = _kinds(standin, uid)
        order = [
            "pod.terminating",
            "prestop.started",
            "prestop.exited",
            "slurmd.stopped",
            "pod.deleted",
        ]
        assert [s for s in steps if s in order] == order
        # The node's processes died with its slurmd, as when a kubelet kills the container.
        assert "sleep 4343" not in _ps()

        def recreated() -> bool:
            pod = _pod(rig.kube, rig.namespace, "w-0")
            return pod is not None and pod["metadata"]["uid"] != uid

        wait_for("StatefulSet recreated w-0", recreated, timeout_s=60)
        second = _pod(rig.kube, rig.namespace, "w-0")
        assert second is not None
        wait_for(
            "slurmd started for the new pod",
            lambda: "slurmd.started" in _kinds(standin, second["metadata"]["uid"]),
            timeout_s=60,
        )
        assert slurm.slurmd_running("w-0")

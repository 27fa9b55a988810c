"""A managed GPU pool's tolerated taint on the real node is its nature, not maintenance.

Issue 37 item 1. The real kubelet node is tainted as every node of a managed GPU pool is
(``nvidia.com/gpu=present:NoSchedule``) before anything is installed, and the chart is
installed with a matching toleration in ``pools[].tolerations``; the release's other pods
(slurmctld, login, coordinators, mosquitto) get it too, only because this node is the
cluster's only one (a site runs them on untainted nodes). Otherwise installed as in
``test_chart_real`` (:func:`slonkd_sandbox.chart_real.install`, with its wide budget: the
two workers of the one K8s node are the whole pool). Then, in order on the one release:

1. the coordinator drains nothing, opens no breaker and logs no refusal, and ``slonkd
   explain`` says why (the taint is tolerated);
2. a maintenance taint the pool does not tolerate drains both workers
   ``k8s-tainted:maint``; once it is lifted they come back.

The maintenance taint is NoSchedule: a NoExecute one would evict every pod of this one-node
cluster (slurmctld and the coordinators with the workers), and the workers' replacements
would find no node to run on. A NoExecute maintenance taint on a GPU pool's node is in
``tests/unit/test_decide_tolerations.py``; the breaker that the old rule opened at install
under the default budget (10 %, mass 20 %) in ``tests/unit/test_coordinator_pass.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.chart_logs import json_lines
from slonkd_sandbox.chart_real import RELEASE, Obj, Release, install, workers
from slonkd_sandbox.procs import HarnessError, wait_for
from slonkd_sandbox.realnode import RealNode
from tests.e2e.chart_install import reported

pytestmark = [pytest.mark.kube, pytest.mark.real, pytest.mark.timeout(1200)]

WORKERS = workers(2)
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
"""The taint of every node of a managed GPU pool."""
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
"""The pool's toleration of it, as a GPU pool's values give it."""
MAINT = "example.com/maint"
"""A node maintenance's taint, which the pool does not tolerate."""
COMPONENTS = ("controller", "login", "coordinator", "mosquitto")
"""The chart's other pods, each with its own ``tolerations`` value."""
COORDINATOR = {"app.kubernetes.io/component": "coordinator"}
WORKER = {"app.kubernetes.io/component": "slurmd"}


def _taint_like_a_gpu_pool(node: RealNode) -> None:
    taint = f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}"
    node.cluster.kubectl("taint", "nodes", node.name, taint)


@pytest.fixture(scope="module")
def tolerated(session_root: Path) -> Iterator[Release]:
    """The chart installed on a real node tainted like a GPU pool's; every pod Ready."""
    tolerations = json.dumps([TOLERATION])
    installing = install(
        session_root,
        replicas=len(WORKERS),
        started=_taint_like_a_gpu_pool,
        set_json=(
            f"pools[0].tolerations={tolerations}",  # into the harness's one pool, kept whole
            *(f"{c}.tolerations={tolerations}" for c in COMPONENTS),
        ),
    )
    with reported("chart-tolerated", installing) as release:
        yield release


def _node_obj(deployed: Release) -> Obj:
    return dict(deployed.kube.api.request("GET", f"/api/v1/nodes/{deployed.node.name}"))


def _leader(deployed: Release) -> str:
    lease = deployed.kube.api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{deployed.ns}/leases/{RELEASE}-coordinator"
    )
    return str(lease["spec"]["holderIdentity"])


def _slonkd(deployed: Release, *argv: str) -> dict[str, Any]:
    """``slonkd ARGV`` on the leader (status, explain), its JSON answer."""
    out = deployed.exec(_leader(deployed), "coordinator", "slonkd", *argv)
    return dict(json.loads(out))


def _coordinator_log(deployed: Release) -> list[dict[str, Any]]:
    """Both coordinators' JSON log lines (the lease may have moved)."""
    return [
        line
        for pod in deployed.pods(**COORDINATOR)
        for line in json_lines(deployed.logs(pod["metadata"]["name"], "coordinator"))
    ]


def _reasons(deployed: Release) -> dict[str, str]:
    """``STATE|REASON`` of each worker's SLURM node."""
    return {w: deployed.node_line(w) for w in WORKERS}


def _wait_reasons(deployed: Release, what: str, want: Any, timeout_s: float) -> None:
    seen: dict[str, str] = {}

    def done() -> bool:
        seen.clear()
        seen.update(_reasons(deployed))
        return all(want(line) for line in seen.values())

    try:
        wait_for(what, done, timeout_s=timeout_s, interval_s=1)
    except HarnessError:
        pytest.fail(f"{what}: {seen}\n{deployed.diagnose()}")


def _idle(line: str) -> bool:
    """Idle and not drained (sinfo shows a drained idle node as ``drained``).

    The reason column is not read: SLURM 24.11 keeps an old reason's text after a resume.
    """
    return line.partition("|")[0] == "idle"


def test_the_pools_tolerated_taint_drains_nothing_and_opens_no_breaker(tolerated: Release) -> None:
    """Node tainted nvidia.com/gpu=present:NoSchedule, tolerated: idle workers, no breaker.

    Before the fix the first pass wanted both workers drained ``k8s-tainted:gpu``; under the
    default budget that is a mass event and opens the breaker at install. Here the workers
    stay idle (not drained), the leader's ``slonkd status`` shows the breaker closed and no
    slonkd cause or pending action, ``slonkd explain`` names the tolerated taint, and neither
    coordinator logged a refusal, an opened breaker or a ``k8s-tainted`` drain.
    """
    taints = _node_obj(tolerated)["spec"].get("taints", [])
    assert any({k: t.get(k) for k in GPU_TAINT} == GPU_TAINT for t in taints), taints
    for pod in tolerated.pods(**WORKER):
        assert TOLERATION in pod["spec"].get("tolerations", []), pod["spec"].get("tolerations")
    _wait_reasons(tolerated, "every worker idle", _idle, timeout_s=90)
    before = _slonkd(tolerated, "status", "-o", "json")["passes"]["count"]
    wait_for(  # the leader looked again since: nothing drained is not for want of a pass
        "two more passes of the leader",
        lambda: _slonkd(tolerated, "status", "-o", "json")["passes"]["count"] >= before + 2,
        timeout_s=120,
        interval_s=2,
    )
    status = _slonkd(tolerated, "status", "-o", "json")
    assert not status["state"].get("breakerOpen"), status["state"]
    rows = {row["node"]: row for row in status["nodes"]}
    for w in WORKERS:
        assert (rows[w]["causes"], rows[w]["drift"]) == ([], []), rows[w]
        notes = _slonkd(tolerated, "explain", w)["decision"]["notes"]
        assert any("nvidia.com/gpu" in n and "tolerated" in n for n in notes), notes
    assert all(_idle(line) for line in _reasons(tolerated).values()), _reasons(tolerated)
    said = [
        e
        for e in _coordinator_log(tolerated)
        if e.get("event") in ("budget.refused", "budget.breaker_opened")
        or (e.get("event") == "slurm.nodes_drain" and "k8s-tainted" in str(e.get("cause")))
    ]
    assert said == [], said[:5]


def test_a_maintenance_taint_the_pool_does_not_tolerate_drains_the_workers(
    tolerated: Release,
) -> None:
    """example.com/maint=ticket-37:NoSchedule beside the GPU taint: both workers drained for it.

    The drain's reason names the untolerated taint's key (``slonkd:k8s-tainted:maint``), not
    the tolerated one; the breaker stays closed (the harness's budget admits both). Once the
    maintenance taint is lifted, slonkd releases them and they are idle again.
    """
    name = tolerated.node.name
    tolerated.kube.kubectl("taint", "nodes", name, f"{MAINT}=ticket-37:NoSchedule")
    _wait_reasons(
        tolerated,
        "every worker drained k8s-tainted:maint",
        lambda line: "slonkd:k8s-tainted:maint" in line,
        timeout_s=60,
    )
    assert not _slonkd(tolerated, "status", "-o", "json")["state"].get("breakerOpen")
    drains = [
        e
        for e in _coordinator_log(tolerated)
        if e.get("event") == "slurm.nodes_drain" and "k8s-tainted" in str(e.get("cause"))
    ]
    assert {str(e.get("cause")) for e in drains} == {"k8s-tainted:maint"}, drains
    tolerated.kube.kubectl("taint", "nodes", name, f"{MAINT}-")
    _wait_reasons(tolerated, "every worker idle again", _idle, timeout_s=60)

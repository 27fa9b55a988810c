"""A node that keeps failing multi-node jobs is drained ``slonkd:job-failures``, its partners not.

Real slurmctld, 20 slurmd, kube-apiserver, kwok nodes and a coordinator (the ``fleet`` of
test_coordinator) with ``job_blame`` on: 2-node batch jobs run a script that exits 42 (the
policy's infrastructure exit code) whenever the bad node is one of its nodes, with a
different partner each time; jobs without it succeed. After K=3 such failures the bad node
is drained, inside the budget, with a JobFailures Event carrying the job ids and partners,
the same evidence in ``slonkd explain`` and the drain in the audit log with its cause; the
partners are never drained. An operator's resume ends the blame: the node is not drained
again for the same jobs.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from slonkd_sandbox.procs import wait_for
from tests.e2e import coordinator_fleet
from tests.e2e.coordinator_fleet import BASE_CONFIG, Fleet

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

coordinator_config = coordinator_fleet.coordinator_config
fleet_slurm = coordinator_fleet.fleet_slurm
fleet = coordinator_fleet.fleet

BAD = "w-5"
PARTNERS = ["w-1", "w-2", "w-3"]
JOB_BLAME = {
    "min_failures": 3,
    "infrastructure_exit_codes": [42],
    # every job here is the harness's one user: no bound on the users of an exit code (the
    # default, 2, keeps one user from draining the nodes they pick: tests/unit)
    "exit_code_min_users": 1,
    "poll_s": 1,
    # 20 nodes and a dozen jobs: a small window needs a lenient significance (a real
    # cluster's window holds thousands of jobs; the default is 1e-4)
    "max_p_value": 0.5,
}
SCRIPT = (
    'for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do '
    f'[ "$n" = {BAD} ] && exit 42; done; exit 0'
)


def _run_job(f: Fleet, nodes: list[str]) -> int:
    out = f.slurm.run(
        "sbatch", "--parsable", "--no-requeue", "-o", "/dev/null", "-N", str(len(nodes)),
        "-w", ",".join(nodes), "--wrap", SCRIPT,
    ).stdout  # fmt: skip
    return int(out.strip().split(";")[0])


def _ended(f: Fleet, job: int) -> str:
    """The job's state once it ended ("" while it runs)."""
    state = f.slurm.run("squeue", "-h", "-t", "all", "-j", str(job), "-o", "%T").stdout.strip()
    return state if state in {"COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED"} else ""


def _wait_ended(f: Fleet, job: int) -> None:
    wait_for(f"job {job} ended", lambda: bool(_ended(f, job)), timeout_s=60)


def _seen_failed(f: Fleet) -> set[int]:
    return {e["job"] for e in f.events("job_blame.job_failed")}


def _events(f: Fleet, kube_node: str) -> list[dict[str, Any]]:
    items = (
        f.kube.api.request("GET", "/api/v1/namespaces/default/events")["items"]
        + f.kube.api.request("GET", f"/api/v1/namespaces/{f.namespace}/events")["items"]
    )
    return [
        e
        for e in items
        if e.get("reason") == "JobFailures" and e["involvedObject"]["name"] == kube_node
    ]


@pytest.mark.parametrize("coordinator_config", [{**BASE_CONFIG, "job_blame": JOB_BLAME}])
@pytest.mark.parametrize("fleet_slurm", ["22.05", "24.11"], indirect=True)
def test_a_node_failing_jobs_with_different_partners_is_drained_its_partners_not(
    fleet: Fleet,
) -> None:
    """Two failures drain nothing; the third drains the bad node with the evidence.

    Its partners and every other node stay in service; an operator's resume ends the blame.
    """
    kube_node = next(n for n in fleet.kube_nodes if BAD in fleet.pods_on(n))
    good = [f"w-{i}" for i in range(6, 18)]
    successes = [_run_job(fleet, [good[i], good[i + 1]]) for i in range(0, len(good), 2)]
    failures = [_run_job(fleet, [BAD, p]) for p in PARTNERS[:2]]
    for job in successes + failures:
        _wait_ended(fleet, job)
    assert {_ended(fleet, j) for j in failures} == {"FAILED"}
    assert {_ended(fleet, j) for j in successes} == {"COMPLETED"}
    wait_for("two failures seen", lambda: _seen_failed(fleet) >= set(failures), timeout_s=20)
    time.sleep(3)  # passes ran with them: still nothing drained for two
    assert all(r == "none" for r in fleet.reasons().values()), fleet.reasons()

    third = _run_job(fleet, [BAD, PARTNERS[2]])
    _wait_ended(fleet, third)
    assert _ended(fleet, third) == "FAILED"  # its script's exit, not a lost batch step
    wait_for(
        f"{BAD} drained for job-failures",
        lambda: fleet.reasons()[BAD].startswith("slonkd:job-failures"),
        timeout_s=30,
    )
    assert fleet.slurm.node_states()[BAD] in {"drained", "draining"}
    time.sleep(2)
    reasons = fleet.reasons()
    assert all(reasons[n] == "none" for n in reasons if n != BAD), reasons

    ids = ",".join(str(j) for j in [*failures, third])
    wait_for("the JobFailures Event", lambda: bool(_events(fleet, kube_node)), timeout_s=20)
    message = _events(fleet, kube_node)[0]["message"]
    assert "job-failures" in message
    assert f"jobs {ids}" in message, message
    assert "3 different partners" in message, message

    explained = fleet.slonkd("explain", BAD)
    assert explained.returncode == 0, explained.stderr
    body = json.loads(explained.stdout)
    assert f"jobs {ids}" in body["view"]["job_blame"]
    assert any("blamed for failed jobs" in n for n in body["decision"]["notes"])
    status = json.loads(fleet.slonkd("status", "-o", "json").stdout)
    assert list(status["job_blame"]["blamed"]) == [BAD], status.get("job_blame")

    audit = [json.loads(line) for line in fleet.audit.read_text().splitlines()]
    drains = [a for a in audit if a["action"] == "drain" and a["cause"] == "job-failures"]
    assert [a["node"] for a in drains] == [BAD], drains
    blamed = fleet.events("job_blame.node_blamed")
    assert [e["node"] for e in blamed] == [BAD]
    assert blamed[0]["kube_node"] == kube_node  # the place: the pod that ran the jobs
    assert [p.split("@")[0] for p in blamed[0]["partners"]] == PARTNERS

    # an operator repaired it: the resume ends the blame, the same jobs never drain it again
    fleet.slurm.run("scontrol", "update", f"nodename={BAD}", "state=resume")
    wait_for(
        "the resume seen",
        lambda: bool(fleet.events("job_blame.node_resumed")),
        timeout_s=20,
    )
    time.sleep(4)
    assert fleet.slurm.node_states()[BAD] == "idle"  # not drained again for the same jobs
    reason = fleet.reasons()[BAD]
    assert reason == "none" or reason.startswith("slonkd:job-failures")  # 24.11 keeps the text
    drains = fleet.events("slurm.nodes_drain")
    assert [e["nodes"] for e in drains] == [[BAD]], drains

"""``slonkd sandbox demo``: a short script a person can watch, every step checked.

Against a sandbox that ``slonkd sandbox up`` started, it plays four scenes, printing each
command it runs and each state it then checks (through ``scontrol``/``squeue`` and the
apiserver, never through logs):

1. a worker pod is deleted -> its SLURM node is drained at once, its requeueable job is
   requeued by the preStop hook (never killed), the pod comes back, the node resumes;
2. SLURM reports a failure on a node whose pod has been Ready past the coordinator's grace
   -> its K8s node is cordoned, tainted ``slonk.dev/unhealthy`` and marked
   ``SlurmHealthy=False``, the pod is evicted once; SLURM's own reason is never cleared by
   slonkd (the operator resumes the node; the K8s node stays cordoned for inspection);
3. the worker StatefulSet's template changes -> the coordinator replaces every worker pod
   one at a time without killing a job;
4. an operator drains a node, its pod restarts -> the operator's drain is left alone.

What it made and saw goes to ``<dir>/demo.json`` (with the sandbox's ``mode``); the exit
code is 0 only when every check held. The demo's jobs keep running (``sleep``) until ``down``.

A real-mode sandbox (``up --real``: the chart on a real node) gets the same scenes through
the user's and the operator's paths: SLURM commands by ``kubectl exec`` into the slurmctld
container, ``sbatch`` over SSH as the user on the login pod, pod deletions through the
apiserver. Scenes 2 and 3 differ where one node and the chart differ
(:mod:`slonkd_sandbox.sandbox.demo_real`); :mod:`slonkd_sandbox.sandbox.play` plays them.
"""

from __future__ import annotations

import time
from typing import Any

from slonkd_sandbox.sandbox.access import DemoFailed, JobWatch, Sandbox, check, wait
from slonkd_sandbox.sandbox.access import say as _say

OPERATOR_REASON = "ops: replacing a DIMM"
FAILURE_REASON = "Kill task failed"
MERGE = "application/merge-patch+json"
FAILURE_TAINT = "slonk.dev/unhealthy"
CORDONED_BY = "slonk.dev/cordoned-by"


# -- the scenes ------------------------------------------------------------------------------


def scene_pod_deleted(sb: Sandbox) -> None:
    """A worker pod deleted: drain, requeue, pod back, resume."""
    name = sb.state["workers"][0]
    _say(f"\n1. A worker pod is deleted (an upgrade, an eviction): {name}")
    job = sb.submit("-w", name)
    check(sb, f"job {job} running on {name}", lambda: sb.job(job)["JobState"] == "RUNNING", 30)
    pod = sb.pod(name)
    assert pod is not None  # noqa: S101 - the sandbox made it
    uid = pod["metadata"]["uid"]
    sb.record["pod_deleted"] = {"pod": name, "old_uid": uid, "job": job}
    with JobWatch(sb, [job]) as watch:
        _say(f"    $ kubectl -n {sb.ns} delete pod {name}")
        sb.api.request("DELETE", f"/api/v1/namespaces/{sb.ns}/pods/{name}")
        check(
            sb,
            f"SLURM node {name} drained by its agent (slonkd:pod-terminating)",
            lambda: (
                sb.node(name).get("Reason", "").startswith("slonkd:pod-terminating")
                and "DRAIN" in sb.node(name)["State"]
            ),
            10,
        )
        check(
            sb,
            f"job {job} requeued by the preStop hook (Restarts >= 1), not killed",
            lambda: int(sb.job(job).get("Restarts", "0")) >= 1,
            sb.state["grace_s"] + 15,
        )
        check(
            sb, f"pod {name} back, Running and Ready", lambda: sb.pod_ready(name, not_uid=uid), 60
        )
        check(
            sb, f"SLURM node {name} resumed by the new pod's agent", lambda: sb.in_service(name), 30
        )
    if watch.killed():
        raise DemoFailed(f"a job was killed: {watch.killed()}")
    _say(f"    ok  job {job} never FAILED/CANCELLED/NODE_FAIL: {sorted(watch.seen[job])}")


def marked(sb: Sandbox, kube_node: str) -> bool:
    """Whether slonkd's marks are on ``kube_node``: cordoned, tainted, SlurmHealthy=False."""
    node = sb.knode(kube_node)
    taints = {t["key"] for t in node["spec"].get("taints") or []}
    conds = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
    return (
        bool(node["spec"].get("unschedulable"))
        and FAILURE_TAINT in taints
        and conds.get("SlurmHealthy") == "False"
    )


def check_reason_left(sb: Sandbox, name: str) -> None:
    """Check that SLURM's own reason on ``name`` stands: slonkd never clears it."""
    check(
        sb,
        f"SLURM's own reason on {name} left as it is ({FAILURE_REASON!r})",
        lambda: sb.node(name).get("Reason") == FAILURE_REASON,
        5,
    )


def lift_marks(sb: Sandbox, kube_node: str) -> None:
    """The operator's uncordon: unschedulable off, slonkd's taint and annotation removed."""
    taints = [
        t for t in sb.knode(kube_node)["spec"].get("taints") or [] if t["key"] != FAILURE_TAINT
    ]
    patch = {
        "metadata": {"annotations": {CORDONED_BY: None}},
        "spec": {"unschedulable": False, "taints": taints or None},
    }
    sb.api.request("PATCH", f"/api/v1/nodes/{kube_node}", patch, content_type=MERGE)


def scene_slurm_failure(sb: Sandbox) -> None:
    """SLURM's own failure on a settled pod: the K8s node is cordoned, tainted, marked."""
    name = sb.state["workers"][1]
    grace = float(sb.state["coordinator_config"]["failure_grace_s"])
    _say(f"\n2. SLURM reports a failure on {name}, whose pod is Running and Ready")
    pod = sb.pod(name)
    assert pod is not None  # noqa: S101
    kube_node = pod["spec"]["nodeName"]
    uid = pod["metadata"]["uid"]
    ready_at = max(
        float(sb.state.get("coordinator_started_at", 0.0)),
        _ready_since(pod),
    )
    settle = ready_at + grace + 2 - time.time()
    if settle > 0:
        _say(f"    (waiting {settle:.0f} s: a failure counts only {grace:.0f} s after Ready)")
        time.sleep(settle)
    sb.record["slurm_failure"] = {"pod": name, "kube_node": kube_node, "old_uid": uid}
    sb.slurm(
        "scontrol",
        "update",
        f"nodename={name}",
        "state=fail",
        f"reason={FAILURE_REASON}",
        show=True,
    )

    check(
        sb,
        f"K8s node {kube_node} cordoned, tainted slonk.dev/unhealthy, SlurmHealthy=False",
        lambda: marked(sb, kube_node),
        30,
    )
    check(
        sb,
        f"pod {name} evicted once (remediation) and Ready on another K8s node",
        lambda: (
            sb.pod_ready(name, not_uid=uid)
            and (sb.pod(name) or {}).get("spec", {}).get("nodeName") != kube_node
        ),
        90,
    )
    check_reason_left(sb, name)
    _say("    the operator looks at it, decides the node is fine, and resumes it:")
    sb.slurm("scontrol", "update", f"nodename={name}", "state=resume", show=True)
    check(sb, f"SLURM node {name} back in service", lambda: sb.in_service(name), 30)
    _say(f"    K8s node {kube_node} stays cordoned for the operator: kubectl uncordon {kube_node}")


def watch_rollout(
    sb: Sandbox, workers: list[str], new: str, jobs: list[str], *, timeout_s: float
) -> JobWatch:
    """Wait until every worker pod is on revision ``new`` and every SLURM node in service.

    Shows each worker as it is replaced; fails if a job of ``jobs`` was killed or more than one
    SLURM node was out at once. Returns the watch (which nodes each job ran on).
    """

    def updated() -> list[str]:
        return [
            n
            for n in workers
            if (p := sb.pod(n)) is not None
            and p["metadata"]["labels"].get("controller-revision-hash") == new
            and sb.pod_ready(n)
        ]

    with JobWatch(sb, jobs) as watch:
        shown: set[str] = set()
        began = time.monotonic()

        def progress() -> bool:
            done = updated()
            for n in sorted(set(done) - shown):
                shown.add(n)
                _say(
                    f"        {n} replaced ({len(shown)}/{len(workers)},"
                    f" {time.monotonic() - began:.0f} s)"
                )
            return len(done) == len(workers) and all(sb.in_service(n) for n in workers)

        check(
            sb,
            f"every worker pod on revision {new}, every SLURM node back in service",
            progress,
            timeout_s,
        )
    if watch.killed():
        raise DemoFailed(f"a job was killed: {watch.killed()}")
    if watch.most_out > 1:
        raise DemoFailed(f"{watch.most_out} SLURM nodes were out at once (the rollout allows 1)")
    _say("    ok  never more than one SLURM node out at a time")
    return watch


def scene_rollout(sb: Sandbox) -> None:
    """A template change: every worker replaced one at a time, no job killed."""
    workers = sb.state["workers"]
    _say(
        f"\n3. A new revision of the worker StatefulSet: the coordinator rolls {len(workers)} pods"
    )
    job = sb.submit()
    check(sb, f"job {job} running", lambda: sb.job(job)["JobState"] == "RUNNING", 30)
    on = sb.job(job)["NodeList"]
    jobs = [job]
    first = sb.record.get("pod_deleted", {}).get("job")
    if first:
        jobs.append(first)
    uids = {n: (sb.pod(n) or {}).get("metadata", {}).get("uid") for n in workers}
    old = sb.sts()["status"].get("updateRevision", "")
    sb.record["rollout"] = {"job": job, "job_node": on, "old_revision": old, "old_uids": uids}
    stamp = time.strftime("%H:%M:%S")
    _say(
        f"    $ kubectl -n {sb.ns} patch sts {sb.state['statefulset']}"
        f" (template annotation slonk.dev/demo={stamp})"
    )
    patch = {"spec": {"template": {"metadata": {"annotations": {"slonk.dev/demo": stamp}}}}}
    path = f"/apis/apps/v1/namespaces/{sb.ns}/statefulsets/{sb.state['statefulset']}"
    sb.api.request("PATCH", path, patch, content_type=MERGE)
    wait("new revision", lambda: sb.sts()["status"].get("updateRevision", old) != old, 15)
    new = sb.sts()["status"]["updateRevision"]
    sb.record["rollout"]["new_revision"] = new
    watch = watch_rollout(sb, workers, new, jobs, timeout_s=90 * len(workers))
    restarts = int(sb.job(job)["Restarts"])
    if restarts < 1:
        raise DemoFailed(f"job {job} on {on} was not requeued by the rollout")
    _say(f"    ok  job {job} requeued {restarts}x, never killed: {sorted(watch.seen[job])}")


def scene_operator_drain(sb: Sandbox) -> None:
    """An operator's drain survives the pod's restart: slonkd never lifts it."""
    name = sb.state["workers"][2]
    _say(f"\n4. An operator drains {name}; then its pod restarts")
    sb.slurm(
        "scontrol",
        "update",
        f"nodename={name}",
        "state=drain",
        f"reason={OPERATOR_REASON}",
        show=True,
    )
    pod = sb.pod(name)
    assert pod is not None  # noqa: S101
    uid = pod["metadata"]["uid"]
    sb.record["operator_drain"] = {"pod": name, "old_uid": uid, "reason": OPERATOR_REASON}
    _say(f"    $ kubectl -n {sb.ns} delete pod {name}")
    sb.api.request("DELETE", f"/api/v1/namespaces/{sb.ns}/pods/{name}")
    check(sb, f"pod {name} back, Running and Ready", lambda: sb.pod_ready(name, not_uid=uid), 60)
    quiet = sb.state.get("quiet_s") or 3 * max(
        float(sb.state["agent_resync_s"]), float(sb.state["coordinator_config"]["resync_s"])
    )
    time.sleep(quiet)  # passes of the agent and of the coordinator
    f = sb.node(name)
    if f.get("Reason") != OPERATOR_REASON or "DRAIN" not in f.get("State", ""):
        raise DemoFailed(f"the operator's drain on {name} was touched: {f}")
    _say(f"    ok  {name} still drained with the operator's reason after {quiet:.0f} s of passes")
    _say(f"    (resume it yourself: scontrol update nodename={name} state=resume)")


def _ready_since(pod: dict[str, Any]) -> float:
    from datetime import datetime

    for cond in pod.get("status", {}).get("conditions") or []:
        if cond["type"] == "Ready" and cond.get("lastTransitionTime"):
            stamp = cond["lastTransitionTime"].replace("Z", "+00:00")
            return datetime.fromisoformat(stamp).timestamp()
    return time.time()


def reset_previous(sb: Sandbox, previous: dict[str, Any]) -> None:
    """Undo, as the operator, what a previous demo left for people to look at."""
    jobs = [
        j
        for j in (
            previous.get("pod_deleted", {}).get("job"),
            previous.get("rollout", {}).get("job"),
        )
        if j
    ]
    if jobs:
        _say(f"(a previous demo left jobs {', '.join(jobs)}: cancelling them)")
        try:
            sb.slurm("scancel", *jobs, show=True)
        except DemoFailed as exc:  # a job that completed meanwhile
            _say(f"    ({exc})")
    drained = previous.get("operator_drain", {}).get("pod")
    if drained and sb.node(drained).get("Reason") == OPERATOR_REASON:
        _say(f"(a previous demo left {drained} drained: resuming it, as its operator)")
        sb.slurm("scontrol", "update", f"nodename={drained}", "state=resume", show=True)
    kube_node = previous.get("slurm_failure", {}).get("kube_node")
    if kube_node and sb.knode(kube_node)["spec"].get("unschedulable"):
        _say(f"(a previous demo left K8s node {kube_node} cordoned: uncordoning it)")
        lift_marks(sb, kube_node)


SCENES = (scene_pod_deleted, scene_slurm_failure, scene_rollout, scene_operator_drain)


__all__ = [
    "CORDONED_BY",
    "FAILURE_REASON",
    "FAILURE_TAINT",
    "OPERATOR_REASON",
    "SCENES",
    "reset_previous",
]

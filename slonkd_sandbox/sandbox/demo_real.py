"""The demo's scenes where a real-node sandbox differs from the process mode.

``slonkd sandbox up --real`` installs the chart on one real node, so two scenes change:

2. SLURM's failure cordons and taints the only K8s node, which carries every worker pod.
   The scene checks the marks and at most one eviction (of the failed node's pod, none of
   another) and that the marks held for 20 s (a healthy sibling SLURM node on the same K8s
   node must not lift them; it did once, found by this scene), then plays the operator:
   ``scontrol update state=resume`` and, if still cordoned, ``kubectl uncordon`` with the
   taint removed; the worker pod is Ready on the node and every SLURM node returns to service.
3. The rollout is a ``helm upgrade --reuse-values`` of an agent setting (a health check's
   period), as a user changes a release; patching the StatefulSet's template by hand, as the
   process mode does, would be undone by the release's next upgrade. The chart's coordinator
   waits up to its ``job_wait_s`` (slonkd's default, 10 minutes; the chart does not set it)
   for a worker's running job before requeueing it, so the scene cancels scene 1's hour-long
   job first and runs a short one: the rollout replaces that worker after the job
   COMPLETED, never requeued or killed, one worker out at a time.

Scenes 1 and 4 are the process mode's (:mod:`slonkd_sandbox.sandbox.demo`), through the
real-mode access of :class:`~slonkd_sandbox.sandbox.access.Sandbox`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from slonkd_sandbox.chart.helm import Helm
from slonkd_sandbox.sandbox.access import DemoFailed, Sandbox, check, wait
from slonkd_sandbox.sandbox.access import say as _say
from slonkd_sandbox.sandbox.demo import (
    FAILURE_REASON,
    FAILURE_TAINT,
    _ready_since,
    check_reason_left,
    lift_marks,
    marked,
    scene_operator_drain,
    scene_pod_deleted,
    watch_rollout,
)

ROLLOUT_SETTING = "agent.health.checks.fast_period_s"
ROLLOUT_JOB_S = 40


def uncordon(sb: Sandbox, kube_node: str) -> None:
    """The operator's uncordon: unschedulable off, slonkd's taint and annotation removed."""
    _say(f"    $ kubectl uncordon {kube_node}; kubectl taint node {kube_node} {FAILURE_TAINT}-")
    lift_marks(sb, kube_node)


def scene_slurm_failure_real(sb: Sandbox) -> None:
    """SLURM's failure marks the only K8s node; at most one eviction; the operator undoes it."""
    workers = sb.state["workers"]
    name = workers[1]
    grace = float(sb.state["coordinator_config"]["failure_grace_s"])
    _say(f"\n2. SLURM reports a failure on {name}, whose pod is Running and Ready")
    pod = sb.pod(name)
    if pod is None:
        raise DemoFailed(f"no pod {name}")
    kube_node = pod["spec"]["nodeName"]
    ready_at = max(float(sb.state.get("coordinator_started_at", 0.0)), _ready_since(pod))
    settle = ready_at + grace + 2 - time.time()
    if settle > 0:
        _say(f"    (waiting {settle:.0f} s: a failure counts only {grace:.0f} s after Ready)")
        time.sleep(settle)
    uids: dict[str, set[str]] = {
        w: {str((sb.pod(w) or {}).get("metadata", {}).get("uid"))} for w in workers
    }
    sb.record["slurm_failure"] = {"pod": name, "kube_node": kube_node, "old_uid": min(uids[name])}
    fail = ("update", f"nodename={name}", "state=fail", f"reason={FAILURE_REASON}")
    sb.slurm("scontrol", *fail, show=True)

    def seen() -> None:
        for w in workers:
            p = sb.pod(w)
            if p is not None:
                uids[w].add(str(p["metadata"]["uid"]))

    def seen_marked() -> bool:
        seen()
        return marked(sb, kube_node)

    check(
        sb,
        f"K8s node {kube_node} (the only one) cordoned, tainted {FAILURE_TAINT},"
        " SlurmHealthy=False",
        seen_marked,
        30,
    )
    marked_at = time.monotonic()
    lifted = None  # seconds after the marks when the node was schedulable again
    while time.monotonic() < marked_at + 20:  # a second eviction, or another pod's, shows here
        seen()
        if lifted is None and not sb.knode(kube_node)["spec"].get("unschedulable"):
            lifted = round(time.monotonic() - marked_at, 1)
        time.sleep(1)
    evictions = {w: len(u) - 1 for w, u in uids.items()}
    sb.record["slurm_failure"].update({"evictions": evictions, "cordon_lifted_after_s": lifted})
    if evictions[name] > 1 or any(n for w, n in evictions.items() if w != name):
        raise DemoFailed(f"more than one eviction, or of another pod: {evictions}")
    _say(f"    ok  at most one eviction ({name}: {evictions[name]}; no other pod)")
    if lifted is not None:  # slonkd lifted its own marks while SLURM's failure stood
        raise DemoFailed(
            f"the cordon on {kube_node} was lifted {lifted} s after the marks while SLURM's"
            " failure stood: a healthy sibling SLURM node undid them"
        )
    _say(f"    ok  the marks held for 20 s (a healthy sibling on {kube_node} keeps them)")
    check_reason_left(sb, name)
    _say("    the operator looks at it, decides the node is fine, resumes it and uncordons:")
    sb.slurm("scontrol", "update", f"nodename={name}", "state=resume", show=True)
    if sb.knode(kube_node)["spec"].get("unschedulable"):
        uncordon(sb, kube_node)
    old_uid = sb.record["slurm_failure"]["old_uid"] if evictions[name] else ""
    check(
        sb,
        f"pod {name} Running and Ready on {kube_node}",
        lambda: sb.pod_ready(name, not_uid=old_uid),
        90,
    )

    def back() -> bool:
        fields = sb.node(name)
        if "DOWN" in fields.get("State", "") and not fields.get("Reason", "").startswith("slonkd"):
            # resumed while its slurmd was gone: SLURM marked it not responding
            sb.slurm("scontrol", "update", f"nodename={name}", "state=resume", show=True)
        return all(sb.in_service(w) for w in workers)

    check(sb, "every SLURM node in service", back, 60)


def _fast_period(sb: Sandbox, helm: Helm) -> int:
    """The setting's value in the release's user-supplied values (the chart's 30 if unset)."""
    out = helm.run("get", "values", sb.state["release"], f"--namespace={sb.ns}", "-o", "json")
    values: Any = json.loads(out.stdout or "{}") or {}
    for key in ROLLOUT_SETTING.split("."):
        values = values.get(key, {}) if isinstance(values, dict) else {}
    return int(values) if isinstance(values, int) else 30


def scene_rollout_real(sb: Sandbox) -> None:
    """``helm upgrade`` of an agent setting: every worker replaced one at a time, no job killed."""
    workers = sb.state["workers"]
    _say(f"\n3. helm upgrade of an agent setting: the coordinator rolls {len(workers)} pods")
    first = sb.record.get("pod_deleted", {}).get("job")
    if first:
        _say(
            f"    (the chart's rollout waits up to 10 minutes for a running job: scene 1's"
            f" hour-long job {first} goes)"
        )
        sb.slurm("scancel", first, show=True)
    job = sb.sbatch(wrap=f"sleep {ROLLOUT_JOB_S}")
    check(sb, f"job {job} running", lambda: sb.job(job)["JobState"] == "RUNNING", 30)
    on = sb.job(job)["NodeList"]
    uids = {n: (sb.pod(n) or {}).get("metadata", {}).get("uid") for n in workers}
    old = sb.sts()["status"].get("updateRevision", "")
    h = sb.state["helm"]
    kubeconfig = Path(sb.state["kubeconfig"])
    helm = Helm(binary=Path(h["binary"]), home=Path(h["home"]), kubeconfig=kubeconfig)
    period = 20 if _fast_period(sb, helm) != 20 else 25
    sb.record["rollout"] = {"job": job, "job_node": on, "old_revision": old, "old_uids": uids}
    sb.record["rollout"]["setting"] = f"{ROLLOUT_SETTING}={period}"
    _say(
        f"    $ helm upgrade {sb.state['release']} deploy/helm/slonk -n {sb.ns} --reuse-values"
        f" --set-json {ROLLOUT_SETTING}={period}"
    )
    helm.run(
        "upgrade",
        sb.state["release"],
        h["chart"],
        f"--namespace={sb.ns}",
        "--reuse-values",
        f"--set-json={ROLLOUT_SETTING}={period}",
    )
    wait("new revision", lambda: sb.sts()["status"].get("updateRevision", old) != old, 60)
    new = sb.sts()["status"]["updateRevision"]
    sb.record["rollout"]["new_revision"] = new

    watch = watch_rollout(sb, workers, new, [job], timeout_s=60 * len(workers) + ROLLOUT_JOB_S)
    fields = sb.job(job)
    if fields.get("JobState") != "COMPLETED" or fields.get("Restarts") != "0":
        raise DemoFailed(f"job {job} on {on} was not left to complete: {fields.get('JobState')}")
    _say(f"    ok  job {job} COMPLETED before {on} was replaced: {sorted(watch.seen[job])}")


REAL_SCENES = (
    scene_pod_deleted,
    scene_slurm_failure_real,
    scene_rollout_real,
    scene_operator_drain,
)

__all__ = ["REAL_SCENES", "uncordon"]

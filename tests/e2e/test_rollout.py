"""Worker rollouts end to end: the coordinator replaces every outdated pod without killing a job.

Three worker pods of an OnDelete StatefulSet, bound to real slurmd by the kubelet stand-in,
with their agents, ``slonkd prestop`` as preStop hook and one coordinator. The test patches
the StatefulSet's template and watches: every pod is replaced, never more than one SLURM
node out at a time, a requeueable job running on a worker is requeued (never FAILED,
CANCELLED or NODE_FAIL), and at the end every pod runs the new revision and every SLURM
node is back in service.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slonkd.core.log_events import COORDINATOR_API_LISTENING, ROLLOUT_WATCHING
from slonkd.core.rollout_phase import REVISION_LABEL
from slonkd_sandbox.daemon import Coordinators, Daemon
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.cluster import SlurmLayout
from slonkd_sandbox.workloads import pod_disruption_budget, spread_over_nodes, worker_statefulset
from tests.e2e.checkpointing import checkpointing_job
from tests.e2e.conftest import GRACE_S, PRESTOP, AgentProcess, read_json_log
from tests.rig import OnRig, Rig

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

NAMES = ("r-0", "r-1", "r-2")
KILLED = {"FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL", "PREEMPTED", "OUT_OF_MEMORY"}


@dataclass(slots=True)
class Rollout(OnRig):
    """The picture: pods, SLURM nodes, agents and the coordinator's log."""

    audit: Path
    coordinators: Coordinators
    """The first is the fleet's leader; a test starts the next."""
    agents: list[AgentProcess] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """The coordinators' environment."""

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The first coordinator's JSON log lines, or only those of event ``name``."""
        return self.coordinators[0].events(name)

    def start_coordinator(self, identity: str) -> Daemon:
        """Start a coordinator candidate; return once it leads and its rollout watches."""
        return self.coordinators.start(self.env, identity=identity, until=ROLLOUT_WATCHING)

    def pods(self) -> list[dict[str, Any]]:
        """The worker pods."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        return list(self.kube.api.request("GET", path)["items"])

    def sts(self) -> dict[str, Any]:
        """The StatefulSet r."""
        return dict(
            self.kube.api.request(
                "GET", f"/apis/apps/v1/namespaces/{self.namespace}/statefulsets/r"
            )
        )

    def restart(self, value: str) -> str:
        """Patch the pod template (``slonk.dev/restarted``); return the new update revision."""
        old = self.sts()["status"]["updateRevision"]
        self.kube.api.request(
            "PATCH",
            f"/apis/apps/v1/namespaces/{self.namespace}/statefulsets/r",
            {"spec": {"template": {"metadata": {"annotations": {"slonk.dev/restarted": value}}}}},
            content_type="application/merge-patch+json",
        )
        wait_for(
            "new update revision",
            lambda: self.sts().get("status", {}).get("updateRevision") not in (None, old),
            timeout_s=10,
        )
        return str(self.sts()["status"]["updateRevision"])

    def all_on(self, revision: str) -> bool:
        """Every worker pod on ``revision`` and ready."""
        pods = self.pods()
        return len(pods) == len(NAMES) and all(
            p["metadata"]["labels"].get(REVISION_LABEL) == revision and _ready(p) for p in pods
        )

    def all_new_and_back(self) -> bool:
        """Every worker on the newest revision and ready, every SLURM node back in service."""
        return self.all_on(self.sts()["status"]["updateRevision"]) and not self.out_of_service()

    def out_of_service(self) -> set[str]:
        """SLURM nodes drained, draining, down or failed now."""
        text = self.slurm.run("sinfo", "-h", "-N", "-o", "%N|%T").stdout
        rows = dict(line.split("|", 1) for line in text.splitlines() if line)
        return {
            n
            for n, s in rows.items()
            if any(w in s for w in ("drain", "down", "fail")) and n in NAMES
        }

    def transitions(self) -> dict[tuple[str, str], float]:
        """The leader's ``slonkd_transitions_total``: (action, cause) -> count."""
        ports = [e["port"] for e in self.coordinators[0].events(COORDINATOR_API_LISTENING)]
        url = f"http://127.0.0.1:{ports[-1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        return {
            (s.labels["action"], s.labels["cause"]): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "slonkd_transitions_total"
        }

    def run_unrequeueable_job(self, node: str) -> str:
        """Submit a ``--no-requeue`` job (``sleep 600``) to ``node``; its id once it runs."""
        job_id = self.slurm.run(
            "sbatch", "--parsable", "--no-requeue", "-w", node, "-o", "/dev/null",
            "--wrap", "sleep 600",
        ).stdout.strip()  # fmt: skip
        wait_for("job running", lambda: self.job(job_id).get("JobState") == "RUNNING", timeout_s=20)
        return job_id

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict of its fields."""
        text = self.slurm.run("scontrol", "-o", "show", "job", job_id).stdout
        return dict(tok.split("=", 1) for tok in text.split() if "=" in tok)


def _ready(pod: dict[str, Any]) -> bool:
    conds = pod.get("status", {}).get("conditions") or []
    return pod.get("status", {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conds
    )


@pytest.fixture
def rollout(
    request: pytest.FixtureRequest,
    rig: Rig,
    coordinators: Coordinators,
) -> Iterator[Rollout]:
    """3 workers of an OnDelete StatefulSet with agents, preStop and a coordinator.

    On one K8s node, or (indirect parameter: a number of K8s nodes) spread over several, at
    most one worker apart in count (a replaced pod comes back to the node it left).
    ``@pytest.mark.prestop(argv)`` replaces the preStop command; one with a checkpoint signal
    also makes the rollout leave the requeue to it (``requeue_in_prestop``, as the chart
    does) and lets a requeued job start again after 10 s (SLURM's cred_expire).
    """
    marker = request.node.get_closest_marker("prestop")
    prestop = list(marker.args[0]) if marker else PRESTOP
    checkpoint = "--checkpoint-signal" in prestop
    layout = SlurmLayout(nodes=NAMES, autostart=False)
    if checkpoint:
        layout = SlurmLayout(nodes=NAMES, autostart=False, cred_expire_s=10)
    slurm = rig.slurm_factory(layout)
    label = {"slonk.dev/test": rig.namespace}
    count = int(getattr(request, "param", 1))
    kube_nodes = rig.kube.add_fake_nodes(
        [rig.unique(f"roll{i}") for i in range(count)], labels=label
    )
    standin = rig.standin(slurm)
    standin.start()
    r = Rollout(
        rig=rig,
        slurm=slurm,
        audit=rig.tmp_path / "audit.jsonl",
        coordinators=coordinators,
    )
    try:
        sts = worker_statefulset(
            "r", replicas=len(NAMES), node_selector=label, grace_s=GRACE_S, prestop=prestop
        )
        sts["spec"]["updateStrategy"] = {"type": "OnDelete"}
        if count > 1:
            spread_over_nodes(sts)
        rig.create_statefulset(sts)
        slurm.wait_idle(NAMES, timeout_s=60)
        base = {
            **os.environ,
            "POD_NAMESPACE": rig.namespace,
            "KUBECONFIG": str(rig.kube.kubeconfig),
            "SLURM_CONF": str(slurm.conf),
        }
        placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in r.pods()}
        for name in NAMES:
            env = {
                **base,
                "POD_NAME": name,
                "NODE_NAME": placed.get(name) or kube_nodes[0],
                "SLONKD_RESYNC_S": "2",
                "SLONKD_READY_FILE": str(rig.tmp_path / f"ready-{name}"),
            }
            agent = AgentProcess(env=env, log=rig.tmp_path / f"agent-{name}.log")
            agent.start()
            r.agents.append(agent)
        config = rig.tmp_path / "coordinator.json"
        config.write_text(
            json.dumps(
                {
                    "resync_s": 1,
                    "failure_grace_s": 30,
                    "unready_grace_s": 60,
                    "max_out": 2,
                    "lease_duration_s": 6,
                    "renew_deadline_s": 4,
                    "retry_period_s": 1,
                    "rollout": {
                        "max_parallel": 1,
                        "job_wait_s": 2,
                        "poll_s": 0.5,
                        **({"requeue_in_prestop": True} if checkpoint else {}),
                    },
                    "api_port": 0,
                    "audit_path": str(r.audit),
                }
            )
        )

        r.env = {**base, "SLONKD_CONFIG": str(config)}
        r.start_coordinator("coordinator-0")
        yield r
    finally:
        coordinators.stop()
        for agent in r.agents:
            agent.stop()
        standin.stop()


def test_rollout_replaces_every_pod_one_at_a_time_and_requeues_the_job(rollout: Rollout) -> None:
    """Patch the template: all pods replaced one at a time; the job requeued, never killed."""
    r = rollout
    job_id = r.slurm.run(
        "sbatch", "--parsable", "--requeue", "-o", "/dev/null", "--wrap", "sleep 600"
    ).stdout.strip()
    wait_for("job running", lambda: r.job(job_id).get("JobState") == "RUNNING", timeout_s=20)
    first_node = r.job(job_id)["NodeList"]
    old_uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in r.pods()}
    new_revision = r.restart("1")

    job_states: set[str] = set()
    most_out = 0
    most_replacing = 0
    stop = threading.Event()

    def watch() -> None:  # what a person watching sinfo, squeue and kubectl would see
        nonlocal most_out, most_replacing
        while not stop.is_set():
            job_states.add(r.job(job_id).get("JobState", "?"))
            most_out = max(most_out, len(r.out_of_service()))
            pods = r.pods()
            replacing = len(NAMES) - sum(
                1 for p in pods if _ready(p) and not p["metadata"].get("deletionTimestamp")
            )
            most_replacing = max(most_replacing, replacing)
            stop.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def all_new_and_resumed() -> bool:
        return r.all_on(new_revision) and not r.out_of_service()

    try:
        wait_for(
            "every pod on the new revision, every node resumed", all_new_and_resumed, timeout_s=180
        )
    finally:
        stop.set()
        watcher.join(timeout=10)
    # every pod was replaced (new uid), never more than one at a time, inside the budget
    assert all(p["metadata"]["uid"] != old_uids[p["metadata"]["name"]] for p in r.pods())
    assert most_out == 1, most_out
    assert most_replacing == 1, most_replacing
    # the job was requeued from the node it ran on, never killed
    job = r.job(job_id)
    assert int(job["Restarts"]) >= 1, job
    assert not job_states & KILLED, job_states
    assert job["JobState"] in ("RUNNING", "PENDING"), job
    # every SLURM node back in service, with no reason left behind
    reasons = r.slurm.run("sinfo", "-h", "-N", "-o", "%N|%E").stdout.split()
    assert sorted(reasons) == sorted(f"{n}|none" for n in NAMES), reasons
    evicted = [e["pod"] for e in r.events("kube.evict")]
    assert sorted(evicted) == sorted(NAMES), evicted

    def progress_lines() -> list[dict[str, Any]]:  # what `slonkd status` shows, as it changed
        return r.events("rollout.progress")

    wait_for("rollout reports complete", lambda: progress_lines()[-1]["complete"], timeout_s=10)
    progress = progress_lines()
    assert progress[-1]["updated"] == len(NAMES)
    assert progress[-1]["statefulsets"]["r"]["updated"] == len(NAMES)
    assert any(p["in_progress"] == {"r-1": "draining"} for p in progress), progress
    requeued = r.events("slurm.jobs_requeued")
    assert any(e["node"] == first_node and int(job_id) in e["jobs"] for e in requeued), requeued
    # every write of the rollout is in the audit log with its cause (one line per node), and
    # its SLURM changes are counted on /metrics like the coordinator's others
    audit = [json.loads(line) for line in r.audit.read_text().splitlines()]
    done = {(a["action"], a["node"]) for a in audit if a["cause"] == "rollout"}
    for name in NAMES:
        assert {("drain", name), ("release", name), ("evict", name)} <= done, (name, audit)
    assert ("requeue", first_node) in done, audit
    counted = r.transitions()
    assert counted.get(("drain", "rollout"), 0) >= len(NAMES), counted
    assert counted.get(("release", "rollout"), 0) >= 1, counted
    assert counted.get(("evict", "rollout"), 0) == len(NAMES), counted
    r.slurm.run("scancel", job_id)


CHECKPOINT_PRESTOP = [*PRESTOP, "--checkpoint-signal", "B:USR1", "--checkpoint-window", "4"]


@pytest.mark.prestop(CHECKPOINT_PRESTOP)
def test_a_rollout_signals_a_checkpointing_job_which_resumes_from_its_checkpoint(
    rollout: Rollout, tmp_path: Path
) -> None:
    """Roll the workers under a job that checkpoints on USR1 (the preStop's checkpoint signal).

    The coordinator drains the job's node, waits, and leaves the requeue to the pod's preStop
    hook (``requeue_in_prestop``, as the chart sets with a checkpoint signal): the hook
    signals the job's batch shell, which writes its checkpoint, and requeues it 4 s later
    (within the window + 2 s), never unsignalled by the coordinator. Each time the job runs
    again it starts FROM its last checkpoint, never from zero, and it is never killed.
    """
    r = rollout
    work, script = checkpointing_job(tmp_path)
    job_id = r.slurm.run(
        "sbatch", "--parsable", "--requeue", "-w", "r-0", "-o", "/dev/null", str(script)
    ).stdout.strip()
    wait_for("job running", lambda: r.job(job_id).get("JobState") == "RUNNING", timeout_s=20)
    wait_for("the loop started", lambda: (work / "log").exists(), timeout_s=15)
    time.sleep(1)
    new_revision = r.restart("7")
    job_states: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            job_states.add(r.job(job_id).get("JobState", "?"))
            stop.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def lines() -> list[str]:
        return (work / "log").read_text().splitlines()

    def all_new_and_job_back() -> bool:
        job = r.job(job_id)
        return (
            r.all_on(new_revision)
            and job.get("JobState") == "RUNNING"
            and sum(ln.startswith("start") for ln in lines()) == int(job["Restarts"]) + 1
        )

    try:
        wait_for("every pod new, the job running again", all_new_and_job_back, timeout_s=240)
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert not job_states & KILLED, job_states
    assert int(r.job(job_id)["Restarts"]) >= 1
    # every start after a requeue resumes from the checkpoint written just before it
    last = 0
    for line in lines():
        if line.startswith("checkpoint"):
            last = int(line.split()[1])
        elif line.startswith("start"):
            assert int(line.split()[1]) == last, lines()
    checkpoints = [int(ln.split()[1]) for ln in lines() if ln.startswith("checkpoint")]
    assert checkpoints, lines()
    assert checkpoints[0] > 0, lines()

    # the coordinator left the requeue to the hook and never requeued the job unsignalled
    events = r.events()
    left = [e for e in events if e.get("event") == "rollout.requeue_left_to_prestop"]
    assert any(int(job_id) in [int(j) for j in e["jobs"]] for e in left), left
    assert not any(
        e.get("event") == "slurm.jobs_requeued" and int(job_id) in [int(j) for j in e["jobs"]]
        for e in events
    )

    def about_the_job(e: dict[str, Any]) -> bool:
        jobs = e.get("jobs")
        return e.get("job") == int(job_id) or (
            isinstance(jobs, list) and int(job_id) in [int(j) for j in jobs]
        )

    hook = [
        e
        for path in (tmp_path / "kubelet").rglob("prestop-*.log")
        for e in read_json_log(path)
        if about_the_job(e)
    ]
    sent = [e for e in hook if e["event"] == "prestop.checkpoint_signal" and e["outcome"] == "sent"]
    requeues = [e for e in hook if e["event"] == "slurm.jobs_requeued"]
    assert len(sent) == len(checkpoints), (hook, lines())
    assert len(requeues) == int(r.job(job_id)["Restarts"]), hook
    for e in requeues:
        assert e["held_for"] == "rollout", e
        assert 3.0 <= e["signal_to_requeue_s"] <= 4 + 2.0, e
    r.slurm.run("scancel", job_id)


def test_a_job_that_cannot_be_requeued_holds_its_node_until_it_ends(rollout: Rollout) -> None:
    """A --no-requeue job past the wait: its pod is not evicted (it would die) until it ends."""
    r = rollout
    job_id = r.run_unrequeueable_job("r-0")
    uid = next(p["metadata"]["uid"] for p in r.pods() if p["metadata"]["name"] == "r-0")
    r.restart("2")

    def blocked() -> bool:
        return any(e.get("node") == "r-0" for e in r.events("rollout.blocked"))

    wait_for("rollout blocked on r-0", blocked, timeout_s=30)
    held_until = time.monotonic() + 4  # several rollout passes (poll 0.5 s)
    while time.monotonic() < held_until:
        pods = {p["metadata"]["name"]: p for p in r.pods()}
        assert pods["r-0"]["metadata"]["uid"] == uid  # not evicted: the job would be killed
        assert not pods["r-0"]["metadata"].get("deletionTimestamp")
        assert r.job(job_id)["JobState"] == "RUNNING"
        assert r.out_of_service() == {"r-0"}  # drained for the rollout, the others wait
        time.sleep(0.25)
    r.slurm.run("scancel", job_id)  # the job ends (its owner cancels it): the rollout goes on

    wait_for("rollout done after the job ended", r.all_new_and_back, timeout_s=120)


def test_a_new_leader_carries_on_a_rollout_from_slurms_state(rollout: Rollout) -> None:
    """The leader dies mid-rollout (SIGKILL); the next one finds the drained node and goes on."""
    r = rollout
    job_id = r.run_unrequeueable_job("r-0")
    r.restart("3")
    wait_for("r-0 drained for the rollout", lambda: r.out_of_service() == {"r-0"}, timeout_s=30)
    r.coordinators[0].kill()  # no lease release, no clean-up: the state is SLURM's alone
    new = r.start_coordinator("coordinator-1")  # leads once the dead one's lease expired

    def blocked() -> bool:
        return any(e.get("node") == "r-0" for e in new.events("rollout.blocked"))

    wait_for("new leader holds r-0 for the job", blocked, timeout_s=30)
    assert r.job(job_id)["JobState"] == "RUNNING"
    r.slurm.run("scancel", job_id)

    wait_for("rollout finished by the new leader", r.all_new_and_back, timeout_s=120)
    evicted = [e["pod"] for e in new.events("kube.evict")]
    assert sorted(evicted) == list(NAMES), evicted  # r-0 included: carried on, not restarted


def test_the_pools_disruption_budget_holds_the_rollout(rollout: Rollout) -> None:
    """A PDB that allows no disruption: the eviction is refused, the pod stays; lifted, it goes."""
    r = rollout
    pdb = pod_disruption_budget("r", selector={"slonk.dev/pool": "r"}, min_available=len(NAMES))
    pdbs = f"/apis/policy/v1/namespaces/{r.namespace}/poddisruptionbudgets"
    r.kube.api.request("POST", pdbs, pdb)
    wait_for(
        "PDB observed",
        lambda: (
            r.kube.api.request("GET", f"{pdbs}/r").get("status", {}).get("expectedPods")
            == len(NAMES)
        ),
        timeout_s=30,
    )
    uid = next(p["metadata"]["uid"] for p in r.pods() if p["metadata"]["name"] == "r-0")
    r.restart("4")

    def refused() -> bool:
        return any(e.get("outcome") == "refused" for e in r.events("kube.evict"))

    wait_for("eviction refused by the PDB", refused, timeout_s=30)
    pods = {p["metadata"]["name"]: p for p in r.pods()}
    assert pods["r-0"]["metadata"]["uid"] == uid
    assert not pods["r-0"]["metadata"].get("deletionTimestamp")
    assert r.out_of_service() == {"r-0"}  # drained and waiting; nothing else taken
    r.kube.api.request("DELETE", f"{pdbs}/r")

    wait_for("rollout done once the budget allows it", r.all_new_and_back, timeout_s=120)


@pytest.mark.parametrize("rollout", [len(NAMES)], indirect=True)
def test_a_held_k8s_node_is_left_out_of_the_rollout(rollout: Rollout) -> None:
    """A held K8s node's worker is never drained nor evicted; the rest of the rollout goes on.

    The operator holds r-1's K8s node (``slonk.dev/hold``): r-1 is reported as held, every
    other worker is replaced; once the hold is lifted, r-1 is replaced too.
    """
    r = rollout
    pods = {p["metadata"]["name"]: p for p in r.pods()}
    held_node = pods["r-1"]["spec"]["nodeName"]
    assert [n for n, p in pods.items() if p["spec"]["nodeName"] == held_node] == ["r-1"], pods
    uid = pods["r-1"]["metadata"]["uid"]
    r.kube.kubectl("label", "node", held_node, "slonk.dev/hold=disk-swap")
    r.restart("5")
    touched: list[str] = []
    stop = threading.Event()

    def watch() -> None:  # r-1 as a person watching sinfo and kubectl would see it
        while not stop.is_set():
            pod = next((p for p in r.pods() if p["metadata"]["name"] == "r-1"), None)
            if pod is None or pod["metadata"]["uid"] != uid:
                touched.append("pod replaced")
            elif pod["metadata"].get("deletionTimestamp"):
                touched.append("pod terminating")
            if "r-1" in r.out_of_service():
                touched.append("SLURM node out of service")
            stop.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def new(name: str) -> bool:
        revision = r.sts()["status"]["updateRevision"]
        pod = next((p for p in r.pods() if p["metadata"]["name"] == name), None)
        return (
            pod is not None
            and pod["metadata"]["labels"].get(REVISION_LABEL) == revision
            and _ready(pod)
            and name not in r.out_of_service()
        )

    try:
        wait_for("r-0 and r-2 replaced", lambda: new("r-0") and new("r-2"), timeout_s=180)
        time.sleep(2)  # several more rollout passes (poll 0.5 s): still nothing for r-1
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert not touched, sorted(set(touched))
    events = r.events()
    assert any(e.get("event") == "rollout.held" and e.get("node") == "r-1" for e in events)
    progress = [e for e in events if e.get("event") == "rollout.progress"][-1]
    assert "on hold" in progress["held"]["r-1"], progress
    assert progress["outdated"] == 1, progress
    evicted = [e["pod"] for e in events if e.get("event") == "kube.evict"]
    assert sorted(evicted) == ["r-0", "r-2"], evicted
    drained = [n for e in events if e.get("event") == "slurm.nodes_drain" for n in e["nodes"]]
    assert "r-1" not in drained, drained

    r.kube.kubectl("label", "node", held_node, "slonk.dev/hold-")  # the operator is done
    wait_for("r-1 replaced once the hold is lifted", lambda: new("r-1"), timeout_s=120)
    events = r.events()
    assert any(e.get("event") == "rollout.hold_lifted" and e.get("node") == "r-1" for e in events)

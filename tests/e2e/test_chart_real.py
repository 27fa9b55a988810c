"""The chart as users deploy it, on a real kubelet node: real images, containers and DNS.

One ``helm install`` of ``deploy/helm/slonk`` for the module, on a :class:`RealNode`
(containerd, runc, kubelet, CoreDNS) with a control plane of its own. The images are
``container/build.sh``'s, imported with ``ctr`` (:mod:`slonkd_sandbox.chart.images`) and
selected by ``ci/local-images-values.yaml`` (``imagePullPolicy: Never``). Nothing is replaced:
slurmctld, slurmd, munged, mosquitto, the coordinators and the agent sidecars are the
images' own processes; names resolve through CoreDNS and headless Services; the two
claims are bound to ``local`` PersistentVolumes on the node, as an administrator without a
provisioner would make them. Only the node's size is told to the chart (no GPUs, the
machine's CPUs, 1 GiB per SLURM node) and where pods reach the API by name
(``kubernetesService``: no kube-proxy runs here, so no request ever goes to a ClusterIP).
The node is tainted as every node of a managed GPU pool is (``nvidia.com/gpu=present:
NoSchedule``) before anything is installed, and every pod of the release tolerates it, as a
GPU pool's values say (the release's other pods only because this node is the cluster's only
one; a site runs them on untainted nodes).

A user (the site's directory service, played by ``useradd`` on the login and controller
pods) has a home on a third ``local`` volume behind ``home.existingClaim``; the harness
reaches the login pod's sshd from inside the node's network namespace (a pod address, never
off the machine) with a key in that home; it reads the broker's retained messages the same
way (:mod:`slonkd_sandbox.chart.bus`), as the chart's dynsec admin. The tests run in order on
the one release: the pool's tolerated taint drains nothing while a maintenance taint it
does not tolerate drains the workers, the agents' credentials and retained status, the
preStop requeue, the agent's log, the same deletion with ``workers.prestop.enabled: false``
(after slonkd's rollout), a ``helm upgrade`` rollout that puts it back, and last a SLURM
failure that cordons the only node. About 8 minutes with the images cached.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slonkd.core.messages import AgentStatus, Channel, decode, node_topic
from slonkd_sandbox.chart.bus import (
    container,
    env_value,
    projected_token,
    retained,
    secret_sources,
)
from slonkd_sandbox.chart.logs import LogStream, cri_time, ctl_log, first, json_lines
from slonkd_sandbox.chart.release import (
    BAD_STATES,
    CONTROLLER,
    POOL,
    RELEASE,
    Obj,
    Release,
    add_account,
    install,
    ready,
    workers,
)
from slonkd_sandbox.procs import HarnessError, wait_for
from slonkd_sandbox.realnode.node import RealNode
from tests.e2e.chart_install import reported

# The first test's setup builds the images when this tree changed them (scripts/bootstrap
# builds them ahead; cold about 6 minutes on 2 cores) and starts the node: more than the
# default 300 s per test.
pytestmark = [pytest.mark.kube, pytest.mark.real, pytest.mark.timeout(1200)]

WORKERS = workers(2)
CLUSTER = "slonk"
"""The chart's default ``clusterName``: the agents' topics are ``slonk/v1/slonk/...``."""
AGENT = "slonkd-agent"
TLS_DIR = "/etc/slonk/tls"
"""Where the chart mounts the TLS Secret ("slonk.tlsDir"): for the agent, the CA alone."""
GRACE_S = 24
MARGIN_S = 8
FAILURE_GRACE_S = 10
DRAIN_MS: list[float] = []
"""Pod DELETE -> slurmctld logs slonkd's drain reason, per deletion with preStop."""
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
"""The taint of every node of a managed GPU pool (issue 37 item 1)."""
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
"""The pool's toleration of it, as a GPU pool's values give it."""
MAINT = "example.com/maint"
"""A node maintenance's taint, which the pool does not tolerate."""
COMPONENTS = ("controller", "login", "coordinator", "mosquitto", "secretsJob")
"""The chart's other pods, each with its own ``tolerations`` value."""
COORDINATOR = {"app.kubernetes.io/component": "coordinator"}
WORKER = {"app.kubernetes.io/component": "slurmd"}


def _taint_like_a_gpu_pool(node: RealNode) -> None:
    taint = f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}"
    node.cluster.kubectl("taint", "nodes", node.name, taint)


@pytest.fixture(scope="module")
def deployed(session_root: Path) -> Iterator[Release]:
    """The chart installed once on a fresh real node; every pod Ready (or a diagnosis)."""
    tolerations = json.dumps([TOLERATION])
    installing = install(
        session_root,
        replicas=len(WORKERS),
        grace_s=GRACE_S,
        margin_s=MARGIN_S,
        failure_grace_s=FAILURE_GRACE_S,
        started=_taint_like_a_gpu_pool,
        set_json=(
            f"pools[0].tolerations={tolerations}",  # into the harness's one pool, kept whole
            *(f"{c}.tolerations={tolerations}" for c in COMPONENTS),
        ),
    )
    with reported("chart-real", installing) as release:
        yield release
        print(f"\n[chart-real] drain latency ms (DELETE -> slurmctld): {DRAIN_MS}")


@pytest.fixture(autouse=True)
def _no_job_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, cancel the user's jobs: one left running would hold the next rollout."""
    yield
    if "deployed" in request.fixturenames:
        request.getfixturevalue("deployed").cancel_all()


def test_slurmctld_runs_and_every_worker_is_slurmd_plus_agent_and_idle(deployed: Release) -> None:
    """slurmctld Running; each worker pod 2/2 (slurmd + agent sidecar); its node idle in sinfo."""
    ctl = deployed.pods(**{"app.kubernetes.io/component": "slurmctld"})
    assert [p["metadata"]["name"] for p in ctl] == [CONTROLLER]
    assert ctl[0]["status"]["phase"] == "Running"
    workers = deployed.pods(**{"app.kubernetes.io/component": "slurmd"})
    assert sorted(p["metadata"]["name"] for p in workers) == list(WORKERS)
    for pod in workers:
        states = {
            cs["name"]: cs
            for cs in pod["status"].get("initContainerStatuses", [])
            + pod["status"].get("containerStatuses", [])
        }
        assert set(states) == {"slonkd-agent", "slurmd"}, states.keys()
        assert all(cs["ready"] and "running" in cs["state"] for cs in states.values()), states
    seen: dict[str, str] = {}

    def idle() -> bool:
        out = deployed.exec(CONTROLLER, "slurmctld", "sinfo", "-h", "-N", "-o", "%N %T")
        seen.clear()
        seen.update(dict(line.split() for line in out.splitlines() if line.strip()))
        return all(seen.get(w) == "idle" for w in WORKERS)

    try:
        wait_for("every worker idle in sinfo", idle, timeout_s=90, interval_s=2)
    except HarnessError:
        pytest.fail(f"sinfo: {seen}\n{deployed.diagnose()}")


def test_one_coordinator_leads_through_the_lease_and_the_standby_is_ready(
    deployed: Release,
) -> None:
    """The chart's Lease names one of the two Ready coordinator pods as holder."""
    coords = deployed.pods(**{"app.kubernetes.io/component": "coordinator"})
    names = {p["metadata"]["name"] for p in coords}
    assert len(names) == 2
    assert all(ready(p) for p in coords)
    lease = deployed.kube.api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{deployed.ns}/leases/{RELEASE}-coordinator"
    )
    assert lease["spec"]["holderIdentity"] in names, lease["spec"]


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


def _worker_lines(deployed: Release) -> dict[str, str]:
    """``STATE|REASON`` of each worker's SLURM node."""
    return {w: deployed.node_line(w) for w in WORKERS}


def _wait_workers(
    deployed: Release, what: str, want: Callable[[str], bool], timeout_s: float
) -> None:
    seen: dict[str, str] = {}

    def done() -> bool:
        seen.clear()
        seen.update(_worker_lines(deployed))
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


def test_the_pools_tolerated_taint_drains_nothing_and_opens_no_breaker(deployed: Release) -> None:
    """Node tainted nvidia.com/gpu=present:NoSchedule, tolerated: idle workers, no breaker.

    Before the fix (issue 37 item 1) the first pass wanted both workers drained
    ``k8s-tainted:gpu``; under the default budget that is a mass event and opens the breaker
    at install. The taint was there before the install, so every pass of the leader saw it:
    the workers stay idle (not drained), the leader's ``slonkd status`` shows the breaker
    closed and no slonkd cause or pending action, ``slonkd explain`` names the tolerated
    taint, and neither coordinator logged a refusal, an opened breaker or a ``k8s-tainted``
    drain.
    """
    taints = _node_obj(deployed)["spec"].get("taints", [])
    assert any({k: t.get(k) for k in GPU_TAINT} == GPU_TAINT for t in taints), taints
    for pod in deployed.pods(**WORKER):
        assert TOLERATION in pod["spec"].get("tolerations", []), pod["spec"].get("tolerations")
    _wait_workers(deployed, "every worker idle", _idle, timeout_s=90)
    wait_for(  # nothing drained is not for want of a pass: the leader looked twice at least
        "two passes of the leader",
        lambda: _slonkd(deployed, "status", "-o", "json")["passes"]["count"] >= 2,
        timeout_s=150,
        interval_s=2,
    )
    status = _slonkd(deployed, "status", "-o", "json")
    assert not status["state"].get("breakerOpen"), status["state"]
    rows = {row["node"]: row for row in status["nodes"]}
    for w in WORKERS:
        assert (rows[w]["causes"], rows[w]["drift"]) == ([], []), rows[w]
        notes = _slonkd(deployed, "explain", w)["decision"]["notes"]
        assert any("nvidia.com/gpu" in n and "tolerated" in n for n in notes), notes
    assert all(_idle(line) for line in _worker_lines(deployed).values()), _worker_lines(deployed)
    said = [
        e
        for e in _coordinator_log(deployed)
        if e.get("event") in ("budget.refused", "budget.breaker_opened")
        or (e.get("event") == "slurm.nodes_drain" and "k8s-tainted" in str(e.get("cause")))
    ]
    assert said == [], said[:5]


def test_a_maintenance_taint_the_pool_does_not_tolerate_drains_the_workers(
    deployed: Release,
) -> None:
    """example.com/maint=ticket-37:NoSchedule beside the GPU taint: both workers drained for it.

    The drain's reason names the untolerated taint's key (``slonkd:k8s-tainted:maint``), not
    the tolerated one; the breaker stays closed (the harness's budget admits both). Once the
    maintenance taint is lifted, slonkd releases them and they are idle again. NoSchedule: a
    NoExecute taint would evict every pod of this one-node cluster (slurmctld and the
    coordinators with the workers); NoExecute is in tests/unit/test_decide_tolerations.py.
    """
    name = deployed.node.name
    deployed.kube.kubectl("taint", "nodes", name, f"{MAINT}=ticket-37:NoSchedule")
    try:
        _wait_workers(
            deployed,
            "every worker drained k8s-tainted:maint",
            lambda line: "slonkd:k8s-tainted:maint" in line,
            timeout_s=60,
        )
        assert not _slonkd(deployed, "status", "-o", "json")["state"].get("breakerOpen")
        drains = [
            e
            for e in _coordinator_log(deployed)
            if e.get("event") == "slurm.nodes_drain" and "k8s-tainted" in str(e.get("cause"))
        ]
        assert {str(e.get("cause")) for e in drains} == {"k8s-tainted:maint"}, drains
    finally:
        deployed.kube.kubectl("taint", "nodes", name, f"{MAINT}-")
    _wait_workers(deployed, "every worker idle again", _idle, timeout_s=60)


def test_every_agent_got_its_mqtt_credentials_from_the_coordinator(deployed: Release) -> None:
    """Each agent sidecar logged bus.bootstrap_done: /v1/credentials took its projected token.

    No password file: no Secret and no static MQTT credential reaches the slonkd-agent
    container (env, envFrom, mounted volumes) but the release's TLS Secret, and of it only
    ``ca.crt`` (TLS is on by default: no private key reaches a worker), and its
    SLONKD_TOKEN_FILE is a projected ServiceAccount token for the audience the coordinators
    review agent tokens for.
    """
    coords = deployed.pods(**{"app.kubernetes.io/component": "coordinator"})
    audiences = {env_value(container(p, "coordinator"), "SLONKD_TOKEN_AUDIENCE") for p in coords}
    assert len(coords) == 2
    assert len(audiences) == 1, audiences
    assert None not in audiences, audiences
    pods = deployed.pods(**{"app.kubernetes.io/component": "slurmd"})
    assert sorted(p["metadata"]["name"] for p in pods) == list(WORKERS)
    for spec in pods:
        name = spec["metadata"]["name"]
        assert secret_sources(spec, AGENT) == [f"{TLS_DIR}: Secret {RELEASE}-tls"], name
        (ca,) = [
            v
            for v in spec["spec"]["volumes"]
            if v.get("secret", {}).get("secretName") == f"{RELEASE}-tls"
        ]
        assert ca["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}], (name, ca)
        token_file = env_value(container(spec, AGENT), "SLONKD_TOKEN_FILE")
        assert token_file, name
        token = projected_token(spec, AGENT, token_file)
        assert token is not None, (name, token_file, spec["spec"]["volumes"])
        assert token.get("audience") in audiences, (name, token)
    for pod in WORKERS:

        def bootstrapped(pod: str = pod) -> list[Obj]:
            return [
                e
                for e in json_lines(deployed.logs(pod, AGENT))
                if e.get("event") == "bus.bootstrap_done"
            ]

        try:
            wait_for(f"{pod}'s agent bootstrapped", lambda: bool(bootstrapped()), timeout_s=60)
        except HarnessError:
            pytest.fail(
                f"{pod}: no bus.bootstrap_done\n"
                + "\n".join(deployed.logs(pod, AGENT).splitlines()[-20:])
            )
        done = bootstrapped()
        assert done[0]["cluster"] == CLUSTER
        assert done[0]["username"]


def test_every_agents_retained_status_is_on_the_broker(deployed: Release) -> None:
    """The chart's broker retains each agent's status: online, naming its node, pod and K8s node.

    Read from the node's network namespace as the chart's dynsec admin. Only the agent's own
    client (issued by the coordinator) may publish on its status topic, and its will says
    offline: an online status there is the agent's, connected with those credentials. Its
    ``at`` is past the pod's creation, so no message the broker kept from before counts.
    Control: a worker that does not exist has nothing retained (the read is not vacuous).
    """
    for pod in deployed.pods(**{"app.kubernetes.io/component": "slurmd"}):
        name = pod["metadata"]["name"]
        topic = node_topic(CLUSTER, name, Channel.STATUS)
        seen: list[bytes] = []

        def held(topic: str = str(topic), seen: list[bytes] = seen) -> bool:
            seen.append(retained(deployed, topic))
            return bool(seen[-1])

        try:
            wait_for(f"{name}'s retained status", held, timeout_s=60, interval_s=1)
        except HarnessError:
            pytest.fail(
                f"{topic}: nothing retained\n"
                + "\n".join(deployed.logs(name, AGENT).splitlines()[-20:])
            )
        status = decode(topic, seen[-1])
        assert isinstance(status, AgentStatus), status
        assert status.online, status
        assert (status.node, status.pod, status.kube_node) == (name, name, deployed.node.name)
        assert status.at >= cri_time(pod["metadata"]["creationTimestamp"]), status
    ghost = workers(len(WORKERS) + 1)[-1]
    assert retained(deployed, str(node_topic(CLUSTER, ghost, Channel.STATUS))) == b""


def test_a_job_sbatched_over_ssh_is_requeued_by_the_prestop_before_slurmd_exits(
    deployed: Release, tmp_path: Path
) -> None:
    """USER sbatches a --requeue job over SSH on the login pod; kubectl delete of its worker.

    The kubelet runs `slonkd prestop`: slurmctld logs slonkd's drain reason and the DOWN
    before the slurmd container's log says slurmd shut down (CRI stamps of both logs); the
    job is requeued, never FAILED, CANCELLED or NODE_FAIL; the new pod's agent resumes the
    node and the job runs again there (its second start in the shared home).
    """
    victim = WORKERS[0]
    job, beats = deployed.sbatch_heartbeat(victim)
    old_uid = deployed.pod_uid(victim)
    assert old_uid
    slurmd_log = LogStream(deployed, victim, "slurmd", tmp_path / "slurmd.log")
    time.sleep(1)  # the stream is open before the DELETE
    t_delete = time.time()
    states, replaced = _delete_watching_job(deployed, victim, job, old_uid)
    try:
        wait_for(f"{victim} replaced and Ready", replaced, timeout_s=180, interval_s=1)
        wait_for("the old slurmd's log ended", slurmd_log.ended, timeout_s=30)
    except HarnessError:
        pytest.fail(f"job states {states}\n{deployed.diagnose()}")
    slurmd_lines = slurmd_log.close()
    ctl = ctl_log(deployed, t_delete)
    t_exit = first(slurmd_lines, "Slurmd shutdown completing")
    t_drain = first(ctl, f"node {victim} reason set to: slonkd:pod-terminating")
    t_down = first(ctl, f"node {victim} state set to DOWN")
    evidence = f"states {states}\nslurmctld: {ctl[-12:]}\nslurmd: {slurmd_lines[-6:]}"
    assert t_exit is not None, evidence
    assert t_drain is not None, evidence
    assert t_down is not None, evidence
    assert t_drain < t_down < t_exit, evidence
    DRAIN_MS.append(round((t_drain - t_delete) * 1000))
    bad = [s for s in states if s.split(":")[0] in BAD_STATES]
    assert not bad, states
    assert any(s.startswith(("PENDING", "REQUEUED", "REQUEUE_HOLD")) for s in states), states
    # the new pod's agent resumes the node; the job runs again there
    try:
        wait_for(
            f"job {job} restarted on {victim}",
            lambda: f"start 1 {victim}" in beats.read_text(),
            timeout_s=90,
            interval_s=1,
        )
    except HarnessError:  # CI-like run 31: PENDING:BeginTime on an idle node for 90 s, once
        fields = deployed.job(job)
        times = {
            k: fields.get(k)
            for k in (
                "JobState",
                "Reason",
                "Restarts",
                "BeginTime",
                "EligibleTime",
                "SubmitTime",
                "LastSchedEval",
            )
        }
        pytest.fail(
            f"{deployed.job_state(job)} node {deployed.node_line(victim)} job {times}\n"
            f"slurmctld since the delete: {ctl_log(deployed, t_delete)[-20:]}"
        )
    assert deployed.job(job)["Restarts"] == "1"
    assert deployed.node_line(victim).split("|")[0] in ("mixed", "allocated"), deployed.node_line(
        victim
    )
    deployed.ssh("scancel", job)


def test_the_agent_log_through_the_kubelet_shows_the_drain_as_json(
    deployed: Release, tmp_path: Path
) -> None:
    """kubectl logs -c slonkd-agent of a deleted worker: the drain as one JSON line.

    With node, pod, cause and the SLURM state before and after; the replacement comes back idle.
    """
    victim = WORKERS[1]
    old_uid = deployed.pod_uid(victim)
    assert old_uid
    agent_log = LogStream(deployed, victim, "slonkd-agent", tmp_path / "agent.log")
    time.sleep(1)
    t_delete = time.time()
    deployed.kube.api.request("DELETE", f"/api/v1/namespaces/{deployed.ns}/pods/{victim}")
    try:
        wait_for(
            f"{victim} replaced and Ready",
            lambda: deployed.replaced_and_ready(victim, old_uid),
            timeout_s=120,
            interval_s=1,
        )
        wait_for("the old agent's log ended", agent_log.ended, timeout_s=30)
    except HarnessError:
        pytest.fail(deployed.diagnose())
    lines = agent_log.close()
    drains = [
        e
        for e in json_lines("\n".join(line for _, line in lines))
        if e.get("event") == "agent.mirror_applied" and e.get("action") == "drain"
    ]
    assert drains, lines[-10:]
    drain = drains[0]
    assert drain["node"] == victim, drain
    assert drain["pod"] == victim, drain
    assert drain["cause"] == "pod-terminating", drain
    assert drain["state_before"], drain
    assert "DRAIN" in drain["state_after"], drain
    # the sidecar outlived slurmd and stopped cleanly on its SIGTERM
    tail = [line for _, line in lines[-15:]]
    assert not any("Traceback" in line for _, line in lines), tail
    assert "agent.stopped" in [e.get("event") for e in json_lines("\n".join(tail))], tail
    t_drain = first(
        ctl_log(deployed, t_delete), f"node {victim} reason set to: slonkd:pod-terminating"
    )
    assert t_drain is not None
    DRAIN_MS.append(round((t_drain - t_delete) * 1000))
    wait_for(
        f"{victim} idle again",
        lambda: deployed.node_line(victim).split("|")[0] == "idle",
        timeout_s=60,
        interval_s=1,
    )


def _delete_watching_job(
    deployed: Release, victim: str, job: str, old_uid: str
) -> tuple[list[str], Callable[[], bool]]:
    """Delete pod ``victim``; returns the states of ``job`` seen (each change once) and a probe.

    The probe says whether the pod was replaced and is Ready; each call records the job's
    state first.
    """
    deployed.kube.api.request("DELETE", f"/api/v1/namespaces/{deployed.ns}/pods/{victim}")
    states: list[str] = []

    def replaced() -> bool:
        state = deployed.job_state(job)
        if not states or states[-1] != state:
            states.append(state)
        return deployed.replaced_and_ready(victim, old_uid)

    return states, replaced


def _workers_updated(deployed: Release) -> bool:
    """Every worker pod runs its StatefulSet's update revision and is Ready, nodes idle."""
    sts = deployed.kube.api.request(
        "GET", f"/apis/apps/v1/namespaces/{deployed.ns}/statefulsets/{RELEASE}-{POOL}"
    )
    want = sts["status"].get("updateRevision")
    pods = deployed.pods(**{"app.kubernetes.io/component": "slurmd"})
    if len(pods) != len(WORKERS):
        return False
    for pod in pods:
        if pod["metadata"]["labels"].get("controller-revision-hash") != want or not ready(pod):
            return False
    out = deployed.exec(CONTROLLER, "slurmctld", "sinfo", "-h", "-N", "-o", "%N %T")
    return all(line.split()[1] == "idle" for line in out.splitlines() if line.strip())


def test_without_the_prestop_the_dying_slurmd_takes_the_job_with_it(
    deployed: Release,
) -> None:
    """workers.prestop.enabled=false: the dying slurmd kills the job, nothing requeues it.

    helm upgrade; slonkd's rollout replaces the workers. Deleting the busy worker then kills
    the job with slurmd. Nothing requeues it: it never starts
    again and its heartbeat stops, while SLURM still counts it RUNNING on the new slurmd.
    This is what the preStop test above would see if the hook did nothing.
    """
    deployed.upgrade("workers.prestop.enabled=false")
    try:
        wait_for(
            "workers rolled to the no-preStop revision",
            lambda: _workers_updated(deployed),
            timeout_s=300,
            interval_s=2,
        )
    except HarnessError:
        pytest.fail(deployed.diagnose())
    victim = WORKERS[1]
    pod = next(p for p in deployed.pods() if p["metadata"]["name"] == victim)
    slurmd = next(c for c in pod["spec"]["containers"] if c["name"] == "slurmd")
    assert "lifecycle" not in slurmd, slurmd.get("lifecycle")
    job, beats = deployed.sbatch_heartbeat(victim)
    old_uid = str(pod["metadata"]["uid"])
    states, replaced = _delete_watching_job(deployed, victim, job, old_uid)
    wait_for(f"{victim} replaced and Ready", replaced, timeout_s=120, interval_s=1)
    size = len(beats.read_text())
    time.sleep(15)
    text = beats.read_text()
    fields = deployed.job(job)
    evidence = f"states {states}, now {fields.get('JobState')}, beats {text[-200:]!r}"
    assert len(text) == size, f"the job still beats: {evidence}"
    assert "start 1" not in text, f"requeued: {evidence}"
    assert fields.get("Restarts") == "0", f"requeued: {evidence}"
    assert not any(s.startswith(("PENDING", "REQUEUED")) for s in states), evidence
    deployed.exec(CONTROLLER, "slurmctld", "scancel", job)


def _leader(deployed: Release) -> str:
    lease = deployed.kube.api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{deployed.ns}/leases/{RELEASE}-coordinator"
    )
    return str(lease["spec"]["holderIdentity"])


def test_helm_upgrade_of_an_agent_setting_rolls_the_workers_one_at_a_time_killing_no_job(
    deployed: Release,
) -> None:
    """helm upgrade of an agent setting: a job-safe rollout, one worker at a time.

    The upgrade also turns the preStop back on. slonkd's rollout
    replaces the OnDelete workers one at a time, each after its running job finished
    (COMPLETED, never requeued or killed); `slonkd status` on the leader says complete.
    """
    jobs = {}
    for worker in WORKERS:
        out = deployed.ssh("sbatch", "-w", worker, "-o", "/dev/null", "--wrap='sleep 20'")
        jobs[worker] = out.strip().split()[-1]
    wait_for(
        "both jobs running",
        lambda: all(deployed.job_state(j).startswith("RUNNING") for j in jobs.values()),
        timeout_s=60,
        interval_s=1,
    )
    old = {w: deployed.pod_uid(w) for w in WORKERS}
    deployed.upgrade("workers.prestop.enabled=true", "agent.health.checks.fast_period_s=20")
    most_out = 0
    states: dict[str, list[str]] = {j: [] for j in jobs.values()}

    def rolled() -> bool:
        nonlocal most_out
        pods = {p["metadata"]["name"]: p for p in deployed.pods()}
        out = sum(1 for w in WORKERS if w not in pods or not ready(pods[w]))
        most_out = max(most_out, out)
        for job, seen in states.items():
            state = deployed.job_state(job).split(":")[0]
            if not seen or seen[-1] != state:
                seen.append(state)
        return _workers_updated(deployed)

    try:
        wait_for("the rollout replaced every worker", rolled, timeout_s=360, interval_s=1)
    except HarnessError:
        pytest.fail(f"jobs {states}\n{deployed.diagnose()}")
    assert all(deployed.pod_uid(w) != old[w] for w in WORKERS)
    assert most_out == 1, most_out
    for job, seen in states.items():
        assert seen[-1] == "COMPLETED", (job, seen)
        assert not [s for s in seen if s in BAD_STATES or s == "PENDING"], (job, seen)
        assert deployed.job(job)["Restarts"] == "0", job
    for worker in WORKERS:
        pod = next(p for p in deployed.pods() if p["metadata"]["name"] == worker)
        slurmd = next(c for c in pod["spec"]["containers"] if c["name"] == "slurmd")
        assert slurmd["lifecycle"]["preStop"]["exec"]["command"][:2] == ["slonkd", "prestop"]
    status = ""

    def complete() -> bool:
        nonlocal status
        status = deployed.exec(_leader(deployed), "coordinator", "slonkd", "status")
        return "rollout: 2 updated, complete" in status

    try:
        wait_for("slonkd status: rollout complete", complete, timeout_s=60, interval_s=2)
    except HarnessError:
        pytest.fail(status)


def _node_obj(deployed: Release) -> Obj:
    return dict(deployed.kube.api.request("GET", f"/api/v1/nodes/{deployed.node.name}"))


def test_slurmctld_restarting_ends_no_coordinator_and_the_change_poll_comes_back(
    deployed: Release,
) -> None:
    """slurmctld's pod replaced: no coordinator ends, and the leader's change poll returns.

    The chart's slurm.conf names slurmctld by its pod's DNS name (a headless Service): from
    the old pod's end until the new one has an address, that name does not resolve, and
    libslurm ends the process that asks (``fatal()``, exit 40). It used to ask from inside
    the coordinator, which the kubelet then restarted; a coordinator started in such a
    window (at install, on a busy machine) kept the scontrol poll for good (stop 35's CI).
    Now the library lives in a child process that the coordinator starts again.

    Before the SLURM failure test, which leaves the only node cordoned: slurmctld's new pod
    could not be placed after it.
    """
    coords = {"app.kubernetes.io/component": "coordinator"}

    def restarts() -> dict[str, int]:
        return {
            p["metadata"]["name"]: sum(
                c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])
            )
            for p in deployed.pods(**coords)
        }

    def passes() -> dict[str, Any]:
        shown = deployed.exec(leader, "coordinator", "slonkd", "status", "-o", "json")
        return dict(json.loads(shown)["passes"])

    leader = _leader(deployed)
    before = restarts()
    old = deployed.pod_uid(CONTROLLER)
    assert old is not None
    deployed.delete_pod(CONTROLLER)
    wait_for(
        "slurmctld replaced and ready",
        lambda: deployed.replaced_and_ready(CONTROLLER, old),
        timeout_s=240,
        interval_s=1,
    )
    add_account(deployed, CONTROLLER, "slurmctld")  # the user's, lost with the old pod
    asked = passes()["slurm_change_polls"]
    try:
        wait_for(
            "the leader's change poll answering again",
            lambda: passes()["slurm_change_polls"] > asked + 5,
            timeout_s=120,
            interval_s=2,
        )
    except HarnessError:
        pytest.fail(f"{passes()}\n{deployed.diagnose()}")
    assert restarts() == before, deployed.diagnose()
    assert _leader(deployed) == leader
    shown = passes()
    assert shown["slurm_poll_backend"] == "libslurm", shown
    said = [
        line
        for line in deployed.logs(leader, "coordinator").splitlines()
        if "libslurm_child" in line
    ]
    print(f"[chart-real] the leader's libslurm child across slurmctld's restart: {said[-3:]}")
    wait_for(  # the next test starts from settled workers
        "every worker idle under the new slurmctld",
        lambda: all(deployed.sinfo_states().get(w) == "idle" for w in WORKERS),
        timeout_s=120,
        interval_s=2,
    )
    assert not _node_obj(deployed)["spec"].get("unschedulable"), "marked by the restart"


def _events(deployed: Release, pod: str, container: str, event: str) -> list[Obj]:
    return [e for e in json_lines(deployed.logs(pod, container)) if e.get("event") == event]


def test_a_certificate_rotation_keeps_every_agent_on_the_bus_and_loses_no_command(
    deployed: Release,
) -> None:
    """A rotation to a new CA's certificate: no agent leaves the bus, no command is lost.

    The TLS Secret the Job made gets a new CA's certificate and key, its CA bundle
    overlapping (old and new CA). The kubelet updates the mounted files (syncFrequency 10 s);
    the broker pod's tls-reload sidecar sends mosquitto SIGHUP (it keeps its connections) and
    the coordinator's API loads the new pair in place. Shown: every agent's count of bus
    connections is the same after (no reconnect at all); a new connection that trusts only the
    NEW CA reads the broker (it serves the new certificate) and one trusting only the old CA
    is refused; a ``recheck`` sent after the rotation through the leader's HTTPS API (verified
    with the bundle) is obeyed by the agent, whose answering status is read through a new
    connection.
    """
    from cryptography import x509  # the product's own dependency (core.tls_material)

    from slonkd.core.tls_material import make_tls_data

    path = f"/api/v1/namespaces/{deployed.ns}/secrets/{RELEASE}-tls"
    old = deployed.kube.api.request("GET", path)
    old_ca = base64.b64decode(old["data"]["ca.crt"])
    leaf = x509.load_pem_x509_certificate(base64.b64decode(old["data"]["tls.crt"]))
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    new = make_tls_data(
        names.get_values_for_type(x509.DNSName), 30, now=datetime.now(UTC), label="rotated"
    )
    agents = [
        p["metadata"]["name"] for p in deployed.pods(**{"app.kubernetes.io/component": "slurmd"})
    ]

    def bus_lines() -> dict[str, tuple[int, int]]:
        """Per agent: how many bus.connected and bus.reconnecting lines its log has."""
        return {
            a: (
                len(_events(deployed, a, AGENT, "bus.connected")),
                len(_events(deployed, a, AGENT, "bus.reconnecting")),
            )
            for a in agents
        }

    connects = bus_lines()
    assert all(c for c, _ in connects.values()), connects
    leader = _leader(deployed)
    (broker,) = [
        p["metadata"]["name"] for p in deployed.pods(**{"app.kubernetes.io/component": "mosquitto"})
    ]
    data = {"ca.crt": old_ca + new["ca.crt"], "tls.crt": new["tls.crt"], "tls.key": new["tls.key"]}
    deployed.kube.api.request(
        "PATCH", path, {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}},
        content_type="application/merge-patch+json",
    )  # fmt: skip
    wait_for(
        "mosquitto signalled",
        lambda: bool(_events(deployed, broker, "tls-reload", "tls.signalled")),
        timeout_s=120,
        interval_s=2,
    )
    wait_for(
        "the API's new certificate loaded",
        lambda: bool(_events(deployed, leader, "coordinator", "tls.reloaded")),
        timeout_s=60,
        interval_s=2,
    )
    node = agents[0]
    topic = node_topic(CLUSTER, node, Channel.STATUS)
    assert retained(deployed, str(topic), ca_pem=new["ca.crt"])  # the new certificate is served
    with pytest.raises(HarnessError):  # control: the old CA alone no longer verifies it
        retained(deployed, str(topic), ca_pem=old_ca)
    sent = json.loads(deployed.exec(leader, "coordinator", "slonkd", "recheck", node))

    def answered() -> bool:
        raw = retained(deployed, str(topic), ca_pem=new["ca.crt"])
        status = decode(topic, raw) if raw else None
        return isinstance(status, AgentStatus) and status.answers == sent["id"]

    wait_for("the recheck answered on the bus", answered, timeout_s=60, interval_s=1)
    assert bus_lines() == connects, "an agent reconnected during the rotation"


def test_a_slurm_failure_on_a_worker_marks_the_real_node_with_at_most_one_eviction(
    deployed: Release,
) -> None:
    """A SLURM failure on a settled worker: the real K8s node is marked, one eviction at most.

    After scontrol update state=fail the coordinator cordons the real K8s node, taints it
    slonk.dev/unhealthy, sets SlurmHealthy=False, records an Event on the Node object and
    evicts at most one pod (the failed worker's); the healthy worker on the same K8s node does
    not lift the marks. The leader's poll is the change poll on the image's libslurm.

    Last in the module: the only node stays cordoned (the evicted pod cannot come back).
    """
    victim, other = WORKERS[1], WORKERS[0]
    pod = next(p for p in deployed.pods() if p["metadata"]["name"] == victim)
    ready_at = next(
        cri_time(c["lastTransitionTime"])
        for c in pod["status"]["conditions"]
        if c["type"] == "Ready"
    )
    time.sleep(max(0.0, ready_at + FAILURE_GRACE_S + 3 - time.time()))
    uids = {w: {deployed.pod_uid(w)} for w in WORKERS}
    t0 = time.time() - 2
    deployed.exec(
        CONTROLLER,
        "slurmctld",
        "scontrol",
        "update",
        f"nodename={victim}",
        "state=fail",
        "reason=Kill task failed",
    )
    seen: dict[str, Any] = {}

    name = deployed.node.name

    def marked() -> bool:
        node = _node_obj(deployed)
        for w in WORKERS:
            uid = deployed.pod_uid(w)
            if uid is not None:
                uids[w].add(uid)
        seen["cordoned"] = bool(node["spec"].get("unschedulable"))
        seen["taints"] = [t["key"] for t in node["spec"].get("taints", [])]
        seen["condition"] = next(
            (
                c["status"]
                for c in node["status"].get("conditions", [])
                if c["type"] == "SlurmHealthy"
            ),
            None,
        )
        events = deployed.kube.api.request(
            "GET",
            "/api/v1/events",
            params={"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={name}"},
        )["items"]
        seen["events"] = [
            f"{e.get('reason')}: {e.get('message', '')[:80]}"
            for e in events
            if "slurm" in f"{e.get('reason')} {e.get('message')}".lower()
        ]
        return (
            seen["cordoned"]
            and "slonk.dev/unhealthy" in seen["taints"]
            and seen["condition"] == "False"
            and bool(seen["events"])
        )

    try:
        wait_for("the real node marked unhealthy", marked, timeout_s=90, interval_s=1)
    except HarnessError:
        pytest.fail(f"{seen}\n{deployed.diagnose()}")
    end = time.monotonic() + 20
    while time.monotonic() < end:  # a repeat, or the marks lifted by a sibling, shows here
        # the other worker is healthy on the same K8s node: its pass must not undo the marks
        # made for the victim's failure (it did: uncordon + untaint 5 s after the marks)
        assert marked(), f"the marks were lifted while SLURM's failure stood: {seen}"
        time.sleep(1)
    assert len(uids[victim]) <= 2, f"{victim} evicted more than once: {uids[victim]}"
    assert len(uids[other]) == 1, f"{other} evicted: {uids[other]}"
    assert t0 < time.time()
    # the coordinator image's own libslurm answered the change poll (the default) for the
    # chart's slurmctld: the scontrol poll is only its fallback
    leader = _leader(deployed)
    passes = json.loads(deployed.exec(leader, "coordinator", "slonkd", "status", "-o", "json"))[
        "passes"
    ]
    said = [
        line
        for line in deployed.logs(leader, "coordinator").splitlines()
        if "libslurm" in line or "change_poll" in line
    ]
    print(f"[chart-real] the leader's change poll: {said[-3:]}")
    if passes["slurm_poll_backend"] != "libslurm":  # why, in full: the log's lines on it
        pytest.fail(f"{passes['slurm_poll_why']!r}, polls {passes['slurm_polls']}: {said[-8:]}")
    assert passes["slurm_poll_why"] == "", passes
    assert passes["slurm_change_polls"] > 0, passes

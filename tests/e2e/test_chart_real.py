"""The chart as users deploy it, on a real kubelet node: real images, containers and DNS.

One ``helm install`` of ``deploy/helm/slonk`` for the module, on a :class:`RealNode`
(containerd, runc, kubelet, CoreDNS) with a control plane of its own. The images are
``container/build.sh``'s, imported with ``ctr`` (:mod:`slonkd.testing.chart_images`) and
selected by ``ci/local-images-values.yaml`` (``imagePullPolicy: Never``). Nothing is replaced:
slurmctld, slurmd, munged, mosquitto, the coordinators and the agent sidecars are the
images' own processes; names resolve through CoreDNS and headless Services; the two
claims are bound to ``local`` PersistentVolumes on the node, as an administrator without a
provisioner would make them. Only the node's size is told to the chart (no GPUs, the
machine's CPUs, 1 GiB per SLURM node) and where pods reach the API by name
(``kubernetesService``: no kube-proxy runs here, so no request ever goes to a ClusterIP).

A user (the site's directory service, played by ``useradd`` on the login and controller
pods) has a home on a third ``local`` volume behind ``home.existingClaim``; the harness
reaches the login pod's sshd from inside the node's network namespace (a pod address, never
off the machine) with a key in that home. The tests run in order on the one release: the
preStop requeue, the agent's log, the same deletion with ``workers.prestop.enabled: false``
(after slonkd's rollout), a ``helm upgrade`` rollout that puts it back, and last a SLURM
failure that cordons the only node. About 8 minutes with the images cached.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd.testing.chart_images import ensure_chart_images, image_values, import_images
from slonkd.testing.helm import CHART_DIR, Helm, value_args
from slonkd.testing.kube import KubeCluster
from slonkd.testing.procs import HarnessError, wait_for
from slonkd.testing.realnode import API_HOST, API_PORT, RealNode

# The first test's setup builds the images when this tree changed them (scripts/bootstrap
# builds them ahead; cold about 6 minutes on 2 cores) and starts the node: more than the
# default 300 s per test.
pytestmark = [pytest.mark.kube, pytest.mark.timeout(1200)]

RELEASE = "rel"
POOL = "cpu"
WORKERS = (f"{RELEASE}-{POOL}-0", f"{RELEASE}-{POOL}-1")
CONTROLLER = f"{RELEASE}-slurmctld-0"
READY_TIMEOUT_S = 420.0
LOCAL_IMAGES = CHART_DIR / "ci" / "local-images-values.yaml"
HOME_CLAIM = "home"
USER = "alice"
USER_ID = 2001
GRACE_S = 24
MARGIN_S = 8
FAILURE_GRACE_S = 10
BAD_STATES = ("FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL", "OUT_OF_MEMORY")
Obj = dict[str, Any]


@dataclass(slots=True)
class Deployed:
    """The installed release on the real node, with what it took to get there."""

    node: RealNode
    kube: KubeCluster
    ns: str
    helm: Helm
    values: list[str]
    home: Path
    """The shared home volume's directory on the node (``/home`` in login and worker pods)."""
    ssh_key: Path
    timings: dict[str, float] = field(default_factory=dict)
    drain_ms: list[float] = field(default_factory=list)
    """Pod DELETE -> slurmctld logs slonkd's drain reason, per deletion with preStop."""

    def upgrade(self, *set_json: str) -> None:
        """``helm upgrade`` of the release with the install's values plus ``set_json``."""
        self.helm.run(
            "upgrade",
            RELEASE,
            str(CHART_DIR),
            f"--namespace={self.ns}",
            *self.values,
            *(f"--set-json={s}" for s in set_json),
        )

    def ssh(self, *command: str, timeout_s: float = 60) -> str:
        """Run ``command`` on the login pod over SSH as the unprivileged user (key in its home)."""
        login = self.pods(**{"app.kubernetes.io/component": "login"})[0]
        argv = self.node.nsexec(
            "ssh",
            "-i",
            str(self.ssh_key),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ConnectTimeout=10",
            f"{USER}@{login['status']['podIP']}",
            *command,
        )
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        if proc.returncode != 0:
            raise HarnessError(f"ssh {' '.join(command)}: rc {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def pods(self, **labels: str) -> list[Obj]:
        """The release's pods, optionally filtered by more labels."""
        sel = ",".join(
            [f"app.kubernetes.io/instance={RELEASE}", *(f"{k}={v}" for k, v in labels.items())]
        )
        path = f"/api/v1/namespaces/{self.ns}/pods"
        return list(self.kube.api.request("GET", path, params={"labelSelector": sel})["items"])

    def exec(self, pod: str, container: str, *argv: str, timeout_s: float = 60) -> str:
        """Run ``argv`` in a container through the apiserver and the kubelet (kubectl exec)."""
        out = self.kube.kubectl(
            "exec",
            f"--namespace={self.ns}",
            pod,
            "-c",
            container,
            "--",
            *argv,
            timeout_s=timeout_s,
        )
        return out.stdout

    def logs(self, pod: str, container: str) -> str:
        """A container's log through the apiserver (the kubelet serves it)."""
        path = f"/api/v1/namespaces/{self.ns}/pods/{pod}/log"
        return str(self.kube.api.request("GET", path, params={"container": container}))

    def diagnose(self) -> str:
        """Every pod's container states and each unready container's last log lines."""
        lines = []
        for pod in self.pods():
            name = pod["metadata"]["name"]
            status = pod.get("status", {})
            lines.append(f"pod {name}: {status.get('phase')}")
            for cond in status.get("conditions", []):
                if cond.get("status") != "True":
                    lines.append(
                        f"  {cond['type']}=False {cond.get('reason', '')} {cond.get('message', '')}"
                    )
            for cs in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
                lines.append(
                    f"  {cs['name']}: ready={cs.get('ready')} restarts={cs.get('restartCount')} "
                    f"state={json.dumps(cs.get('state'))[:300]} "
                    f"last={json.dumps(cs.get('lastState'))[:300]}"
                )
                if not cs.get("ready"):
                    try:
                        tail = self.logs(name, cs["name"]).splitlines()[-8:]
                    except Exception as exc:  # noqa: BLE001 - diagnostics only
                        tail = [f"(no log: {exc})"]
                    lines += [f"    | {ln[:300]}" for ln in tail]
        events = self.kube.kubectl(
            "get", "events", f"--namespace={self.ns}", "--sort-by=.lastTimestamp", check=False
        ).stdout.splitlines()[-25:]
        return "\n".join([*lines, "events:", *events])


def _ready(pod: Obj) -> bool:
    conds = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _local_volumes(node: RealNode, ns: str) -> Path:
    """``local`` PersistentVolumes on the node, pre-bound to the chart's claims and the home's.

    The home claim is ReadWriteMany, as ``home.existingClaim`` wants (the chart only names it);
    returns the home volume's directory.
    """
    made: list[Path] = []
    for claim, modes in (
        (f"state-{RELEASE}-slurmctld-0", ["ReadWriteOnce"]),
        (f"{RELEASE}-mosquitto-data", ["ReadWriteOnce"]),
        (HOME_CLAIM, ["ReadWriteMany"]),
    ):
        name = f"pv-{ns}-{len(made)}"
        path = node.hostpath_dir / name
        path.mkdir(parents=True)
        node.cluster.api.request(
            "POST",
            "/api/v1/persistentvolumes",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": modes,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "local": {"path": str(path)},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": [node.name],
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                    "claimRef": {"namespace": ns, "name": claim},
                },
            },
        )
        made.append(path)
    # The site's home claim (the chart only names it).
    node.cluster.api.request(
        "POST",
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": HOME_CLAIM},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": f"pv-{ns}-2",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return made[2]


def _add_user(deployed: Deployed) -> None:
    """The site's directory service, played by hand: USER's account and home.

    The account on the login pod (sshd, sbatch) and slurmctld (uid -> name); the home with an
    authorized key and the job script on the shared volume.

    Workers need no account: slurmd takes the job's identity from slurmctld's credential.
    """
    home = deployed.home / USER
    (home / ".ssh").mkdir(parents=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(deployed.ssh_key)],
        check=True,
        timeout=30,
    )
    pub = deployed.ssh_key.with_suffix(".pub").read_text()
    (home / ".ssh" / "authorized_keys").write_text(pub)
    (home / "hb.sh").write_text(HEARTBEAT_SCRIPT)
    for path in (home, home / ".ssh", home / ".ssh" / "authorized_keys", home / "hb.sh"):
        os.chown(path, USER_ID, USER_ID)
    (home / ".ssh").chmod(0o700)
    (home / "hb.sh").chmod(0o755)
    for pod, container in ((f"{RELEASE}-login-0", "login"), (CONTROLLER, "slurmctld")):
        deployed.exec(
            pod,
            container,
            "useradd",
            "-M",
            "-d",
            f"/home/{USER}",
            "-s",
            "/bin/sh",
            "-u",
            str(USER_ID),
            "-U",
            USER,
        )


HEARTBEAT_SCRIPT = f"""#!/bin/sh
# A job that says when it (re)starts and then beats once a second, in the shared home.
f=/home/{USER}/hb-$SLURM_JOB_ID
echo "start ${{SLURM_RESTART_COUNT:-0}} $SLURMD_NODENAME" >> $f
while :; do date +%s >> $f; sleep 1; done
"""


def _values(tmp: Path) -> Path:
    values = {
        "kubernetesService": {"host": API_HOST, "port": API_PORT},
        "pools": [
            {
                "name": POOL,
                "replicas": len(WORKERS),
                "gpus": 0,
                "cpus": os.cpu_count() or 1,
                "realMemoryMB": 1024,
            }
        ],
        # preStop drains, waits for jobs until grace - margin, then requeues.
        "workers": {
            "terminationGracePeriodSeconds": GRACE_S,
            "prestop": {"marginSeconds": MARGIN_S},
        },
        "controller": {"persistence": {"size": "1Gi"}},
        "home": {"existingClaim": HOME_CLAIM},
        # Both workers share the one K8s node: cordoning it takes the whole pool out, which
        # the default budget (10 %, mass 20 %) rightly refuses as a mass event.
        "coordinator": {
            "failureGraceSeconds": FAILURE_GRACE_S,
            "budget": {"maxOut": 10, "maxOutPercent": 100, "massPercent": 100},
        },
        "agent": {
            "health": {"nvidiaVisibleDevices": "", "checks": {"dcgm": False, "fabric": False}}
        },
    }
    path = tmp / "node-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.fixture(scope="module")
def deployed(session_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    """The chart installed once on a fresh real node; every pod Ready (or a diagnosis)."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    images = ensure_chart_images()
    timings["images_build_or_cache_s"] = time.monotonic() - t0
    tag = secrets.token_hex(3)
    kube = KubeCluster(session_root / f"crk-{tag}")
    node = RealNode(session_root / f"crn-{tag}", cluster=kube)
    try:
        kube.start()
        node.start()
        t0 = time.monotonic()
        imported = import_images(node, images)
        timings["image_import_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        assert import_images(node, images) == []  # by content key: nothing twice
        timings["image_import_again_s"] = time.monotonic() - t0
        assert len(imported) == len(images)
        ns = f"chart-{tag}"
        kube.create_namespace(ns)
        home = _local_volumes(node, ns)
        tmp = tmp_path_factory.mktemp("chart-real")
        assert kube.tools is not None
        helm = Helm(binary=kube.tools.helm, home=tmp / "helm", kubeconfig=kube.kubeconfig)
        values = value_args([LOCAL_IMAGES, _values(tmp)], image_values(images))
        deployed = Deployed(
            node=node,
            kube=kube,
            ns=ns,
            helm=helm,
            values=values,
            home=home,
            ssh_key=tmp / "id_ed25519",
            timings=timings,
        )
        t0 = time.monotonic()
        helm.run("install", RELEASE, str(CHART_DIR), f"--namespace={ns}", *values)

        def all_ready() -> bool:
            pods = deployed.pods()
            # slurmctld, 2 workers, login, 2 coordinators, mosquitto
            return len(pods) == 7 and all(_ready(p) for p in pods)

        try:
            wait_for(
                "every pod of the release Ready", all_ready, timeout_s=READY_TIMEOUT_S, interval_s=1
            )
        except HarnessError as exc:
            pytest.fail(f"{exc}\n{deployed.diagnose()}")
        timings["install_to_ready_s"] = time.monotonic() - t0
        _add_user(deployed)
        print(f"\n[chart-real] timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
        yield deployed
        print(f"\n[chart-real] drain latency ms (DELETE -> slurmctld): {deployed.drain_ms}")
    finally:
        try:
            node.stop()
        finally:
            kube.stop()


@pytest.fixture(autouse=True)
def _no_job_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, cancel USER's jobs: one left running would hold the next rollout."""
    yield
    if "deployed" in request.fixturenames:
        _cancel_all(request.getfixturevalue("deployed"))


def test_slurmctld_runs_and_every_worker_is_slurmd_plus_agent_and_idle(deployed: Deployed) -> None:
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
    deployed: Deployed,
) -> None:
    """The chart's Lease names one of the two Ready coordinator pods as holder."""
    coords = deployed.pods(**{"app.kubernetes.io/component": "coordinator"})
    names = {p["metadata"]["name"] for p in coords}
    assert len(names) == 2
    assert all(_ready(p) for p in coords)
    lease = deployed.kube.api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{deployed.ns}/leases/{RELEASE}-coordinator"
    )
    assert lease["spec"]["holderIdentity"] in names, lease["spec"]


def test_every_agent_got_its_mqtt_credentials_from_the_coordinator(deployed: Deployed) -> None:
    """Each agent sidecar logged bus.bootstrap_done: /v1/credentials took its projected token."""
    for pod in WORKERS:

        def bootstrapped(pod: str = pod) -> list[Obj]:
            return [
                e
                for e in _json_lines(deployed.logs(pod, "slonkd-agent"))
                if e.get("event") == "bus.bootstrap_done"
            ]

        try:
            wait_for(f"{pod}'s agent bootstrapped", lambda: bool(bootstrapped()), timeout_s=60)
        except HarnessError:
            pytest.fail(
                f"{pod}: no bus.bootstrap_done\n"
                + "\n".join(deployed.logs(pod, "slonkd-agent").splitlines()[-20:])
            )
        done = bootstrapped()
        assert done[0]["cluster"] == "slonk"
        assert done[0]["username"]


def _json_lines(text: str) -> list[Obj]:
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def _job(deployed: Deployed, job: str) -> dict[str, str]:
    out = deployed.exec(CONTROLLER, "slurmctld", "scontrol", "-o", "show", "job", job)
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def _job_state(deployed: Deployed, job: str) -> str:
    fields = _job(deployed, job)
    return f"{fields.get('JobState', '?')}:{fields.get('Reason', '')}:{fields.get('NodeList', '')}"


def _cri_time(stamp: str) -> float:
    """A CRI log line's RFC 3339 nanosecond stamp as a Unix time (microseconds kept)."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()


def _stamped(text: str) -> list[tuple[float, str]]:
    """``kubectl logs --timestamps`` output as (time, line) pairs."""
    out = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            out.append((_cri_time(stamp), rest))
        except ValueError:
            continue
    return out


class LogStream:
    """``kubectl logs -f --timestamps`` of one container, written to a file.

    The apiserver streams the log from the kubelet until the container exits.
    """

    def __init__(self, deployed: Deployed, pod: str, container: str, path: Path) -> None:
        self.path = path
        self._out = path.open("w")
        self.proc = subprocess.Popen(
            [
                str(deployed.kube.kubectl_path),
                f"--kubeconfig={deployed.kube.kubeconfig}",
                f"--namespace={deployed.ns}",
                "logs",
                "-f",
                "--timestamps",
                pod,
                "-c",
                container,
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def ended(self) -> bool:
        """The container exited (the stream ended)."""
        return self.proc.poll() is not None

    def close(self) -> list[tuple[float, str]]:
        """Stop streaming; the (time, line) pairs received."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._out.close()
        return _stamped(self.path.read_text())


def _ctl_log(deployed: Deployed, since: float) -> list[tuple[float, str]]:
    out = deployed.kube.kubectl(
        "logs", f"--namespace={deployed.ns}", CONTROLLER, "-c", "slurmctld", "--timestamps"
    ).stdout
    return [(t, line) for t, line in _stamped(out) if t >= since]


def _first(lines: list[tuple[float, str]], *needles: str) -> float | None:
    return next((t for t, line in lines if all(n in line for n in needles)), None)


def _sbatch_heartbeat(deployed: Deployed, node: str) -> tuple[str, Path]:
    """Submit the heartbeat job to ``node`` over SSH from USER's home; wait until it beats."""
    out = deployed.ssh("sbatch", "--requeue", "-w", node, "-o", "/dev/null", "hb.sh")
    job = out.strip().split()[-1]
    beats = deployed.home / USER / f"hb-{job}"
    queue = deployed.ssh("squeue", "-h", "-o", "%i:%u:%T:%N")
    assert f"{job}:{USER}:" in queue, f"squeue over SSH: {queue}"
    wait_for(
        f"job {job} running and beating",
        lambda: (
            _job_state(deployed, job).startswith("RUNNING")
            and beats.exists()
            and len(beats.read_text().splitlines()) >= 2
        ),
        timeout_s=60,
        interval_s=1,
    )
    return job, beats


def _cancel_all(deployed: Deployed) -> None:
    """Cancel every job of USER (what a test left behind would hold up the next one)."""
    deployed.exec(CONTROLLER, "slurmctld", "scancel", f"--user={USER}")


def _pod_uid(deployed: Deployed, name: str) -> str | None:
    pod = next((p for p in deployed.pods() if p["metadata"]["name"] == name), None)
    return None if pod is None else str(pod["metadata"]["uid"])


def _replaced_and_ready(deployed: Deployed, name: str, old_uid: str) -> bool:
    pod = next((p for p in deployed.pods() if p["metadata"]["name"] == name), None)
    return pod is not None and pod["metadata"]["uid"] != old_uid and _ready(pod)


def _node_line(deployed: Deployed, node: str) -> str:
    out = deployed.exec(CONTROLLER, "slurmctld", "sinfo", "-h", "-n", node, "-o", "%T|%100E")
    return out.strip()


def test_a_job_sbatched_over_ssh_is_requeued_by_the_prestop_before_slurmd_exits(
    deployed: Deployed, tmp_path: Path
) -> None:
    """USER sbatches a --requeue job over SSH on the login pod; kubectl delete of its worker.

    The kubelet runs `slonkd prestop`: slurmctld logs slonkd's drain reason and the DOWN
    before the slurmd container's log says slurmd shut down (CRI stamps of both logs); the
    job is requeued, never FAILED, CANCELLED or NODE_FAIL; the new pod's agent resumes the
    node and the job runs again there (its second start in the shared home).
    """
    victim = WORKERS[0]
    job, beats = _sbatch_heartbeat(deployed, victim)
    old_uid = _pod_uid(deployed, victim)
    assert old_uid
    slurmd_log = LogStream(deployed, victim, "slurmd", tmp_path / "slurmd.log")
    time.sleep(1)  # the stream is open before the DELETE
    t_delete = time.time()
    deployed.kube.api.request("DELETE", f"/api/v1/namespaces/{deployed.ns}/pods/{victim}")
    states: list[str] = []

    def replaced() -> bool:
        state = _job_state(deployed, job)
        if not states or states[-1] != state:
            states.append(state)
        return _replaced_and_ready(deployed, victim, old_uid)

    try:
        wait_for(f"{victim} replaced and Ready", replaced, timeout_s=180, interval_s=1)
        wait_for("the old slurmd's log ended", slurmd_log.ended, timeout_s=30)
    except HarnessError:
        pytest.fail(f"job states {states}\n{deployed.diagnose()}")
    slurmd_lines = slurmd_log.close()
    ctl = _ctl_log(deployed, t_delete)
    t_exit = _first(slurmd_lines, "Slurmd shutdown completing")
    t_drain = _first(ctl, f"node {victim} reason set to: slonkd:pod-terminating")
    t_down = _first(ctl, f"node {victim} state set to DOWN")
    evidence = f"states {states}\nslurmctld: {ctl[-12:]}\nslurmd: {slurmd_lines[-6:]}"
    assert t_exit is not None, evidence
    assert t_drain is not None, evidence
    assert t_down is not None, evidence
    assert t_drain < t_down < t_exit, evidence
    deployed.drain_ms.append(round((t_drain - t_delete) * 1000))
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
    except HarnessError:
        pytest.fail(f"{_job_state(deployed, job)} node {_node_line(deployed, victim)}")
    assert _job(deployed, job)["Restarts"] == "1"
    assert _node_line(deployed, victim).split("|")[0] in ("mixed", "allocated"), _node_line(
        deployed, victim
    )
    deployed.ssh("scancel", job)


def test_the_agent_log_through_the_kubelet_shows_the_drain_as_json(
    deployed: Deployed, tmp_path: Path
) -> None:
    """kubectl logs -c slonkd-agent of a deleted worker: the drain as one JSON line.

    With node, pod, cause and the SLURM state before and after; the replacement comes back idle.
    """
    victim = WORKERS[1]
    old_uid = _pod_uid(deployed, victim)
    assert old_uid
    agent_log = LogStream(deployed, victim, "slonkd-agent", tmp_path / "agent.log")
    time.sleep(1)
    t_delete = time.time()
    deployed.kube.api.request("DELETE", f"/api/v1/namespaces/{deployed.ns}/pods/{victim}")
    try:
        wait_for(
            f"{victim} replaced and Ready",
            lambda: _replaced_and_ready(deployed, victim, old_uid),
            timeout_s=120,
            interval_s=1,
        )
        wait_for("the old agent's log ended", agent_log.ended, timeout_s=30)
    except HarnessError:
        pytest.fail(deployed.diagnose())
    lines = agent_log.close()
    drains = [
        e
        for e in _json_lines("\n".join(line for _, line in lines))
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
    assert "agent.stopped" in [e.get("event") for e in _json_lines("\n".join(tail))], tail
    t_drain = _first(
        _ctl_log(deployed, t_delete), f"node {victim} reason set to: slonkd:pod-terminating"
    )
    assert t_drain is not None
    deployed.drain_ms.append(round((t_drain - t_delete) * 1000))
    wait_for(
        f"{victim} idle again",
        lambda: _node_line(deployed, victim).split("|")[0] == "idle",
        timeout_s=60,
        interval_s=1,
    )


def _workers_updated(deployed: Deployed) -> bool:
    """Every worker pod runs its StatefulSet's update revision and is Ready, nodes idle."""
    sts = deployed.kube.api.request(
        "GET", f"/apis/apps/v1/namespaces/{deployed.ns}/statefulsets/{RELEASE}-{POOL}"
    )
    want = sts["status"].get("updateRevision")
    pods = deployed.pods(**{"app.kubernetes.io/component": "slurmd"})
    if len(pods) != len(WORKERS):
        return False
    for pod in pods:
        if pod["metadata"]["labels"].get("controller-revision-hash") != want or not _ready(pod):
            return False
    out = deployed.exec(CONTROLLER, "slurmctld", "sinfo", "-h", "-N", "-o", "%N %T")
    return all(line.split()[1] == "idle" for line in out.splitlines() if line.strip())


def test_without_the_prestop_the_dying_slurmd_takes_the_job_with_it(
    deployed: Deployed,
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
    job, beats = _sbatch_heartbeat(deployed, victim)
    old_uid = str(pod["metadata"]["uid"])
    deployed.kube.api.request("DELETE", f"/api/v1/namespaces/{deployed.ns}/pods/{victim}")
    states: list[str] = []

    def replaced() -> bool:
        state = _job_state(deployed, job)
        if not states or states[-1] != state:
            states.append(state)
        return _replaced_and_ready(deployed, victim, old_uid)

    wait_for(f"{victim} replaced and Ready", replaced, timeout_s=120, interval_s=1)
    size = len(beats.read_text())
    time.sleep(15)
    text = beats.read_text()
    fields = _job(deployed, job)
    evidence = f"states {states}, now {fields.get('JobState')}, beats {text[-200:]!r}"
    assert len(text) == size, f"the job still beats: {evidence}"
    assert "start 1" not in text, f"requeued: {evidence}"
    assert fields.get("Restarts") == "0", f"requeued: {evidence}"
    assert not any(s.startswith(("PENDING", "REQUEUED")) for s in states), evidence
    deployed.exec(CONTROLLER, "slurmctld", "scancel", job)


def _leader(deployed: Deployed) -> str:
    lease = deployed.kube.api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{deployed.ns}/leases/{RELEASE}-coordinator"
    )
    return str(lease["spec"]["holderIdentity"])


def test_helm_upgrade_of_an_agent_setting_rolls_the_workers_one_at_a_time_killing_no_job(
    deployed: Deployed,
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
        lambda: all(_job_state(deployed, j).startswith("RUNNING") for j in jobs.values()),
        timeout_s=60,
        interval_s=1,
    )
    old = {w: _pod_uid(deployed, w) for w in WORKERS}
    deployed.upgrade("workers.prestop.enabled=true", "agent.health.checks.fast_period_s=20")
    most_out = 0
    states: dict[str, list[str]] = {j: [] for j in jobs.values()}

    def rolled() -> bool:
        nonlocal most_out
        pods = {p["metadata"]["name"]: p for p in deployed.pods()}
        out = sum(1 for w in WORKERS if w not in pods or not _ready(pods[w]))
        most_out = max(most_out, out)
        for job, seen in states.items():
            state = _job_state(deployed, job).split(":")[0]
            if not seen or seen[-1] != state:
                seen.append(state)
        return _workers_updated(deployed)

    try:
        wait_for("the rollout replaced every worker", rolled, timeout_s=360, interval_s=1)
    except HarnessError:
        pytest.fail(f"jobs {states}\n{deployed.diagnose()}")
    assert all(_pod_uid(deployed, w) != old[w] for w in WORKERS)
    assert most_out == 1, most_out
    for job, seen in states.items():
        assert seen[-1] == "COMPLETED", (job, seen)
        assert not [s for s in seen if s in BAD_STATES or s == "PENDING"], (job, seen)
        assert _job(deployed, job)["Restarts"] == "0", job
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


def _node_obj(deployed: Deployed) -> Obj:
    return dict(deployed.kube.api.request("GET", f"/api/v1/nodes/{deployed.node.name}"))


def test_a_slurm_failure_on_a_worker_marks_the_real_node_with_at_most_one_eviction(
    deployed: Deployed,
) -> None:
    """A SLURM failure on a settled worker: the real K8s node is marked, one eviction at most.

    After scontrol update state=fail the coordinator cordons the real K8s node, taints it
    slonk.dev/unhealthy, sets SlurmHealthy=False, records an Event on the Node object and
    evicts at most one pod (the failed worker's).

    Last in the module: the only node stays cordoned (the evicted pod cannot come back).
    """
    victim, other = WORKERS[1], WORKERS[0]
    pod = next(p for p in deployed.pods() if p["metadata"]["name"] == victim)
    ready_at = next(
        _cri_time(c["lastTransitionTime"])
        for c in pod["status"]["conditions"]
        if c["type"] == "Ready"
    )
    time.sleep(max(0.0, ready_at + FAILURE_GRACE_S + 3 - time.time()))
    uids = {w: {_pod_uid(deployed, w)} for w in WORKERS}
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
            uid = _pod_uid(deployed, w)
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
    while time.monotonic() < end:  # a repeat would show in this window
        marked()
        time.sleep(1)
    assert len(uids[victim]) <= 2, f"{victim} evicted more than once: {uids[victim]}"
    assert len(uids[other]) == 1, f"{other} evicted: {uids[other]}"
    assert t0 < time.time()

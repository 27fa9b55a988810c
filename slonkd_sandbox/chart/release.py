"""The slonk chart installed on a real kubelet node: one release, its pods, its user.

:func:`install` starts a control plane (:class:`~slonkd_sandbox.kube.cluster.KubeCluster`) and a
:class:`~slonkd_sandbox.realnode.node.RealNode` (containerd, runc, kubelet, CoreDNS), imports the
images ``container/build.sh`` makes (:mod:`slonkd_sandbox.chart.images`), binds the chart's
claims and a site home claim to ``local`` PersistentVolumes on the node, runs ``helm install``
of ``deploy/helm/slonk`` with ``ci/local-images-values.yaml`` (``imagePullPolicy: Never``)
and waits for every pod Ready; then plays the site's directory service for one
unprivileged user with an SSH key in the shared home. Nothing in the release is replaced.

Users: ``tests/e2e/test_chart_real.py``, ``bench/real_node.py`` and ``slonkd sandbox up
--real`` (:mod:`slonkd_sandbox.sandbox.real`). Reading the release's logs with their CRI
time stamps lives next door in :mod:`slonkd_sandbox.chart.logs`; reading its broker's retained
messages and where the agents' credentials come from, in :mod:`slonkd_sandbox.chart.bus`.

No request ever goes to a ClusterIP: no kube-proxy runs here, so pods reach the API by the
node's address (``kubernetesService``) and each other through headless Services and CoreDNS.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slonkd_sandbox.chart.helm import CHART_DIR, Helm, value_args
from slonkd_sandbox.chart.images import (
    SPECS,
    ImageSpec,
    ensure_chart_images,
    image_values,
    import_images,
)
from slonkd_sandbox.chart.volumes import claim_volumes
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import HarnessError, wait_for
from slonkd_sandbox.realnode.config import API_HOST, API_PORT
from slonkd_sandbox.realnode.node import RealNode

RELEASE = "rel"
POOL = "cpu"
CONTROLLER = f"{RELEASE}-slurmctld-0"
LOGIN = f"{RELEASE}-login-0"
LOCAL_IMAGES = CHART_DIR / "ci" / "local-images-values.yaml"
HOME_CLAIM = "home"
USER = "alice"
USER_ID = 2001
READY_TIMEOUT_S = 420.0
BAD_STATES = ("FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL", "OUT_OF_MEMORY")
"""Job end states a worker pod's deletion must never cause."""

Obj = dict[str, Any]

SSH_OPTIONS = (
    *("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"),
    *("-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"),
)
"""ssh's options for the login pod: a key, no prompt, no host-key memory, a bounded connect."""

HEARTBEAT_SCRIPT = f"""#!/bin/sh
# A job that says when it (re)starts and then beats once a second, in the shared home.
f=/home/{USER}/hb-$SLURM_JOB_ID
echo "start ${{SLURM_RESTART_COUNT:-0}} $SLURMD_NODENAME" >> $f
while :; do date +%s >> $f; sleep 1; done
"""


def workers(count: int) -> tuple[str, ...]:
    """The worker pods (and SLURM nodes) of a pool of ``count`` replicas."""
    return tuple(f"{RELEASE}-{POOL}-{i}" for i in range(count))


def ready(pod: Obj) -> bool:
    """The pod's Ready condition is True."""
    conds = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


@dataclass(slots=True)
class Release:
    """The installed release on the real node, with what it took to get there."""

    node: RealNode
    kube: KubeCluster
    ns: str
    helm: Helm
    values: list[str]
    workers: tuple[str, ...]
    home: Path
    """The shared home volume's directory on the node (``/home`` in login and worker pods)."""
    ssh_key: Path
    timings: dict[str, float] = field(default_factory=dict)

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
            *SSH_OPTIONS,
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

    def pod_uid(self, name: str) -> str | None:
        """The uid of the release's pod ``name``, or None while there is none."""
        pod = next((p for p in self.pods() if p["metadata"]["name"] == name), None)
        return None if pod is None else str(pod["metadata"]["uid"])

    def replaced_and_ready(self, name: str, old_uid: str) -> bool:
        """Pod ``name`` exists with another uid than ``old_uid`` and is Ready."""
        pod = next((p for p in self.pods() if p["metadata"]["name"] == name), None)
        return pod is not None and pod["metadata"]["uid"] != old_uid and ready(pod)

    def delete_pod(self, name: str) -> None:
        """``kubectl delete pod`` through the apiserver (the kubelet runs its preStop)."""
        self.kube.api.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{name}")

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

    def slurm(self, *argv: str, timeout_s: float = 60) -> str:
        """Run a SLURM command (scontrol, sinfo, squeue ...) in the slurmctld container."""
        return self.exec(CONTROLLER, "slurmctld", *argv, timeout_s=timeout_s)

    def job(self, job: str) -> dict[str, str]:
        """``scontrol -o show job`` as fields."""
        out = self.slurm("scontrol", "-o", "show", "job", job)
        return dict(f.split("=", 1) for f in out.split() if "=" in f)

    def job_state(self, job: str) -> str:
        """``STATE:REASON:NODELIST`` of a job."""
        fields = self.job(job)
        return (
            f"{fields.get('JobState', '?')}:{fields.get('Reason', '')}:{fields.get('NodeList', '')}"
        )

    def node_line(self, node: str) -> str:
        """``STATE|REASON`` of a SLURM node from sinfo."""
        return self.slurm("sinfo", "-h", "-n", node, "-o", "%T|%100E").strip()

    def sinfo_states(self) -> dict[str, str]:
        """Every SLURM node's state from sinfo."""
        out = self.slurm("sinfo", "-h", "-N", "-o", "%N %T")
        return dict(line.split() for line in out.splitlines() if line.strip())

    def sbatch_heartbeat(self, node: str, *, timeout_s: float = 60) -> tuple[str, Path]:
        """Submit the heartbeat job to ``node`` over SSH as the user; wait until it beats."""
        out = self.ssh("sbatch", "--requeue", "-w", node, "-o", "/dev/null", "hb.sh")
        job = out.strip().split()[-1]
        beats = self.home / USER / f"hb-{job}"
        queue = self.ssh("squeue", "-h", "-o", "%i:%u:%T:%N")
        if f"{job}:{USER}:" not in queue:
            raise HarnessError(f"job {job} not in squeue over SSH: {queue}")
        wait_for(
            f"job {job} running and beating",
            lambda: (
                self.job_state(job).startswith("RUNNING")
                and beats.exists()
                and len(beats.read_text().splitlines()) >= 2
            ),
            timeout_s=timeout_s,
            interval_s=1,
        )
        return job, beats

    def cancel_all(self) -> None:
        """Cancel every job of the user."""
        self.slurm("scancel", f"--user={USER}")

    def logs(self, pod: str, container: str) -> str:
        """A container's log through the apiserver (the kubelet serves it)."""
        path = f"/api/v1/namespaces/{self.ns}/pods/{pod}/log"
        return str(self.kube.api.request("GET", path, params={"container": container}))

    @property
    def controller(self) -> str:
        """The slurmctld pod (its container is ``slurmctld``)."""
        return CONTROLLER

    def diagnose(self) -> str:
        """Every pod's container states, unready containers' last lines, recent Events."""
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


def chart_values(
    tmp: Path, *, replicas: int, grace_s: int, margin_s: int, failure_grace_s: int
) -> Path:
    """The node's values: its size, where pods reach the API, the home claim, a wide budget."""
    values = {
        "kubernetesService": {"host": API_HOST, "port": API_PORT},
        "pools": [
            {
                "name": POOL,
                "replicas": replicas,
                "gpus": 0,
                "cpus": os.cpu_count() or 1,
                "realMemoryMB": 1024,
            }
        ],
        # preStop drains, waits for jobs until grace - margin, then requeues.
        "workers": {
            "terminationGracePeriodSeconds": grace_s,
            "prestop": {"marginSeconds": margin_s},
        },
        "controller": {"persistence": {"size": "1Gi"}},
        "home": {"existingClaim": HOME_CLAIM},
        # Every worker shares the one K8s node: cordoning it takes the whole pool out, which
        # the default budget (10 %, mass 20 %) rightly refuses (past its room).
        "coordinator": {
            "failureGraceSeconds": failure_grace_s,
            "budget": {"maxOut": 10, "maxOutPercent": 100, "massPercent": 100},
        },
        "agent": {
            "health": {"nvidiaVisibleDevices": "", "checks": {"dcgm": False, "fabric": False}}
        },
    }
    path = tmp / "node-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _add_user(release: Release) -> None:
    """The site's directory service, played by hand: the user's account and home.

    The account on the login pod (sshd, sbatch) and slurmctld (uid -> name); the home with an
    authorized key and the heartbeat job script on the shared volume. Workers need no
    account: slurmd takes the job's identity from slurmctld's credential.
    """
    home = release.home / USER
    (home / ".ssh").mkdir(parents=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(release.ssh_key)],
        check=True,
        timeout=30,
    )
    pub = release.ssh_key.with_suffix(".pub").read_text()
    (home / ".ssh" / "authorized_keys").write_text(pub)
    (home / "hb.sh").write_text(HEARTBEAT_SCRIPT)
    for path in (home, home / ".ssh", home / ".ssh" / "authorized_keys", home / "hb.sh"):
        os.chown(path, USER_ID, USER_ID)
    (home / ".ssh").chmod(0o700)
    (home / "hb.sh").chmod(0o755)
    for pod, container in ((LOGIN, "login"), (CONTROLLER, "slurmctld")):
        add_account(release, pod, container)


def add_account(release: Release, pod: str, container: str) -> None:
    """The user's account in one container (again after that pod was replaced)."""
    release.exec(
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


@contextmanager
def install(
    root: Path,
    *,
    replicas: int = 2,
    grace_s: int = 24,
    margin_s: int = 8,
    failure_grace_s: int = 10,
    say: Callable[[str], None] = lambda _msg: None,
    set_json: Sequence[str] = (),
    on_node: Callable[[RealNode], None] = lambda _node: None,
    started: Callable[[RealNode], None] = lambda _node: None,
    specs: Sequence[ImageSpec] = SPECS,
    volumes: Callable[[RealNode, str], None] = lambda _node, _ns: None,
    extra_pods: int = 0,
) -> Iterator[Release]:
    """The chart installed on a fresh real node under ``root``; every pod Ready.

    ``timings`` records image build or cache, import (twice: the second must import
    nothing), node start and install-to-ready seconds. On a pod that never gets Ready the
    error carries :meth:`Release.diagnose`. Leaving stops the node and the control plane.
    ``on_node`` gets the node before it starts (its :meth:`RealNode.leftovers` after leaving,
    even when the install failed). ``started`` gets it once it runs and is registered, before
    anything is installed (e.g. the taint every node of a managed GPU pool carries).
    ``specs``: the images to build and import (more for optional parts, e.g. accounting);
    ``volumes(node, namespace)`` makes the ``local`` volumes those parts claim; ``extra_pods``
    is how many pods they add.
    """
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    say("chart images (built by container/build.sh on first use, cached by content)")
    images = ensure_chart_images(specs)
    timings["images_build_or_cache_s"] = time.monotonic() - t0
    tag = secrets.token_hex(3)
    kube = KubeCluster(root / f"crk-{tag}")
    node = RealNode(root / f"crn-{tag}", cluster=kube)
    on_node(node)
    try:
        say("control plane and real node (containerd, kubelet, CoreDNS)")
        t0 = time.monotonic()
        kube.start()
        node.start()
        timings["node_ready_s"] = time.monotonic() - t0
        started(node)
        t0 = time.monotonic()
        imported = import_images(node, images)
        timings["image_import_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        again = import_images(node, images)
        timings["image_import_again_s"] = time.monotonic() - t0
        if again or len(imported) != len(images):
            raise HarnessError(f"image import not by content: {imported} then {again}")
        ns = f"chart-{tag}"
        kube.create_namespace(ns)
        home = claim_volumes(node, ns, release=RELEASE, home_claim=HOME_CLAIM)
        volumes(node, ns)
        tmp = root / f"chart-{tag}"
        tmp.mkdir(parents=True)
        if kube.tools is None:
            raise HarnessError("the control plane has no tools")
        helm = Helm(binary=kube.tools.helm, home=tmp / "helm", kubeconfig=kube.kubeconfig)
        own = chart_values(
            tmp,
            replicas=replicas,
            grace_s=grace_s,
            margin_s=margin_s,
            failure_grace_s=failure_grace_s,
        )
        values = value_args([LOCAL_IMAGES, own], image_values(images))
        values += [f"--set-json={s}" for s in set_json]
        release = Release(
            node=node,
            kube=kube,
            ns=ns,
            helm=helm,
            values=values,
            workers=workers(replicas),
            home=home,
            ssh_key=tmp / "id_ed25519",
            timings=timings,
        )
        say(f"helm install {RELEASE} (namespace {ns})")
        t0 = time.monotonic()
        helm.run("install", RELEASE, str(CHART_DIR), f"--namespace={ns}", *values)
        # slurmctld, the workers, login, 2 coordinators, mosquitto
        expected = replicas + 5 + extra_pods

        def all_ready() -> bool:
            pods = release.pods()
            return len(pods) == expected and all(ready(p) for p in pods)

        try:
            wait_for(
                "every pod of the release Ready", all_ready, timeout_s=READY_TIMEOUT_S, interval_s=1
            )
        except HarnessError as exc:
            raise HarnessError(f"{exc}\n{release.diagnose()}") from exc
        timings["install_to_ready_s"] = time.monotonic() - t0
        _add_user(release)
        yield release
    finally:
        try:
            node.stop()
        finally:
            kube.stop()

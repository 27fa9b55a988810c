"""The local sandbox: every real service up at once, a worker StatefulSet bound to slurmd.

``slonkd sandbox`` runs this. It starts SLURM (one slurmd per worker pod), mosquitto and a
Kubernetes control plane with kwok nodes, creates namespace ``slonk`` with a ``worker``
StatefulSet whose pods ``worker-<i>`` are SLURM nodes ``worker-<i>``, and a kubelet
stand-in that binds them. It writes ``env.sh`` (SLURM_CONF, KUBECONFIG, MQTT address, PATH
with kubectl) and holds until interrupted or until ``hold_s`` passed.

The agents and the coordinator join the sandbox with the deploy issue; until then this is
the harness the tests use, brought up by hand.
"""

from __future__ import annotations

import secrets
import shlex
import shutil
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from slonkd.testing.kube import KubeCluster
from slonkd.testing.kubelet import KubeletStandIn
from slonkd.testing.mosquitto import Mosquitto, MqttUser
from slonkd.testing.slurm import SlurmCluster, SlurmLayout
from slonkd.testing.workloads import worker_statefulset

NAMESPACE = "slonk"


def _say(message: str) -> None:
    print(f"[sandbox] {message}", flush=True)


def run_sandbox(root: Path, *, workers: int = 4, hold_s: float = 0.0) -> int:
    """Bring everything up under ``root`` (wiped first), print how to reach it, hold, stop."""
    if (root / "env.sh").exists():  # only ever wipe a directory that a sandbox made
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    names = tuple(f"worker-{i}" for i in range(workers))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ExitStack() as stack:
        t0 = time.monotonic()
        _say("starting Kubernetes (builds the binaries on first use, ~13 min on 2 cores)")
        kube = stack.enter_context(KubeCluster(root / "kube"))
        _say(f"Kubernetes ready in {kube.timings['control_plane_ready_s']:.1f} s")
        slurm = stack.enter_context(
            SlurmCluster(root / "slurm", SlurmLayout(nodes=names, autostart=False))
        )
        _say(f"slurmctld ready in {slurm.started_s:.1f} s")
        mqtt_password = secrets.token_hex(12)
        mqtt = stack.enter_context(
            Mosquitto(
                root / "mqtt",
                users={
                    "coordinator": MqttUser(
                        password=mqtt_password, acl=("topic readwrite slonk/#",)
                    )
                },
            )
        )
        _say(f"mosquitto ready on 127.0.0.1:{mqtt.port}")
        kube.add_fake_nodes([f"kwok-node-{i}" for i in range(workers)])
        kube.create_namespace(NAMESPACE)
        standin = stack.enter_context(
            KubeletStandIn(kube=kube, slurm=slurm, namespace=NAMESPACE, root=root / "kubelet")
        )
        kube.api.request(
            "POST",
            f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets",
            worker_statefulset("worker", replicas=workers, prestop=["/bin/true"]),
        )
        slurm.wait_idle(names, timeout_s=120)
        took = time.monotonic() - t0
        _say(f"{workers} worker pods Running and their slurmd idle, {took:.1f} s in all")
        env = root / "env.sh"
        env.write_text(
            f"export SLURM_CONF={shlex.quote(str(slurm.conf))}\n"
            f"export KUBECONFIG={shlex.quote(str(kube.kubeconfig))}\n"
            f"export SLONKD_MQTT=127.0.0.1:{mqtt.port}\n"
            f"export SLONKD_MQTT_USER=coordinator SLONKD_MQTT_PASSWORD={mqtt_password}\n"
            f"export PATH={shlex.quote(str(kube.kubectl_path.parent))}:$PATH\n"
        )
        _say(f"environment: source {env}")
        _say(
            "try: sinfo -N; kubectl -n slonk get pods -o wide; kubectl -n slonk delete pod worker-0"
        )
        _say(f"journal of the kubelet stand-in: {standin.journal}")
        if hold_s > 0:
            stop.wait(hold_s)
        else:
            _say("holding; Ctrl-C stops everything")
            stop.wait()
        _say("stopping")
    return 0


__all__ = ["run_sandbox"]

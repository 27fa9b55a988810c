"""Stopping the harness leaves no process behind, even when its parent dies."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.mosquitto import Mosquitto, MqttUser
from slonkd_sandbox.procs import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.mqtt, pytest.mark.slurm]


def _processes_under(root: Path) -> list[str]:
    out = subprocess.run(
        ["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if str(root) in line and not line.startswith("ps ")]


def test_stop_ends_every_kube_and_mosquitto_process() -> None:
    """stop() of a control plane and of a broker leaves none of their processes running."""
    root = Path(tempfile.mkdtemp(prefix="slonkd-test-life-", dir="/tmp"))
    kube = KubeCluster(root / "kube")
    broker = Mosquitto(root / "mqtt", users={"u": MqttUser(password="p")})
    try:
        kube.start()
        broker.start()
        running = _processes_under(root)
        assert len(running) >= 6, running  # etcd, apiserver, kcm, scheduler, kwok, mosquitto
    finally:
        broker.stop()
        kube.stop()
    assert _processes_under(root) == []


SCRIPT = """
import sys, tempfile, time
from pathlib import Path
from slonkd_sandbox.mosquitto import Mosquitto, MqttUser
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
root = Path(sys.argv[1])
SlurmCluster(root / "slurm", SlurmLayout(nodes=("n1", "n2"))).start()
Mosquitto(root / "mqtt", users={"u": MqttUser(password="p")}).start()
print("up", flush=True)
time.sleep(600)
"""


def test_sigkill_of_the_owner_takes_every_service_with_it() -> None:
    """If the process that started the services is SIGKILLed, its daemons die with it."""
    root = Path(tempfile.mkdtemp(prefix="slonkd-test-orphan-", dir="/tmp"))
    owner = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "up"
        assert len(_processes_under(root)) >= 5  # supervisor, munged, ctld, 2 slurmd, mosquitto
    finally:
        owner.kill()
        owner.wait(timeout=10)
    began = time.monotonic()
    wait_for("orphans gone", lambda: not _processes_under(root), timeout_s=15)
    assert time.monotonic() - began < 15

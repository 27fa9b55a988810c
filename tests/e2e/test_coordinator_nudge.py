"""The leader installs its PERM triggers; one nudges it, and it reads SLURM at once.

A coordinator with a resync period of 300 s and no reasons poll leads over two worker pods
on kwok nodes, configured with ``trigger_program`` (this venv's ``slonkd-nudge``). On
leadership it registers its permanent node triggers in a real slurmctld whose environment
points at a real mosquitto; an operator's triggers (one of them running the same program)
are left alone. When SLURM fails a node under its own reason, slurmctld runs the trigger
within its check period (about 15 s); ``slonkd-nudge`` publishes the event; the coordinator
logs ``coordinator.nudged``, reads SLURM and cordons the pod's K8s node within seconds: long
before any resync would have seen it. A restarted coordinator finds its triggers and adds
nothing; restarted with the setting off, it clears exactly its own.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.slurm.triggers import Trigger, parse_strigger_get
from slonkd.core.log_events import COORDINATOR_SYNCED
from slonkd_sandbox.daemon import Coordinators, Daemon
from slonkd_sandbox.fleet import LEASE_TIMINGS, FleetShape
from slonkd_sandbox.mosquitto import Mosquitto, MqttUser
from slonkd_sandbox.procs import wait_for
from tests.rig import OnRig, Rig

pytestmark = [pytest.mark.kube, pytest.mark.slurm, pytest.mark.mqtt]

RESYNC_S = 300
TRIGGER_PERIOD_S = 20.0  # slurmctld checks its triggers about every 15 s
ACT_AFTER_NUDGE_S = 5.0
SHAPE = FleetShape(slurmds=2, kube_nodes=2)
NAMES = SHAPE.names


@dataclass(slots=True)
class NudgeFleet(OnRig):
    """Two worker pods, their SLURM nodes with slonkd's triggers, and a coordinator."""

    coordinator: Daemon
    foreign: list[Trigger]
    """The operator's triggers, set before the coordinator first started."""
    config: Path
    """The coordinator's SLONKD_CONFIG (read at each start)."""

    def events(self, name: str) -> list[dict[str, Any]]:
        """The coordinator's JSON log lines of event ``name`` (all its runs)."""
        return self.coordinator.events(name)

    def start(self) -> None:
        """Restart the coordinator (after stop()); return once it is synced again."""
        self.coordinator.start(until=COORDINATOR_SYNCED)

    def triggers(self) -> list[Trigger]:
        """Every trigger slurmctld holds."""
        return parse_strigger_get(self.slurm.run("strigger", "--get").stdout)

    def stop(self) -> None:
        """SIGTERM the running coordinator and wait for it."""
        assert self.coordinator.stop(), self.coordinator.exited()

    def kube_node_of(self, pod: str) -> str:
        """The K8s node a pod runs on."""
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod}"
        return str(self.kube.api.request("GET", path)["spec"]["nodeName"])


def _at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


@pytest.fixture
def nudge_fleet(
    rig: Rig,
    session_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    coordinators: Coordinators,
) -> Iterator[NudgeFleet]:
    """Mosquitto, SLURM (its triggers nudge over MQTT), two pods, a slow-resync coordinator."""
    broker = Mosquitto(
        Path(tempfile.mkdtemp(prefix="nudge-", dir=session_root)),
        users={
            "ctld": MqttUser(password="ctld-pw", acl=("topic write slonk/v1/lab/slurm/events",)),
            "coordinator": MqttUser(password="coord-pw", acl=("topic readwrite slonk/#",)),
        },
    )
    broker.start()
    try:
        # slurmctld runs its triggers with its own environment: it starts with these.
        ctld_env = {
            "SLONKD_MQTT_HOST": broker.host,
            "SLONKD_MQTT_PORT": str(broker.port),
            "SLONKD_MQTT_USER": "ctld",
            "SLONKD_MQTT_PASSWORD": "ctld-pw",
            "SLONKD_CLUSTER": "lab",
        }
        for key, value in ctld_env.items():
            monkeypatch.setenv(key, value)
        slurm = rig.slurm_factory(SHAPE.layout())
        for key in ctld_env:
            monkeypatch.delenv(key)
        program = str(Path(sys.executable).parent / "slonkd-nudge")  # this venv's console script
        # An operator's triggers: one of another program, one of slonkd-nudge set by hand.
        for argv in (
            ("--down", "--program=/bin/true operator"),
            ("--up", f"--program={program} up"),
        ):
            slurm.run("strigger", "--set", "--node", "--flags=PERM", *argv)

        settings = {
            "resync_s": RESYNC_S,
            "poll_s": 0,  # no reasons poll: only the trigger can start the read
            "failure_grace_s": 1,
            "max_out": 2,
            **LEASE_TIMINGS,
            "trigger_program": program,
        }
        build = rig.fleet(replace(SHAPE, coordinator=settings))
        build.add_kube_nodes("g")
        build.create(build.statefulset(standin=False))
        build.wait_running("pods Running", timeout_s=90)
        config = build.coordinator_config(rig.tmp_path / "coordinator.json")
        env = build.coordinator_env(
            slurm.conf,
            SLONKD_MQTT_HOST=broker.host,
            SLONKD_MQTT_PORT=str(broker.port),
            SLONKD_MQTT_USER="coordinator",
            SLONKD_MQTT_PASSWORD="coord-pw",
        )
        foreign = parse_strigger_get(slurm.run("strigger", "--get").stdout)
        coordinator = coordinators.start(env, config=config)  # read again at each start
        yield NudgeFleet(
            rig=rig,
            slurm=slurm,
            coordinator=coordinator,
            foreign=foreign,
            config=config,
        )
    finally:
        coordinators.stop()  # before its broker
        broker.stop()


def _installed(fleet: NudgeFleet, count: int) -> dict[str, Any]:
    """The ``count``-th ``coordinator.triggers_ensured`` line (waited for)."""
    wait_for(
        "coordinator.triggers_ensured",
        lambda: len(fleet.events("coordinator.triggers_ensured")) >= count,
        timeout_s=20,
    )
    return fleet.events("coordinator.triggers_ensured")[count - 1]


def test_trigger_nudges_the_coordinator_long_before_its_resync(nudge_fleet: NudgeFleet) -> None:
    """The leader installs its triggers; its trigger nudges it and it acts within seconds.

    SLURM fails w-1: the trigger nudges, the coordinator cordons its K8s node. An operator's
    triggers stay as they were; a restarted coordinator adds nothing; restarted with
    trigger_program off, it clears its own triggers and only those.
    """
    fleet = nudge_fleet
    victim = "w-1"
    kube_node = fleet.kube_node_of(victim)
    foreign = fleet.foreign
    assert len(foreign) == 2
    first = _installed(fleet, 1)
    assert sorted(first["added"]) == ["down", "drained", "fail", "up"]
    assert first["cleared"] == []
    ours = [t for t in fleet.triggers() if t not in foreign]
    assert len(ours) == 4
    assert all(t.permanent and "--by=slonkd-coordinator" in t.program for t in ours)
    # The first pass, at start, saw nothing to do; the next resync is 300 s away.
    time.sleep(2)
    assert not fleet.events("kube.cordon")
    changed_at = time.time()
    fleet.slurm.run(
        "scontrol", "update", f"nodename={victim}", "state=fail", "reason=Kill task failed"
    )

    def nudged() -> list[dict[str, Any]]:
        return [e for e in fleet.events("coordinator.nudged") if victim in str(e.get("nodes"))]

    wait_for("coordinator.nudged", lambda: bool(nudged()), timeout_s=TRIGGER_PERIOD_S + 10)
    wait_for(
        "K8s node cordoned",
        lambda: any(e.get("kube_node") == kube_node for e in fleet.events("kube.cordon")),
        timeout_s=ACT_AFTER_NUDGE_S + 5,
    )
    nudge = nudged()[0]
    cordon = next(e for e in fleet.events("kube.cordon") if e.get("kube_node") == kube_node)
    # FAIL on an idle node fires the drained trigger too; whichever slurmctld ran first nudges.
    assert nudge["slurm_event"] in {"fail", "drained"}
    print(
        f"trigger->nudged {_at(nudge) - changed_at:.1f} s after the change, "
        f"cordon {_at(cordon) - _at(nudge):.2f} s after the nudge"
    )
    # Acted on the nudge: not before it (nothing else made the coordinator read SLURM), and
    # within seconds after it, far inside the 300 s resync.
    assert _at(nudge) <= _at(cordon) <= _at(nudge) + ACT_AFTER_NUDGE_S
    assert _at(nudge) - changed_at <= TRIGGER_PERIOD_S + 2
    assert _at(cordon) - changed_at < RESYNC_S / 10
    assert {e["kube_node"] for e in fleet.events("kube.cordon")} == {kube_node}

    # A restarted coordinator (a new term) finds its triggers: nothing added, nothing cleared.
    fleet.stop()
    fleet.start()
    again = _installed(fleet, 2)
    assert again["added"] == []
    assert again["cleared"] == []
    assert len(again["kept"]) == 4
    assert sorted(fleet.triggers(), key=lambda t: t.trig_id) == sorted(
        foreign + ours, key=lambda t: t.trig_id
    )

    # Turned off, the next leader clears exactly the triggers a coordinator installed.
    fleet.stop()
    config = json.loads(fleet.config.read_text())
    del config["trigger_program"]
    fleet.config.write_text(json.dumps(config))
    fleet.start()
    wait_for(
        "coordinator.triggers_removed",
        lambda: bool(fleet.events("coordinator.triggers_removed")),
        timeout_s=20,
    )
    (removed,) = fleet.events("coordinator.triggers_removed")
    assert sorted(removed["cleared"]) == sorted(t.trig_id for t in ours)
    assert sorted(fleet.triggers(), key=lambda t: t.trig_id) == foreign

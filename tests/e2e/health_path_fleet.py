"""The health path's fleet: four workers with agents that publish health, mosquitto, a leader.

:class:`HealthFleet`, its :class:`FleetOptions`, the :class:`PortGate` a gated slurmd check
probes and the ``health_fleet`` fixture, built with :mod:`slonkd_sandbox.fleet`; one shared
module, so that ``test_health_path.py`` and ``test_revalidation.py`` import it and neither
imports the other. Neighbours: ``tests/e2e/conftest.py`` (:class:`AgentProcess`, the
``coordinators`` fixture), :mod:`tests.rig`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.daemon import Coordinators, Daemon
from slonkd_sandbox.fleet import LEASE_TIMINGS, FleetShape
from slonkd_sandbox.mosquitto import AGENT_PATTERNS, Mosquitto, MqttUser
from slonkd_sandbox.procs import free_ports
from slonkd_sandbox.workloads import spread_over_nodes
from tests.e2e.conftest import PRESTOP, AgentProcess
from tests.rig import OnRig, Rig

COORDINATOR: dict[str, Any] = {
    "resync_s": 1,
    "failure_grace_s": 1,
    "max_out": 4,
    "max_out_percent": 100,
    "mass_percent": 100,
    "suspect_min_nodes": 3,
    "suspect_fraction": 0.5,
    **LEASE_TIMINGS,
}
SHAPE = FleetShape(slurmds=4, kube_nodes=4, autostart=False, coordinator=COORDINATOR)
"""Four worker pods bound to slurmd by the kubelet stand-in, on four kwok nodes."""
NAMES = SHAPE.names


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetOptions:
    """How a test wants its health fleet (``indirect`` parametrization of ``health_fleet``)."""

    kube_nodes: int = 4
    """Four: one worker pod each; two: two worker pods share each K8s node."""
    coordinator: Mapping[str, Any] = field(default_factory=dict)
    """Settings that override the fleet's coordinator settings."""
    gated: bool = False
    """Each agent's slurmd check probes a :class:`PortGate` the test holds, not its slurmd:
    the check fails and passes when the test says, while slurmd keeps running (it must,
    to run the RebootProgram of a reboot slonkd asks for)."""


class PortGate:
    """A TCP port on 127.0.0.1 that accepts connections while open and refuses them when shut.

    An agent's slurmd check (a TCP connect) probing it passes or fails as the test wants.
    """

    def __init__(self) -> None:
        self.port = free_ports(1)[0]
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        """Listen on the port and accept (and close) every connection."""
        if self._sock is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(16)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
        self._thread.start()

    def shut(self) -> None:
        """Stop listening: connections are refused from now on."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @staticmethod
    def _serve(sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.close()


@dataclass(slots=True)
class HealthFleet(OnRig):
    """Four workers with agents that publish health, and a coordinator that reads it."""

    kube_nodes: list[str]
    agents: dict[str, AgentProcess]
    coordinator: Daemon
    mount_root: Path
    """w-0 checks the mount ``mount_root/sw/proc``; ``sw`` is a symlink to ``/`` (so the
    path is /proc, a responsive mount point) until a test points it elsewhere."""
    audit: Path
    """The coordinator's audit log (JSON lines)."""
    gates: dict[str, PortGate] = field(default_factory=dict)
    """Per worker, the port its slurmd check probes (``FleetOptions.gated`` only)."""

    @property
    def mount(self) -> str:
        """The path w-0's mount check probes."""
        return str(self.mount_root / "sw" / "proc")

    def point_mount_at(self, target: Path) -> None:
        """Swap the ``sw`` symlink atomically (the next probe sees the new target)."""
        new = self.mount_root / "sw.new"
        new.unlink(missing_ok=True)
        new.symlink_to(target)
        new.replace(self.mount_root / "sw")

    def reason(self, node: str) -> str:
        """The node's reason text as SLURM shows it (without the ``[user@time]`` suffix)."""
        line = self.slurm.run("scontrol", "-o", "show", "node", node).stdout
        _, found, rest = line.partition(" Reason=")
        return rest.split(" [", 1)[0].strip() if found else ""

    def state(self, node: str) -> str:
        """The node's state as ``sinfo -N -o %T`` prints it (``idle``, ``drained`` ...)."""
        return self.slurm.node_states().get(node, "")

    def coordinator_events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The coordinator's JSON log lines, or only those of event ``name``."""
        return self.coordinator.events(name)

    def kube_node_of(self, pod: str) -> str:
        """The K8s node a pod runs on."""
        return str(
            self.kube.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods/{pod}")["spec"][
                "nodeName"
            ]
        )

    def knode(self, name: str) -> dict[str, Any]:
        """A K8s node's JSON."""
        return dict(self.kube.api.request("GET", f"/api/v1/nodes/{name}"))

    def pods_on(self, kube_node: str) -> list[str]:
        """The worker pods bound to ``kube_node``, by name."""
        return sorted(n for n in NAMES if self._node_or_none(n) == kube_node)

    def _node_or_none(self, pod: str) -> str | None:
        try:
            return self.kube_node_of(pod)
        except Exception:  # noqa: BLE001 - a pod being replaced has no node (or no object)
            return None

    def audit_records(self) -> list[dict[str, Any]]:
        """The coordinator's audit records."""
        if not self.audit.exists():
            return []
        return [json.loads(line) for line in self.audit.read_text().splitlines() if line]

    def state_cm(self) -> dict[str, str]:
        """The coordinator's state ConfigMap data."""
        cm = f"/api/v1/namespaces/{self.namespace}/configmaps/slonkd-state"
        return dict(self.kube.api.request("GET", cm)["data"])

    def restart_agent(self, name: str) -> None:
        """Restart a worker's agent for the K8s node its pod runs on now (a new pod's agent)."""
        agent = self.agents[name]
        agent.stop()
        agent.env["NODE_NAME"] = self.kube_node_of(name)
        agent.start()


@pytest.fixture
def health_fleet(
    request: pytest.FixtureRequest,
    rig: Rig,
    session_root: Path,
    coordinators: Coordinators,
) -> Iterator[HealthFleet]:
    """Workers w-0..w-3 on four kwok nodes with agents, mosquitto and a coordinator.

    The stand-in binds slurmd; each agent checks its slurmd every 0.3 s (2 failures of 3 make
    a fail, 2 passes clear it) and publishes its verdicts. A test may ask for other
    :class:`FleetOptions` (``request.param``).
    """
    options: FleetOptions = getattr(request, "param", FleetOptions())
    shape = replace(
        SHAPE, kube_nodes=options.kube_nodes, coordinator={**COORDINATOR, **options.coordinator}
    )
    slurm = rig.slurm_factory(shape.layout())
    users = {"coordinator": MqttUser(password="coordinator-pw", acl=("topic readwrite slonk/#",))}
    users.update({n: MqttUser(password=f"{n}-pw") for n in NAMES})
    broker = Mosquitto(
        Path(tempfile.mkdtemp(prefix="hp-", dir=session_root)),
        users=users,
        patterns=AGENT_PATTERNS,
    )
    broker.start()
    build = rig.fleet(shape)
    kube_nodes = build.add_kube_nodes("h")
    mount_root = Path(tempfile.mkdtemp(prefix="m", dir="/tmp"))  # short: a readable cause
    (mount_root / "sw").symlink_to("/")
    standin = rig.standin(slurm)
    standin.start()
    agents: dict[str, AgentProcess] = {}
    gates = {n: PortGate() for n in NAMES} if options.gated else {}
    try:
        for gate in gates.values():
            gate.open()
        sts = build.statefulset(grace_s=12, prestop=PRESTOP)
        spread_over_nodes(sts, when="ScheduleAnyway")
        build.create(sts)
        slurm.wait_idle(NAMES, timeout_s=60)
        mqtt = {"SLONKD_MQTT_HOST": broker.host, "SLONKD_MQTT_PORT": str(broker.port)}
        base = {
            **os.environ,
            **mqtt,
            "POD_NAMESPACE": rig.namespace,
            "KUBECONFIG": str(rig.kube.kubeconfig),
            "SLURM_CONF": str(slurm.conf),
        }
        for i, name in enumerate(NAMES):
            pod = rig.kube.api.request("GET", f"/api/v1/namespaces/{rig.namespace}/pods/{name}")
            config = rig.tmp_path / f"agent-{name}.json"
            config.write_text(
                json.dumps(
                    {
                        "health": {
                            "disk_paths": [],
                            "slurmd_port": gates[name].port if gates else slurm.slurmd_port + i,
                            "fast_period_s": 0.3,
                            "mounts": [str(mount_root / "sw" / "proc")] if i == 0 else [],
                            "mount_timeout_s": 2.0,
                        },
                        "hysteresis": {"fail_n": 2, "window_m": 3, "clear_k": 2},
                    }
                )
            )
            env = {
                **base,
                "POD_NAME": name,
                "NODE_NAME": pod["spec"]["nodeName"],
                "SLONKD_CONFIG": str(config),
                "SLONKD_MQTT_USER": name,
                "SLONKD_MQTT_PASSWORD": f"{name}-pw",
                "SLONKD_RESYNC_S": "2",
                "SLONKD_READY_FILE": str(rig.tmp_path / f"ready-{name}"),
            }
            agents[name] = AgentProcess(env=env, log=rig.tmp_path / f"agent-{name}.log")
            agents[name].start()
        config = build.coordinator_config(
            rig.tmp_path / "coordinator.json", audit_path=str(rig.tmp_path / "audit.jsonl")
        )
        env = {
            **base,
            "SLONKD_MQTT_USER": "coordinator",
            "SLONKD_MQTT_PASSWORD": "coordinator-pw",
        }
        yield HealthFleet(
            rig=rig,
            slurm=slurm,
            kube_nodes=kube_nodes,
            agents=agents,
            coordinator=coordinators.start(env, config=config),  # until synced
            mount_root=mount_root,
            audit=rig.tmp_path / "audit.jsonl",
            gates=gates,
        )
    finally:
        coordinators.stop()
        for agent in agents.values():
            agent.stop()
        standin.stop()
        broker.stop()
        for gate in gates.values():
            gate.shut()
        shutil.rmtree(mount_root, ignore_errors=True)

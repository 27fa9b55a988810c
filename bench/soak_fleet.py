"""The soak's fleet: every real service, the worker pods, their agents and the coordinator pair.

Two worker pools in namespace ``soak``: StatefulSet ``w`` (pods ``w-<i>``, each bound to a
real slurmd by the kubelet stand-in, preStop ``slonkd prestop``) and StatefulSet ``d`` (pods
``d-<i>`` whose SLURM nodes are declared without a slurmd: plain kwok pods). One ``slonkd
agent`` per pod (the sandbox's :class:`AgentKeeper`: restarted when it dies, replaced with its
pod), the first :data:`RELAYED` of them through a relay the soak can cut
(:mod:`bench.soak_relay`), each with a mount check on a path of its own that the soak can
break (a symlink swap) to make its health verdict fail. Two ``slonkd coordinator`` processes
share one Lease; a killed one is started again by :meth:`SoakFleet.respawn`, as a Deployment would.

Every K8s node carries :data:`POOL_TAINT` from the start, as every node of a managed GPU pool
does, and both pools tolerate it (:data:`POOL_TOLERATION`): the pool's nature, never a reason
to drain (the checker in :mod:`bench.soak_check` says so if slonkd drains for it).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.soak_relay import Relays
from slonkd.core.kube_objects import WORKER_LABELS, WORKER_SELECTOR
from slonkd_sandbox import procs
from slonkd_sandbox.daemon import Daemon
from slonkd_sandbox.fleet import FleetBuilder, FleetShape
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kubelet import KubeletStandIn
from slonkd_sandbox.mosquitto import AGENT_PATTERNS, Mosquitto, MqttUser
from slonkd_sandbox.procs import HarnessError
from slonkd_sandbox.sandbox.agents import AgentKeeper
from slonkd_sandbox.slurm.cluster import SlurmCluster
from slonkd_sandbox.workloads import prestop_command, spread_over_nodes, worker_statefulset

NAMESPACE = "soak"
_T = TypeVar("_T")
REAL_POOL = "w"
DECLARED_POOL = "d"
SELECTOR = WORKER_SELECTOR
LEASE = "slonkd-coordinator"
GRACE_S = 12
RELAYED = 3
POOL_TAINT: dict[str, str] = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
"""The taint every K8s node of the soak carries, as a managed service puts on its GPU pools."""
POOL_TOLERATION: dict[str, str] = {"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}  # fmt: skip
"""Both pools' toleration of :data:`POOL_TAINT` (as the chart's ``pools[].tolerations``)."""
"""How many pods' agents reach the broker through a relay the soak can cut (the first real ones)."""
COORDINATOR_CONFIG: dict[str, Any] = {
    "resync_s": 5,
    "failure_grace_s": 2,
    "unready_grace_s": 30,
    "max_out": 3,
    "max_out_percent": 20,
    "mass_percent": 50,
    "lease_duration_s": 8,
    "renew_deadline_s": 5,
    "retry_period_s": 1,
    "suspect_min_nodes": 4,
    "suspect_fraction": 0.5,
}
AGENT_HEALTH: dict[str, Any] = {"disk_paths": [], "fast_period_s": 2.0, "mount_timeout_s": 2.0}
AGENT_HYSTERESIS = {"fail_n": 2, "window_m": 3, "clear_k": 2}


def _prestop_argv() -> list[str]:
    return prestop_command(GRACE_S, 4)


@dataclass(slots=True)
class CoordinatorSlot:
    """One of the pair: its identity, API port, log and audit file, and current process."""

    index: int
    port: int
    log: Path
    audit: Path
    daemon: Daemon | None = None
    """The current process (a respawn replaces it; its log is kept)."""
    stopped: bool = False
    """SIGSTOPped (and not yet continued)."""

    @property
    def identity(self) -> str:
        """Its POD_NAME, the Lease's holderIdentity while it leads."""
        return f"coordinator-{self.index}"

    @property
    def pid(self) -> int | None:
        """The live process's pid."""
        return self.daemon.pid if self.daemon is not None and self.daemon.running else None


@dataclass(slots=True)
class SoakFleet:
    """Everything the soak runs against (see the module doc); :meth:`start` brings it up."""

    root: Path
    real: int
    declared: int
    stack: ExitStack = field(default_factory=ExitStack)
    _kube: KubeCluster | None = None
    _slurm: SlurmCluster | None = None
    _mqtt: Mosquitto | None = None
    _keeper: AgentKeeper | None = None
    _relays: Relays | None = None
    metrics_ports: dict[str, int] = field(default_factory=dict)
    """Each pod's agent's /metrics port."""
    coordinators: list[CoordinatorSlot] = field(default_factory=list)
    kube_nodes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """SLURM clients, kubeconfig and MQTT: what an operator's shell and slonkd need."""
    _coordinator_env: dict[str, str] = field(default_factory=dict)

    @property
    def kube(self) -> KubeCluster:
        """The control plane (after :meth:`start`)."""
        return _started(self._kube)

    @property
    def slurm(self) -> SlurmCluster:
        """The SLURM cluster (after :meth:`start`)."""
        return _started(self._slurm)

    @property
    def mqtt(self) -> Mosquitto:
        """The broker (after :meth:`start`)."""
        return _started(self._mqtt)

    @property
    def keeper(self) -> AgentKeeper:
        """The agents' keeper (after :meth:`start`)."""
        return _started(self._keeper)

    @property
    def relays(self) -> Relays:
        """The relays of the agents the soak can cut off the broker (after :meth:`start`)."""
        return _started(self._relays)

    @property
    def shape(self) -> FleetShape:
        """The pools (``w`` bound to slurmd, ``d`` declared), K8s nodes and coordinators' settings.

        Two pods a K8s node, and room for evicted ones.
        """
        return FleetShape(
            pool=REAL_POOL,
            slurmds=self.real,
            declared=self.declared,
            declared_pool=DECLARED_POOL,
            kube_nodes=(self.real + self.declared) // 2 + 2,
            autostart=False,
            coordinator=COORDINATOR_CONFIG,
        )

    @property
    def relayed_names(self) -> list[str]:
        """The pods whose agents reach the broker through a relay."""
        return self.names[:RELAYED]

    @property
    def real_names(self) -> list[str]:
        """SLURM nodes with a slurmd (= pods of pool ``w``)."""
        return list(self.shape.real_names)

    @property
    def declared_names(self) -> list[str]:
        """SLURM nodes declared without a slurmd (= pods of pool ``d``)."""
        return list(self.shape.declared_names)

    @property
    def names(self) -> list[str]:
        """Every worker pod, which is also its SLURM node."""
        return list(self.shape.names)

    @property
    def logs(self) -> Path:
        """Where every slonkd process logs."""
        return self.root / "logs"

    def mount_link(self, pod: str) -> Path:
        """The symlink whose target the pod's agent's mount check probes (``<link>/proc``)."""
        return self.root / "mounts" / pod / "sw"

    def point_mount(self, pod: str, *, healthy: bool) -> None:
        """Make the pod's mount check pass (``/proc``) or fail (a plain directory)."""
        link = self.mount_link(pod)
        target = Path("/") if healthy else self.root / "mounts" / "broken"
        new = link.with_name("sw.new")
        new.unlink(missing_ok=True)
        new.symlink_to(target)
        new.replace(link)

    def start(self) -> None:
        """Bring everything up; raises (after stopping what started) when something fails."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        kube = self._kube = self.stack.enter_context(
            KubeCluster(self.root / "kube", node_monitor_grace_period="1h")
        )
        slurm = self._slurm = self.stack.enter_context(
            SlurmCluster(self.root / "slurm", self.shape.layout())
        )
        passwords = {u: secrets.token_hex(12) for u in ("coordinator", *self.names)}
        users = {
            "coordinator": MqttUser(
                password=passwords["coordinator"], acl=("topic readwrite slonk/#",)
            )
        }
        users.update({n: MqttUser(password=passwords[n]) for n in self.names})
        mqtt = self._mqtt = self.stack.enter_context(
            Mosquitto(
                self.root / "mqtt",
                users=users,
                patterns=AGENT_PATTERNS,  # with commands: the leader's rechecks (revalidation)
            )
        )
        self._relays = Relays((mqtt.host, mqtt.port), self.relayed_names)
        self.stack.callback(self._relays.close)
        build = FleetBuilder(kube=kube, namespace=NAMESPACE, shape=self.shape, labelled=False)
        self.kube_nodes = build.add_kube_nodes("k", untainted_s=120, interval_s=0.5)
        for knode in self.kube_nodes:  # untainted now: the pool's taint is the only one
            kube.api.request("PATCH", f"/api/v1/nodes/{knode}", {"spec": {"taints": [POOL_TAINT]}},
                             content_type="application/merge-patch+json")  # fmt: skip
        kube.create_namespace(NAMESPACE)
        self.stack.enter_context(
            KubeletStandIn(kube=kube, slurm=slurm, namespace=NAMESPACE, root=self.root / "kubelet")
        )
        for pool, replicas, standin in ((REAL_POOL, self.real, True),
                                        (DECLARED_POOL, self.declared, False)):  # fmt: skip
            if not replicas:
                continue
            build.create(pool_statefulset(pool, replicas=replicas, standin=standin))
        slurm.wait_idle(self.real_names, timeout_s=180)
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kube.kubeconfig),
            "SLURM_CONF": str(slurm.conf),
            "SLONKD_MQTT_HOST": mqtt.host,
            "SLONKD_MQTT_PORT": str(mqtt.port),
            "POD_NAMESPACE": NAMESPACE,
        }
        self._coordinator_env = {
            **self.env,
            "SLONKD_MQTT_USER": "coordinator",
            "SLONKD_MQTT_PASSWORD": passwords["coordinator"],
        }
        for index, port in enumerate(procs.free_ports(2)):
            slot = CoordinatorSlot(
                index=index,
                port=port,
                log=self.logs / f"coordinator-{index}.log",
                audit=self.root / f"audit-{index}.jsonl",
            )
            self.coordinators.append(slot)
            self.respawn(slot)
        first = self.coordinators[0]
        procs.wait_for(
            "a coordinator synced",
            lambda: any('"coordinator.synced"' in s.log.read_text() for s in self.coordinators),
            timeout_s=120,
            interval_s=0.5,
            alive=first.daemon.exited if first.daemon is not None else None,
        )
        self._start_agents(passwords)

    def _start_agents(self, passwords: dict[str, str]) -> None:
        run = self.root / "run"
        run.mkdir(exist_ok=True)
        (self.root / "mounts" / "broken" / "proc").mkdir(parents=True, exist_ok=True)
        ports = self.metrics_ports = dict(
            zip(self.names, procs.free_ports(len(self.names)), strict=True)
        )
        for pod in self.names:
            self.mount_link(pod).parent.mkdir(parents=True, exist_ok=True)
            self.point_mount(pod, healthy=True)
            health = {**AGENT_HEALTH, "mounts": [str(self.mount_link(pod) / "proc")]}
            config = {"health": health, "hysteresis": AGENT_HYSTERESIS}
            (run / f"agent-{pod}.json").write_text(json.dumps(config))

        relayed = {p: {"SLONKD_MQTT_PORT": str(self.relays.port(p))} for p in self.relayed_names}

        def env_for(pod: str) -> dict[str, str]:
            return {
                "SLONKD_CONFIG": str(run / f"agent-{pod}.json"),
                "SLONKD_MQTT_USER": pod,
                "SLONKD_MQTT_PASSWORD": passwords.get(pod, ""),
                "SLONKD_RESYNC_S": "5",
                "SLONKD_READY_FILE": str(run / f"ready-{pod}"),
                "SLONKD_METRICS_PORT": str(ports.get(pod, 0)),
                "SLONKD_METRICS_ADDRESS": "127.0.0.1",
                **relayed.get(pod, {}),
            }

        self._keeper = self.stack.enter_context(
            AgentKeeper(
                api=self.kube.api,
                namespace=NAMESPACE,
                selector=SELECTOR,
                env=self.env,
                env_for=env_for,
                logs=self.logs,
            )
        )
        procs.wait_for(
            "agents synced",
            lambda: all((run / f"ready-{n}").exists() for n in self.names),
            timeout_s=60 + 3 * len(self.names),
            interval_s=0.5,
        )

    def respawn(self, slot: CoordinatorSlot) -> None:
        """Start the slot's coordinator (again): a Deployment replacing a dead pod."""
        config = {
            **self.shape.coordinator,
            "api_host": "127.0.0.1",
            "api_port": slot.port,
            "audit_path": str(slot.audit),
        }
        conf = self.root / f"coordinator-{slot.index}.json"
        conf.write_text(json.dumps(config))
        env = {**self._coordinator_env, "POD_NAME": slot.identity, "SLONKD_CONFIG": str(conf)}
        slot.daemon = Daemon(role="coordinator", env=env, log=slot.log).start()
        slot.stopped = False

    def signal_coordinator(self, slot: CoordinatorSlot, sig: int) -> None:
        """Send ``sig``; a SIGKILLed process is reaped."""
        if slot.daemon is None or not slot.daemon.running:
            return
        if sig == signal.SIGKILL:
            slot.daemon.kill()
            return
        slot.daemon.signal(sig)
        if sig == signal.SIGSTOP:
            slot.stopped = True
        elif sig == signal.SIGCONT:
            slot.stopped = False

    def leader(self) -> CoordinatorSlot | None:
        """The slot the Lease names (None when the Lease cannot be read or names no slot)."""
        holder = self.lease().get("holderIdentity")
        return next((s for s in self.coordinators if s.identity == holder), None)

    def lease(self) -> dict[str, Any]:
        """The Lease's spec ({} when absent)."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
        return dict(self.kube.api.request("GET", path, timeout_s=5).get("spec") or {})

    def slonkd_pids(self) -> dict[int, str]:
        """``{pid: role}`` of every live slonkd process (coordinators and agents)."""
        out = {s.pid: "coordinator" for s in self.coordinators if s.pid is not None}
        if self._keeper is not None:
            out.update(dict.fromkeys(self._keeper.pids(), "agent"))
        return {p: r for p, r in out.items() if p is not None}

    def metrics_urls(self) -> dict[tuple[int, str], str]:
        """``{(pid, role): /metrics URL}`` of every live slonkd process."""
        out = {
            (s.pid, "coordinator"): f"http://127.0.0.1:{s.port}/metrics"
            for s in self.coordinators
            if s.pid is not None and not s.stopped
        }
        if self._keeper is not None:
            with self._keeper._lock:  # the keeper's own lock
                for pod, agent in self._keeper.agents.items():
                    if agent.proc.poll() is None and pod in self.metrics_ports:
                        url = f"http://127.0.0.1:{self.metrics_ports[pod]}/metrics"
                        out[(agent.proc.pid, "agent")] = url
        return out

    def stop(self) -> None:
        """Stop the coordinators, then everything else in reverse order."""
        for slot in self.coordinators:
            if slot.daemon is not None and slot.daemon.running:
                if slot.stopped:
                    slot.daemon.signal(signal.SIGCONT)
                slot.daemon.stop(grace_s=10)
        self.stack.close()


def pool_statefulset(pool: str, *, replicas: int, standin: bool) -> dict[str, Any]:
    """One pool's StatefulSet: preStop ``slonkd prestop``, spread, tolerating the pool's taint."""
    sts = worker_statefulset(
        pool,
        replicas=replicas,
        grace_s=GRACE_S,
        prestop=_prestop_argv(),
        standin=standin,
        tolerations=[POOL_TOLERATION],
    )
    spread_over_nodes(sts, when="ScheduleAnyway", match=dict(WORKER_LABELS))
    sts["spec"]["updateStrategy"] = {"type": "OnDelete"}  # as the chart: slonkd rolls
    return sts


def _started(service: _T | None) -> _T:
    if service is None:
        raise HarnessError("the soak fleet is not started")
    return service


__all__ = ["CoordinatorSlot", "SoakFleet"]

"""End-to-end fixtures: worker pods on a kwok node, bound to real slurmd, with slonkd agents.

``workers`` builds the whole picture for one test: a fresh kwok node, a SLURM cluster whose
nodes are the StatefulSet's pod names, the kubelet stand-in, the StatefulSet (with
``slonkd prestop`` as its preStop hook unless told otherwise) and one ``slonkd agent``
process per pod, each started with the environment the chart's downward API would give it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.daemon import Coordinators, Daemon, read_json_log
from slonkd_sandbox.fleet import FleetShape
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kubelet import KubeletStandIn
from slonkd_sandbox.procs import HarnessError, free_ports, tail, wait_for
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from slonkd_sandbox.workloads import prestop_command
from tests.rig import OnRig, Rig

GRACE_S = 12
PRESTOP = prestop_command(GRACE_S, 4)
WORKERS = FleetShape(slurmds=2, autostart=False)
"""The ``workers`` fixture's fleet: pods w-0 and w-1 on one kwok node, each its slurmd."""


__all__ = ["read_json_log"]  # tests import it from here


def marked_unhealthy(node: Mapping[str, Any]) -> bool:
    """A K8s node's JSON carries slonkd's failure marks: cordon, taint, SlurmHealthy=False."""
    taints = {t["key"] for t in node["spec"].get("taints", [])}
    conds = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
    return (
        bool(node["spec"].get("unschedulable"))
        and "slonk.dev/unhealthy" in taints
        and conds.get("SlurmHealthy") == "False"
    )


def set_unschedulable(kube: KubeCluster, nodes: Sequence[str], *, on: bool = True) -> None:
    """Cordon (or uncordon) K8s nodes at once, as an operator's script would."""
    with ThreadPoolExecutor(min(8, max(1, len(nodes)))) as pool:
        list(
            pool.map(
                lambda n: kube.api.request(
                    "PATCH",
                    f"/api/v1/nodes/{n}",
                    {"spec": {"unschedulable": on}},
                    content_type="application/merge-patch+json",
                ),
                nodes,
            )
        )


@dataclass(slots=True)
class AgentProcess:
    """One ``slonkd agent`` process with its JSON log (kept across restarts)."""

    env: dict[str, str]
    log: Path
    prefix: tuple[str, ...] = ()
    """What runs its interpreter (another release's loader: ``libslurm_argv``)."""
    module: str = "slonkd.cli.main"
    daemon: Daemon = field(init=False)

    def __post_init__(self) -> None:
        self.daemon = Daemon(
            role="agent", env=self.env, log=self.log, prefix=self.prefix, module=self.module
        )

    def start(self) -> None:
        """Start the agent and wait until its caches synced.

        Its /healthz, /readyz and /metrics get a free port on 127.0.0.1 (kept on restart)
        unless the env names one: agents side by side must not all ask for 9464.
        """
        if "SLONKD_METRICS_PORT" not in self.env:
            self.env["SLONKD_METRICS_PORT"] = str(free_ports(1)[0])
            self.env.setdefault("SLONKD_METRICS_ADDRESS", "127.0.0.1")
        ready = Path(self.env["SLONKD_READY_FILE"])
        ready.unlink(missing_ok=True)
        self.daemon.start()
        wait_for("agent synced", ready.exists, timeout_s=30, alive=self.daemon.exited)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop (SIGTERM; past its grace the task dump, SIGKILL and a failure) or kill it."""
        if sig == signal.SIGKILL:
            self.daemon.kill()
        elif not self.daemon.stop():
            raise HarnessError(f"agent ignored SIGTERM, its tasks:\n{tail(self.log, 6000)}")

    @property
    def http_url(self) -> str:
        """Where its /healthz, /readyz and /metrics are served (after :meth:`start`)."""
        return f"http://127.0.0.1:{self.env['SLONKD_METRICS_PORT']}"

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The agent's JSON log lines, or only those of event ``name``."""
        return self.daemon.events(name)

    def actions(self) -> list[dict[str, Any]]:
        """Its ``agent.mirror_applied`` lines."""
        return self.events("agent.mirror_applied")

    def did(self, action: str, after: int = 0) -> bool:
        """Whether an ``action`` line is in its log past the first ``after`` action lines.

        The line is written once the write returned, a few ms after SLURM shows it: a test
        that saw the write in SLURM waits for the line too.
        """
        return any(a["action"] == action for a in self.actions()[after:])


@dataclass(slots=True)
class Workers(OnRig):
    """The picture one e2e test works on."""

    kube_node: str
    standin: KubeletStandIn
    agents: dict[str, AgentProcess] = field(default_factory=dict)
    client_env: dict[str, str] = field(default_factory=dict)
    """What the agents' environment adds for SLURM's clients (24.11: PATH with the shims)."""

    def pod(self, name: str) -> dict[str, Any] | None:
        """The pod's JSON, or None."""
        items = self.kube.api.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            params={"fieldSelector": f"metadata.name={name}"},
        )["items"]
        return items[0] if items else None

    def delete_pod(self, name: str, grace_s: int = GRACE_S) -> str:
        """Delete a pod gracefully; returns its uid."""
        pod = self.pod(name)
        assert pod is not None
        self.kube.api.request(
            "DELETE",
            f"/api/v1/namespaces/{self.namespace}/pods/{name}",
            {"gracePeriodSeconds": grace_s},
        )
        return str(pod["metadata"]["uid"])

    def journal_has(self, event: str, uid: str) -> bool:
        """Whether the kubelet stand-in recorded ``event`` for pod ``uid``."""
        return self.standin.recorded(event, uid)

    def wait_recreated(self, name: str, old_uid: str) -> None:
        """Wait until the StatefulSet's new pod of that name runs and its slurmd started."""

        def new_running() -> bool:
            pod = self.pod(name)
            return bool(
                pod
                and pod["metadata"]["uid"] != old_uid
                and pod.get("status", {}).get("phase") == "Running"
                and self.journal_has("slurmd.started", pod["metadata"]["uid"])
            )

        wait_for(f"{name} recreated", new_running, timeout_s=GRACE_S + 40)

    def show(self, node: str) -> str:
        """``scontrol -o show node`` of one node."""
        return self.slurm.run("scontrol", "-o", "show", "node", node).stdout


@contextlib.contextmanager
def slurm_of_release(
    release: str, layout: SlurmLayout, slurm_factory: Callable[..., SlurmCluster], shims: Path
) -> Iterator[tuple[SlurmCluster, dict[str, str]]]:
    """A cluster of ``release`` and what slonkd's processes need in their env to reach it.

    22.05 is the host's (nothing to add). Another release runs in its cached root and the
    processes call that root's clients: shims put first on their PATH. A preStop that calls
    SLURM's clients still gets the host's (the kubelet stand-in's PATH).
    """
    if release == "22.05":
        yield slurm_factory(layout), {}
        return
    cluster = ChrootSlurmCluster.create(release, layout)
    try:
        cluster.start()
        shim_dir = cluster.client_shims(shims)
        yield cluster, {"PATH": f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    finally:
        cluster.stop()


@pytest.fixture
def worker_slurm(
    slurm_factory: Callable[..., SlurmCluster], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[SlurmCluster, dict[str, str]]]:
    """The SLURM cluster of nodes w-0 and w-1 (no slurmd yet), and the agents' client env.

    The host's 22.05 unless a test parametrizes this fixture indirectly with ``"24.11"``
    (see :func:`slurm_of_release`).
    """
    release = str(getattr(request, "param", WORKERS.release))
    with slurm_of_release(release, WORKERS.layout(), slurm_factory, tmp_path / "slurm-bin") as got:
        yield got


@pytest.fixture
def workers(
    rig: Rig,
    worker_slurm: tuple[SlurmCluster, dict[str, str]],
    request: pytest.FixtureRequest,
) -> Iterator[Workers]:
    """One kwok node, two worker pods w-0 and w-1 bound to slurmd, and their agents.

    ``@pytest.mark.prestop(argv)`` replaces the preStop command; SLURM is ``worker_slurm``.
    """
    marker = request.node.get_closest_marker("prestop")
    prestop = marker.args[0] if marker else PRESTOP
    names = WORKERS.names
    slurm, clients = worker_slurm
    build = rig.fleet(WORKERS)
    (kube_node,) = build.add_kube_nodes("e2e-", untainted_s=None)
    standin = rig.standin(slurm)
    standin.start()
    w = Workers(
        rig=rig,
        slurm=slurm,
        kube_node=kube_node,
        standin=standin,
        client_env=clients,
    )
    try:
        sts = build.statefulset(
            grace_s=GRACE_S, prestop=prestop, env={"GATE_DIR": str(rig.tmp_path)}
        )
        build.create(sts)
        slurm.wait_idle(names, timeout_s=60)
        for name in names:
            env = {
                **os.environ,
                "POD_NAME": name,
                "POD_NAMESPACE": rig.namespace,
                "NODE_NAME": kube_node,
                "KUBECONFIG": str(rig.kube.kubeconfig),
                "SLURM_CONF": str(slurm.conf),
                "SLONKD_RESYNC_S": "2",
                "SLONKD_READY_FILE": str(rig.tmp_path / f"ready-{name}"),
                **clients,
            }
            agent = AgentProcess(env=env, log=rig.tmp_path / f"agent-{name}.log")
            agent.start()
            w.agents[name] = agent
        yield w
    finally:
        for agent in w.agents.values():
            agent.stop()
        standin.stop()


@pytest.fixture
def coordinators(tmp_path: Path) -> Iterator[Coordinators]:
    """The test's ``slonkd coordinator`` candidates (logs in tmp_path); stopped at the end.

    A fixture that starts other processes for them stops them itself (``stop()``) where its
    order matters; whatever is still running is stopped here, and one that ignored SIGTERM
    fails the test with its task dump.
    """
    with Coordinators(root=tmp_path) as group:
        yield group

"""The coordinator's fleet of the e2e tests: 20 worker pods on 10 kwok nodes, 20 slurmd, a leader.

:class:`Fleet` and its fixtures (``coordinator_config``, ``fleet_slurm``, ``fleet``), built
with :mod:`slonkd_sandbox.fleet`; one shared module, so that ``test_coordinator.py``,
``test_coordinator_metrics.py`` and ``test_job_blame.py`` import it and none of them imports
another test file. Neighbours: ``tests/e2e/conftest.py`` (``coordinators``,
:func:`~tests.e2e.conftest.slurm_of_release`), :mod:`tests.rig` (the rig it stands on).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from slonkd.core.log_events import COORDINATOR_API_LISTENING
from slonkd_sandbox.daemon import Coordinators, Daemon
from slonkd_sandbox.fleet import LEASE_TIMINGS, FleetShape
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster
from slonkd_sandbox.workloads import spread_over_nodes
from tests.cli import slonkd
from tests.e2e.conftest import slurm_of_release
from tests.pyslurm_builds import built_or_skip
from tests.rig import OnRig, Rig

PODS = 20
KUBE_NODES = 10
SHAPE = FleetShape(slurmds=PODS, kube_nodes=KUBE_NODES)


@dataclass(slots=True)
class Fleet(OnRig):
    """Worker pods spread over kwok nodes, their SLURM nodes, and a running coordinator."""

    kube_nodes: list[str]
    env: dict[str, str]
    audit: Path
    coordinators: Coordinators
    """The first is the fleet's; tests start standbys."""

    @property
    def first(self) -> Daemon:
        """The coordinator the fleet started with."""
        return self.coordinators[0]

    @property
    def log(self) -> Path:
        """The first coordinator's log."""
        return self.first.log

    def standby(self, identity: str) -> Daemon:
        """Start another candidate (it leads only when the lease is free)."""
        return self.coordinators.start(self.env, identity=identity, until=None)

    def api_url(self) -> str:
        """The leader's status API (its port is chosen at start and logged)."""
        ports = [e["port"] for e in self.events(COORDINATOR_API_LISTENING)]
        return f"http://127.0.0.1:{ports[-1]}"

    def slonkd(self, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run an operator command (``slonkd status`` ...) as an operator would."""
        env = {**self.env, "SLONKD_COORDINATOR_URL": url or self.api_url()}
        return slonkd(*args, env=env)

    def state(self) -> dict[str, str]:
        """The coordinator's state ConfigMap data."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/slonkd-state"
        return dict(self.kube.api.request("GET", path).get("data") or {})

    def fail(self, nodes: list[str], reason: str = "Kill task failed") -> None:
        """Mark SLURM nodes failed with a SLURM-style reason, in one call."""
        hostlist = ",".join(nodes)
        self.slurm.run(
            "scontrol", "update", f"nodename={hostlist}", "state=fail", f"reason={reason}"
        )

    def cordoned(self) -> set[str]:
        """K8s nodes of the fleet that are cordoned."""
        return {n for n in self.kube_nodes if self.knode(n)["spec"].get("unschedulable")}

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The first coordinator's JSON log lines, or only those of event ``name``."""
        return self.first.events(name)

    def cordons(self) -> list[tuple[str, str]]:
        """``(SLURM node, K8s node)`` of each cordon the first coordinator made, in order.

        What a test that waits for a failure's marks asks: the cordon of a pod's failure is
        lifted again (within about 0.2 s here) once the evicted pod's replacement settles on
        another K8s node and the healthy sibling left on this one passes, so the node's own
        ``unschedulable`` can be missed by a poll.
        """
        return [
            (e["node"], e["kube_node"])
            for e in self.events("kube.cordon")
            if e.get("outcome") == "changed"
        ]

    def pods_on(self, kube_node: str) -> list[str]:
        """Names of the live pods on ``kube_node``."""
        items = self.kube.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        return sorted(
            p["metadata"]["name"]
            for p in items
            if p["spec"].get("nodeName") == kube_node and not p["metadata"].get("deletionTimestamp")
        )

    def reasons(self) -> dict[str, str]:
        """``{slurm node: reason}`` (``none`` when there is none)."""
        out = self.slurm.run("sinfo", "-h", "-N", "-o", "%N|%E").stdout
        return dict(line.split("|", 1) for line in out.splitlines() if line)

    def knode(self, name: str) -> dict[str, Any]:
        """A K8s node's JSON."""
        return dict(self.kube.api.request("GET", f"/api/v1/nodes/{name}"))


BASE_CONFIG: dict[str, Any] = {
    "resync_s": 1,
    "failure_grace_s": 1,
    "unready_grace_s": 30,
    "max_out": 15,
    "max_out_percent": 100,
    "mass_percent": 100,
    **LEASE_TIMINGS,
    "api_host": "127.0.0.1",
    "api_port": 0,
}


@pytest.fixture
def coordinator_config() -> dict[str, Any]:
    """Settings of the fleet's coordinator (tests override it)."""
    return dict(BASE_CONFIG)


@pytest.fixture
def fleet_slurm(
    slurm_factory: Callable[..., SlurmCluster], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[SlurmCluster, dict[str, str]]]:
    """20 idle slurmd (nothing is out at the start), and the coordinator's client env.

    SLURM 22.05 unless a test parametrizes this fixture indirectly with ``"24.11"``, or with
    ``(release, slurmd_timeout_s)`` for another SlurmdTimeout than the harness's quick one.
    """
    param = getattr(request, "param", "22.05")
    release, timeout_s = param if isinstance(param, tuple) else (str(param), 10)
    shape = replace(SHAPE, release=release, slurmd_timeout_s=timeout_s)
    with slurm_of_release(
        shape.release, shape.layout(), slurm_factory, tmp_path / "slurm-bin"
    ) as got:
        yield got


@pytest.fixture
def fleet(
    rig: Rig,
    fleet_slurm: tuple[SlurmCluster, dict[str, str]],
    coordinator_config: dict[str, Any],
    coordinators: Coordinators,
) -> Fleet:
    """20 worker pods on 10 kwok nodes, 20 idle slurmd, one coordinator with fast timings."""
    slurm, clients = fleet_slurm
    build = rig.fleet(replace(SHAPE, coordinator=coordinator_config))
    kube_nodes = build.add_kube_nodes("c")
    sts = build.statefulset(standin=False)
    spread_over_nodes(sts, honor_taints=True)
    build.create(sts)
    build.wait_running("20 pods Running", timeout_s=90)
    config = build.coordinator_config(
        rig.tmp_path / "coordinator.json", audit_path=str(rig.tmp_path / "audit.jsonl")
    )
    env = build.coordinator_env(slurm.conf, SLONKD_CONFIG=str(config), **clients)
    prefix: list[str] = []
    module = "slonkd.cli.main"
    if coordinator_config.get("slurm_backend") == "pyslurm":  # the release's build (issue 39)
        release = "24.11" if isinstance(slurm, ChrootSlurmCluster) else "22.05"
        env["SLONKD_PYSLURM_PATH"] = str(built_or_skip(release))
        if isinstance(slurm, ChrootSlurmCluster):  # as the release's image: its library
            prefix, env = slurm.libslurm_argv([], env)
            module = "slonkd_sandbox.slurm.libslurm_launch"
    # until it is synced; stopped (SIGTERM, dump, SIGKILL) at the end
    coordinators.start(env, prefix=prefix, module=module)
    return Fleet(
        rig=rig,
        slurm=slurm,
        kube_nodes=kube_nodes,
        env=env,
        audit=rig.tmp_path / "audit.jsonl",
        coordinators=coordinators,
    )

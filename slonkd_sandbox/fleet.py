"""A fleet for tests and benchmarks: worker pods, the K8s nodes under them, their SLURM nodes.

Every fleet the tests and benchmarks build says the same few things: how many worker pods
(StatefulSet pool ``w``: pods ``w-0``, ``w-1`` ..., each the SLURM node of its name), which of
their SLURM nodes have a slurmd and which are only declared (in the same pool, or a pool of
their own), how many kwok nodes they spread over, which SLURM release, and the coordinator's
settings. :class:`FleetShape` says it once; :meth:`FleetShape.layout` is the SLURM cluster's
:class:`~slonkd_sandbox.slurm.conf.SlurmLayout`. :class:`FleetBuilder` puts a shape on a
control plane: kwok nodes labelled for the test's namespace, the worker StatefulSet, its pods
Running, and the coordinator's settings file and environment.

Neighbours: :mod:`slonkd_sandbox.workloads` (the StatefulSet's manifest),
:mod:`slonkd_sandbox.kube.cluster` (the control plane), :mod:`slonkd_sandbox.slurm.conf` (the
layout) and :mod:`slonkd_sandbox.daemon` (the coordinator's environment and processes). Users:
the e2e fixtures (``tests/e2e/conftest.py``'s ``workers``, ``coordinator_fleet.py``,
``health_path_fleet.py``, ``test_coordinator_nudge.py``, ``test_coordinator_scale.py``,
through :meth:`tests.rig.Rig.fleet`), the fakes of ``tests/unit/test_job_places.py`` and
``test_soak_check.py``, ``bench/agent.py``, ``bench/soak_fleet.py``, and the bound fleets of
``bench/coordinator.py`` and ``bench/kube.py`` (:meth:`FleetBuilder.bound`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slonkd_sandbox.daemon import coordinator_env
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kwok import fake_node_body
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.conf import SlurmLayout
from slonkd_sandbox.workloads import bound_worker_pod, worker_statefulset

POOL = "w"
"""The worker StatefulSet's name: its pods, and their SLURM nodes, are ``w-<i>``."""
TEST_LABEL = "slonk.dev/test"
"""The label of a test's kwok nodes (its namespace), which its worker pods select."""
LEASE_TIMINGS: dict[str, Any] = {"lease_duration_s": 6, "renew_deadline_s": 4, "retry_period_s": 1}
"""The lease timings of a test's coordinator: a standby takes over within seconds."""


def worker_names(pool: str, count: int, first: int = 0) -> tuple[str, ...]:
    """The names of ``count`` pods of StatefulSet ``pool`` from ordinal ``first`` on."""
    return tuple(f"{pool}-{i}" for i in range(first, first + count))


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetShape:
    """What a fleet is made of; nothing runs until a :class:`FleetBuilder` places it."""

    slurmds: int
    """Worker pods whose SLURM node has a slurmd: ``w-0`` ... (the first of the pool)."""
    declared: int = 0
    """More SLURM nodes, declared without a slurmd (pings to them go unanswered)."""
    declared_pool: str | None = None
    """None: the declared nodes are the pool's next pods (``w-<slurmds>`` ...); else the pods
    ``<declared_pool>-0`` ... of a StatefulSet of their own."""
    pool: str = POOL
    kube_nodes: int = 1
    """kwok nodes the pods spread over."""
    release: str = "22.05"
    """The SLURM release (22.05 on the host; another in its cached root)."""
    autostart: bool = True
    """The cluster starts the slurmds itself (False: the kubelet stand-in starts each with its
    pod)."""
    slurmd_timeout_s: int = 10
    coordinator: Mapping[str, Any] = field(default_factory=dict)
    """The coordinator's settings (its SLONKD_CONFIG)."""

    @property
    def real_names(self) -> tuple[str, ...]:
        """The SLURM nodes with a slurmd (pods of :attr:`pool`)."""
        return worker_names(self.pool, self.slurmds)

    @property
    def declared_names(self) -> tuple[str, ...]:
        """The SLURM nodes declared without a slurmd."""
        if self.declared_pool is None:
            return worker_names(self.pool, self.declared, first=self.slurmds)
        return worker_names(self.declared_pool, self.declared)

    @property
    def names(self) -> tuple[str, ...]:
        """Every worker pod, which is also its SLURM node."""
        return self.real_names + self.declared_names

    def kube_node_names(self, prefix: str) -> tuple[str, ...]:
        """The kwok nodes' names ``<prefix><i>`` (a test makes them unique)."""
        return tuple(f"{prefix}{i}" for i in range(self.kube_nodes))

    @property
    def pods(self) -> int:
        """How many worker pods (every SLURM node's)."""
        return self.slurmds + self.declared

    def layout(self, **more: Any) -> SlurmLayout:
        """The SLURM cluster's layout; ``more``: other :class:`SlurmLayout` fields."""
        first = self.slurmds if self.declared_pool is None else 0
        return SlurmLayout(
            nodes=self.real_names,
            autostart=self.autostart,
            extra_prefix=f"{self.declared_pool or self.pool}-",
            extra_first=first,
            extra_nodes=self.declared,
            slurmd_timeout_s=self.slurmd_timeout_s,
            **more,
        )


@dataclass(slots=True, kw_only=True)
class FleetBuilder:
    """Places a :class:`FleetShape` on a control plane, in one namespace, step by step.

    ``unique`` names the kwok nodes (a test's nodes must not clash with another's); with
    ``labelled`` they carry :data:`TEST_LABEL` and the worker pods select it.
    """

    kube: KubeCluster
    namespace: str
    shape: FleetShape
    unique: Callable[[str], str] = str
    labelled: bool = True

    @property
    def label(self) -> dict[str, str]:
        """The kwok nodes' label the worker pods select (none when not :attr:`labelled`)."""
        return {TEST_LABEL: self.namespace} if self.labelled else {}

    def add_kube_nodes(
        self,
        prefix: str,
        *,
        untainted_s: float | None = 60.0,
        interval_s: float = 0.05,
        capacity: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The shape's kwok nodes ``<prefix><i>``, Ready and (unless None) untainted in time."""
        names = [self.unique(n) for n in self.shape.kube_node_names(prefix)]
        nodes = self.kube.add_fake_nodes(names, labels=self.label or None, capacity=capacity)
        if untainted_s is not None:
            self.kube.wait_untainted(nodes, timeout_s=untainted_s, interval_s=interval_s)
        return nodes

    def statefulset(self, *, pool: str | None = None, **kw: Any) -> dict[str, Any]:
        """The worker StatefulSet of ``pool`` (the shape's) with a pod per SLURM node of it.

        ``kw``: :func:`~slonkd_sandbox.workloads.worker_statefulset`'s other arguments.
        """
        name = pool or self.shape.pool
        replicas = sum(n.rsplit("-", 1)[0] == name for n in self.shape.names)
        return worker_statefulset(name, replicas=replicas, node_selector=self.label or None, **kw)

    def bound(
        self,
        prefix: str,
        names: Sequence[str] | None = None,
        *,
        node_body: Callable[[str], dict[str, Any]] | None = None,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """A kwok node ``<prefix><pod>`` per worker pod and the pod bound to it, as bodies.

        ``names``: some of the shape's pods (default: all); ``node_body``: a node's body by
        its name (default: a kwok node with :attr:`label`). Pods bound by ``nodeName`` need
        no scheduler and no StatefulSet's ordered start: the benchmarks' 5,000-node fleets,
        which they send in bulk with a client of their own (this harness's speaks to the
        apiserver one request at a time, :mod:`slonkd_sandbox.kube.api`).
        """
        pods = list(self.shape.names if names is None else names)
        make = node_body or (lambda name: fake_node_body(name, labels=self.label or None))
        nodes = [make(self.unique(f"{prefix}{pod}")) for pod in pods]
        bound = [
            bound_worker_pod(pod, node["metadata"]["name"])
            for pod, node in zip(pods, nodes, strict=True)
        ]
        return nodes, bound

    def create(self, sts: Mapping[str, Any]) -> None:
        """Create the StatefulSet ``sts`` in the namespace."""
        path = f"/apis/apps/v1/namespaces/{self.namespace}/statefulsets"
        self.kube.api.request("POST", path, dict(sts))

    def running(self) -> dict[str, str]:
        """``{pod: K8s node}`` of the namespace's Running pods."""
        items = self.kube.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        return {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in items
            if p.get("status", {}).get("phase") == "Running"
        }

    def wait_running(self, what: str, *, timeout_s: float) -> dict[str, str]:
        """Wait until every worker pod runs; ``{pod: K8s node}``."""
        wait_for(what, lambda: len(self.running()) == self.shape.pods, timeout_s=timeout_s)
        return self.running()

    def coordinator_config(self, path: Path, **more: Any) -> Path:
        """Write the shape's coordinator settings (and ``more``) to ``path`` as JSON."""
        path.write_text(json.dumps({**more, **self.shape.coordinator}))
        return path

    def coordinator_env(self, slurm_conf: Path, **extra: str) -> dict[str, str]:
        """A coordinator's environment for this namespace, control plane and SLURM cluster."""
        return coordinator_env(
            namespace=self.namespace,
            kubeconfig=self.kube.kubeconfig,
            slurm_conf=slurm_conf,
            **extra,
        )


__all__ = ["LEASE_TIMINGS", "POOL", "TEST_LABEL", "FleetBuilder", "FleetShape", "worker_names"]

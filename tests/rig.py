"""What most end-to-end and harness tests start from, in one object: :class:`Rig`.

The ``rig`` fixture of ``tests/conftest.py`` builds it of that module's ``kube`` (the
session's control plane), ``namespace``, ``unique`` and ``slurm_factory`` and of pytest's
``tmp_path``; the fixtures of ``tests/e2e/conftest.py`` and the tests of ``tests/e2e`` and
``tests/contract`` that need those take ``rig`` instead of listing them one by one.
:class:`OnRig` is the base of the objects those fixtures hand their tests (``Workers`` of
``tests/e2e/conftest.py``, the fleets of ``tests/e2e/coordinator_fleet.py``,
``health_path_fleet.py`` and others); :meth:`Rig.fleet` places a
:class:`~slonkd_sandbox.fleet.FleetShape` in the rig's namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slonkd_sandbox.fleet import FleetBuilder, FleetShape
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kubelet import KubeletStandIn
from slonkd_sandbox.slurm.cluster import SlurmCluster


@dataclass(frozen=True, slots=True)
class Rig:
    """One test's control plane, namespace, unique names, SLURM clusters and directory."""

    kube: KubeCluster
    """The session's Kubernetes control plane."""
    namespace: str
    """The test's fresh namespace (deleted afterwards)."""
    unique: Callable[[str], str]
    """Unique, DNS-safe names for objects that are not namespaced (nodes)."""
    slurm_factory: Callable[..., SlurmCluster]
    """Starts a SLURM cluster of a layout (all are stopped after the test)."""
    tmp_path: Path
    """The test's own directory."""

    def create_statefulset(self, sts: dict[str, Any]) -> None:
        """Create the StatefulSet ``sts`` in the test's namespace."""
        self.kube.api.request(
            "POST", f"/apis/apps/v1/namespaces/{self.namespace}/statefulsets", sts
        )

    def fleet(self, shape: FleetShape) -> FleetBuilder:
        """The builder that places ``shape`` in the test's namespace (its kwok nodes unique)."""
        return FleetBuilder(
            kube=self.kube, namespace=self.namespace, shape=shape, unique=self.unique
        )

    def standin(self, slurm: SlurmCluster, root: str = "kubelet") -> KubeletStandIn:
        """The kubelet stand-in (not started) binding the namespace's pods to ``slurm``."""
        return KubeletStandIn(
            kube=self.kube, slurm=slurm, namespace=self.namespace, root=self.tmp_path / root
        )


@dataclass(slots=True)
class OnRig:
    """The base of the pictures e2e fixtures build: a rig and the SLURM cluster of its pods."""

    rig: Rig
    slurm: SlurmCluster

    @property
    def kube(self) -> KubeCluster:
        """The rig's control plane."""
        return self.rig.kube

    @property
    def namespace(self) -> str:
        """The rig's namespace, where the pods are."""
        return self.rig.namespace

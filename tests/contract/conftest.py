"""Fixtures for the SLURM adapter's contract tests: real clusters of both releases.

Every test that takes ``cluster`` (or ``cluster_factory``, ``backend``) runs twice: against
SLURM 22.05 on the host and against SLURM 24.11 in a debootstrapped trixie root (built
once and cached, see :mod:`slonkd_sandbox.slurm.root`). One that takes ``any_backend`` runs
on each backend of the SLURM port too (scontrol, pyslurm: :data:`BACKEND_KINDS`).
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.pyslurm_writes import PyslurmBackend
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.realnode.node import RealNode
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests.pyslurm_builds import built_or_skip
from tests.started import Started

SLURM_RELEASES = ("22.05", "24.11")


def settings_for(cluster: SlurmCluster, **overrides: Any) -> SlurmSettings:
    """Adapter settings that reach ``cluster``, with zero retry waits (tests do not sleep)."""
    base: dict[str, Any] = {
        "retry_wait_min_s": 0.0,
        "retry_wait_max_s": 0.0,
        "timeout_s": 30.0,
    }
    if isinstance(cluster, ChrootSlurmCluster):
        base["argv_prefix"] = cluster.client_prefix
    else:
        base["env"] = {"SLURM_CONF": str(cluster.conf)}
    return SlurmSettings(**{**base, **overrides})


def conf_arg(cluster: SlurmCluster) -> str:
    """slurm.conf's path as the cluster's daemons were given it."""
    if isinstance(cluster, ChrootSlurmCluster):
        return cluster.inner(cluster.conf)
    return str(cluster.conf)


def slurmctld_pid(cluster: SlurmCluster) -> int:
    """Host pid of the cluster's slurmctld (the supervisor only knows namespace pids)."""
    out = subprocess.run(
        ["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True, timeout=30
    )
    wanted = f"slurmctld -D -f {conf_arg(cluster)}"
    pids = [int(line.split(None, 1)[0]) for line in out.stdout.splitlines() if wanted in line]
    assert len(pids) == 1, out.stdout
    return pids[0]


@pytest.fixture(params=SLURM_RELEASES)
def slurm_release(request: pytest.FixtureRequest) -> str:
    """The SLURM release a contract test runs against."""
    return str(request.param)


@pytest.fixture
def cluster_factory(
    slurm_release: str, slurm_factory: Callable[..., SlurmCluster]
) -> Iterator[Callable[..., SlurmCluster]]:
    """Start clusters of ``slurm_release`` with a chosen layout; all stopped afterwards."""
    started = Started[SlurmCluster]()

    def make(layout: SlurmLayout | None = None) -> SlurmCluster:
        if slurm_release == "22.05":
            return slurm_factory(layout)
        return started.start(ChrootSlurmCluster.create(slurm_release, layout))

    yield make
    started.stop_all()
    left = [ln for c in started.services for ln in _processes() if str(c.root) in ln]
    if left:
        pytest.fail("24.11 cluster processes outlived the test:\n" + "\n".join(left))


def _processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


@pytest.fixture
def cluster(cluster_factory: Callable[..., SlurmCluster]) -> SlurmCluster:
    """A real cluster (munged, slurmctld, four idle slurmd n1..n4) of ``slurm_release``."""
    return cluster_factory()


@pytest.fixture
def backend(cluster: SlurmCluster) -> ScontrolBackend:
    """The scontrol backend talking to ``cluster``."""
    return ScontrolBackend(settings_for(cluster))


@pytest.fixture(scope="module")
def real_node(session_root: Path) -> Iterator[RealNode]:
    """A real node (containerd, kubelet, CoreDNS) started once, with a control plane of its own.

    Its own control plane so that no other test's pod is scheduled onto it and no other
    test's node listing sees it. Tear-down fails the session if anything of it survived.
    """
    cluster = KubeCluster(session_root / "rk")
    node = RealNode(session_root / "rn", cluster=cluster)
    try:
        cluster.start()
        node.start()
        yield node
    finally:
        try:
            node.stop()
        finally:
            cluster.stop()


BACKEND_KINDS = ("scontrol", "pyslurm")
"""The SLURM port's backends: every contract test of the port runs on each (issue 39)."""


@pytest.fixture(params=BACKEND_KINDS)
async def backend_factory(
    request: pytest.FixtureRequest,
) -> AsyncIterator[Callable[..., SlurmBackend]]:
    """Make each backend in turn for a cluster: scontrol, then pyslurm (children closed after).

    ``make(cluster, **settings)``: :func:`settings_for` with ``settings``. pyslurm's child
    runs on the release's own library (24.11: under the root's loader, as
    :meth:`~slonkd_sandbox.slurm.chroot.ChrootSlurmCluster.libslurm_argv` runs a host program)
    with the host's path of slurm.conf; its one SLURM client (``scontrol reboot``) runs as the
    scontrol backend's do. Without a build: skipped, or failed under ``SLONKD_REQUIRE_PYSLURM``.
    """
    site = request.getfixturevalue("pyslurm_built") if request.param == "pyslurm" else None
    made: list[PyslurmBackend] = []

    def make(cluster: SlurmCluster, **overrides: Any) -> SlurmBackend:
        if site is None:
            return ScontrolBackend(settings_for(cluster, **overrides))
        prefix: tuple[str, ...] = ()
        if isinstance(cluster, ChrootSlurmCluster):
            prefix = tuple(cluster.libslurm_argv([], {})[0])
        settings = settings_for(cluster, env={"SLURM_CONF": str(cluster.conf)}, **overrides)
        made.append(PyslurmBackend(settings, pyslurm_path=str(site), child_prefix=prefix))
        return made[-1]

    try:
        yield make
    finally:
        for backend in made:
            await backend.aclose()


@pytest.fixture
def any_backend(
    backend_factory: Callable[..., SlurmBackend], cluster: SlurmCluster
) -> SlurmBackend:
    """Each backend talking to ``cluster`` (:func:`backend_factory`)."""
    return backend_factory(cluster)


def kind_of(backend: SlurmBackend) -> str:
    """``scontrol`` or ``pyslurm``: per-backend expectations, never a weaker contract."""
    return "pyslurm" if isinstance(backend, PyslurmBackend) else "scontrol"


@pytest.fixture
def pyslurm_built(slurm_release: str) -> Path:
    """The built pyslurm of ``slurm_release`` (its site directory).

    Skipped with the bootstrap's reason without one; failed instead under
    ``SLONKD_REQUIRE_PYSLURM=1`` (CI).
    """
    return built_or_skip(slurm_release)

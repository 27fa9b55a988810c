"""Fixtures that start the real services of :mod:`slonkd_sandbox`.

One Kubernetes control plane for the whole session (tests isolate themselves by namespace
and node names); SLURM clusters and brokers are cheap (about a second) and are started per
test, each in its own directory with its own ports. After the session, a check fails the
run if any process of the harness outlived it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from slonkd.adapters.kube.transport import KubeTransport
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.mosquitto import Mosquitto, MqttUser
from slonkd_sandbox.procs import PORT_SLICE_ENV
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests import failure_logs, parallel, timing
from tests.rig import Rig
from tests.started import Started

HARNESS_PREFIX = "slonkd-test-"

# Wall-clock deadlines per example fail on a loaded 2-core machine: correctness only here.
settings.register_profile("slonkd", deadline=None, print_blob=True)
settings.load_profile("slonkd")


def pytest_configure(config: pytest.Config) -> None:
    """Register the suite's plugins; set this worker's ports and the turns' lock folder.

    Each test's phases and slow fixtures go to its JUnit XML (tests.timing); a failure shows
    its daemons' logs (tests.failure_logs).
    """
    for name, plugin in (("slonkd-timing", timing), ("slonkd-failure-logs", failure_logs)):
        if not config.pluginmanager.has_plugin(name):
            config.pluginmanager.register(plugin, name)
    worker, workers = (
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )
    if worker and workers:  # this worker's ports, disjoint from the others' (and its children's)
        os.environ[PORT_SLICE_ENV] = f"{worker.removeprefix('gw')}/{workers}"
    turns = parallel.make_lock_dir(config)
    if turns is not None:
        config.add_cleanup(lambda: shutil.rmtree(turns, ignore_errors=True))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``real`` mark agrees with the groups; an xdist worker sorts them (tests.parallel)."""
    parallel.check_marks(items)
    if hasattr(config, "workerinput"):  # every worker the same order: units go out in it
        items.sort(key=lambda item: parallel.rank(item.nodeid))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Under xdist, a test marked ``alone`` runs while no other worker runs one.

    Outermost (tryfirst), so the wait for the turn is not counted in the test's timeout.
    """
    where = parallel.lock_dir(item.config)
    if where is None:
        yield
        return
    with parallel.turn(where, alone=item.get_closest_marker(parallel.ALONE) is not None):
        yield


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Share tests out by :func:`tests.parallel.group_of` (the real node's tests together)."""
    return parallel.make_scheduler(config, log)


def _short_tmp(tag: str) -> Path:
    # Unix socket paths are limited to 108 bytes: keep service roots short.
    return Path(tempfile.mkdtemp(prefix=f"{HARNESS_PREFIX}{tag}-", dir="/tmp"))


def _harness_processes(marker: str) -> list[str]:
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True, check=True
    )
    return [line for line in out.stdout.splitlines() if marker in line and "ps -eo" not in line]


@pytest.fixture(scope="session")
def session_root() -> Iterator[Path]:
    """A private directory for this session's services; checked for leftovers at the end."""
    root = _short_tmp("s")
    yield root
    left = _harness_processes(str(root))
    if left:
        pytest.fail("harness processes outlived the session:\n" + "\n".join(left))
    if not os.environ.get("SLONKD_KEEP_TEST_DIRS"):
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def kube(session_root: Path) -> Iterator[KubeCluster]:
    """The session's real control plane (etcd, apiserver, kcm, scheduler, kwok)."""
    cluster = KubeCluster(session_root / "kube")
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def namespace(kube: KubeCluster) -> Iterator[str]:
    """A fresh namespace with its default ServiceAccount, deleted afterwards."""
    name = f"t-{secrets.token_hex(4)}"
    kube.create_namespace(name)
    yield name
    kube.api.request("DELETE", f"/api/v1/namespaces/{name}", ok=(200, 202, 404))


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Unique, DNS-safe names for objects that are not namespaced (nodes)."""
    tag = secrets.token_hex(3)
    return lambda base: f"{base}-{tag}"


@pytest.fixture
def slurm_factory(session_root: Path) -> Iterator[Callable[..., SlurmCluster]]:
    """Start SLURM clusters with a chosen layout; all are stopped after the test."""
    started = Started[SlurmCluster]()

    def make(layout: SlurmLayout | None = None) -> SlurmCluster:
        root = Path(tempfile.mkdtemp(prefix="slurm-", dir=session_root))
        return started.start(SlurmCluster(root, layout or SlurmLayout()))

    yield make
    started.stop_all()


@pytest.fixture
def rig(
    kube: KubeCluster,
    namespace: str,
    unique: Callable[[str], str],
    slurm_factory: Callable[..., SlurmCluster],
    tmp_path: Path,
) -> Rig:
    """The fixtures above and ``tmp_path`` in one object (see :mod:`tests.rig`)."""
    return Rig(
        kube=kube,
        namespace=namespace,
        unique=unique,
        slurm_factory=slurm_factory,
        tmp_path=tmp_path,
    )


@pytest.fixture
def slurm(slurm_factory: Callable[..., SlurmCluster]) -> SlurmCluster:
    """A real SLURM 22.05 cluster: munged, slurmctld and four idle slurmd (n1..n4)."""
    return slurm_factory()


@pytest.fixture
def mosquitto(session_root: Path) -> Iterator[Mosquitto]:
    """A real mosquitto with password and ACL files: ``agent-a`` may write only its topics."""
    root = Path(tempfile.mkdtemp(prefix="mqtt-", dir=session_root))
    broker = Mosquitto(
        root,
        users={
            "watcher": MqttUser(password="watcher-pw", acl=("topic read slonk/#",)),
            "agent-a": MqttUser(password="agent-a-pw", acl=()),
        },
        patterns=("pattern write slonk/v1/+/nodes/%u/#",),
    )
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
async def kube_transport(kube: KubeCluster) -> AsyncIterator[KubeTransport]:
    """The adapter's transport to the session's control plane, with admin rights."""
    transport = await KubeTransport.from_kubeconfig(kube.kubeconfig)
    yield transport
    await transport.close()

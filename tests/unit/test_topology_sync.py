"""The coordinator's topology settings, and which labels each SLURM node gets."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import structlog

from slonkd.adapters.kube.informer import Informer
from slonkd.adapters.kube.sources import node_source, pod_source
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.kube_objects import KubeNodeName, Node, Pod, PodName, PodPhase
from slonkd.core.topology import TopologySpec, leaf_membership, render, stamped, stamped_hash
from slonkd.runtime.coordinating.topology_apply import TopologyApplier, write_if_changed
from slonkd.runtime.coordinating.topology_settings import TopologySettings, topology_settings
from slonkd.runtime.coordinating.topology_sync import TopologySync, labels_by_slurm_node


def _node(name: str, **labels: str) -> Node:
    return Node(name=KubeNodeName(name), uid=name, resource_version="1", unschedulable=False,
                labels=labels)  # fmt: skip


def _pod(name: str, node: str | None) -> Pod:
    return Pod(
        name=PodName(name),
        namespace="ns",
        uid=f"u-{name}",
        resource_version="1",
        node_name=KubeNodeName(node) if node else None,
        phase=PodPhase.RUNNING,
        ready=True,
    )


def test_settings_from_the_config_object() -> None:
    """Keys map to the spec and the sync settings; the chart's ConfigMap name is the default."""
    s = topology_settings(
        {
            "plugin": "block",
            "block_key": "nvl",
            "block_sizes": [4, 8],
            "slurmctld_copy": "/etc/slurm/topology.conf",
            "debounce_s": 0.5,
            "min_reconfigure_interval_s": 30,
        },
        default_configmap="rel-topology",
    )
    assert s.spec == TopologySpec(plugin="block", block_key="nvl", block_sizes=(4, 8))
    assert s.configmap == "rel-topology"
    assert s.copy == "/etc/slurm/topology.conf"
    assert s.debounce_s == 0.5
    assert s.min_reconfigure_interval_s == 30
    tree = topology_settings({"tree_keys": ["a", "b"], "path": "/x/topology.conf"})
    assert tree.spec.tree_keys == ("a", "b")
    assert tree.copy == "/x/topology.conf"  # no separate copy: the path slurmctld reads
    assert tree.configmap == "slonkd-topology"
    assert tree.min_reconfigure_interval_s == 60.0  # the default


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ([], "must be a JSON object"),
        ({"plugin": "tree", "slurmctld_copy": "/c", "typo_s": 1}, "unknown keys"),
        ({"plugin": "ring", "slurmctld_copy": "/c"}, "plugin must be tree or block"),
        ({"configmap": None, "path": None, "slurmctld_copy": "/c"}, "configmap and/or path"),
        ({}, "set slurmctld_copy"),
        ({"tree_keys": [], "slurmctld_copy": "/c"}, "tree_keys"),
        ({"tree_keys": "zone", "slurmctld_copy": "/c"}, "tree_keys"),
        ({"block_sizes": [0], "slurmctld_copy": "/c"}, "block_sizes"),
        ({"block_sizes": [True], "slurmctld_copy": "/c"}, "block_sizes"),
        ({"block_sizes": [4, 6], "slurmctld_copy": "/c"}, "power of two"),
        ({"debounce_s": -1, "slurmctld_copy": "/c"}, "debounce_s"),
        ({"debounce_s": "1", "slurmctld_copy": "/c"}, "debounce_s"),
        ({"path": 3, "slurmctld_copy": "/c"}, "path must be a string"),
        ({"min_reconfigure_interval_s": -1, "slurmctld_copy": "/c"}, "min_reconfigure_interval"),
        ({"min_reconfigure_interval_s": "1", "slurmctld_copy": "/c"}, "min_reconfigure_interval"),
        ({"min_reconfigure_interval_s": True, "slurmctld_copy": "/c"}, "min_reconfigure_interval"),
    ],
)
def test_bad_settings_are_refused_with_a_reason(doc: Any, why: str) -> None:
    """Every bad value names itself."""
    with pytest.raises(ValueError, match=why):
        topology_settings(doc)


def test_each_slurm_node_gets_the_labels_of_the_node_its_pod_runs_on() -> None:
    """Pod name = SLURM node; no pod, a pending pod or an unknown K8s node: no labels."""
    nodes = {"k1": _node("k1", rack="r1"), "k2": _node("k2", rack="r2")}
    pods = {f"ns/{p.name}": p for p in (_pod("w-0", "k1"), _pod("w-1", "k2"),
                                          _pod("w-2", None), _pod("w-3", "gone"),
                                          _pod("not-slurm", "k1"))}  # fmt: skip
    got = labels_by_slurm_node(["w-0", "w-1", "w-2", "w-3", "w-4"], pods, nodes.get)
    assert got == {"w-0": {"rack": "r1"}, "w-1": {"rack": "r2"}, "w-2": {}, "w-3": {}, "w-4": {}}
    moved = {**pods, "ns/w-0": _pod("w-0", "k2")}  # the pod moved: its SLURM node moves
    assert labels_by_slurm_node(["w-0"], moved, nodes.get) == {"w-0": {"rack": "r2"}}


def test_a_node_without_a_running_pod_keeps_its_last_place() -> None:
    """Absent, Pending (scheduled or not): the last rendering's labels; Running: its node's."""
    nodes = {"k1": _node("k1", rack="r1"), "k2": _node("k2", rack="r2")}
    last = {n: {"rack": "r1"} for n in ("w-0", "w-1", "w-2", "w-3")}
    pods = {f"ns/{p.name}": p for p in (
        _pod("w-0", "k2"),  # Running on k2 now: moves
        replace(_pod("w-1", "k2"), phase=PodPhase.PENDING, ready=False),  # scheduled, pending
        replace(_pod("w-2", None), phase=PodPhase.PENDING, ready=False),  # not scheduled
    )}  # fmt: skip
    got = labels_by_slurm_node(["w-0", "w-1", "w-2", "w-3", "w-4"], pods, nodes.get, last)
    assert got == {
        "w-0": {"rack": "r2"},
        "w-1": {"rack": "r1"},
        "w-2": {"rack": "r1"},
        "w-3": {"rack": "r1"},  # no pod at all
        "w-4": {},  # never placed, no pod
    }
    # never placed: the K8s node its pod is scheduled to, as before
    assert labels_by_slurm_node(["w-1"], pods, nodes.get, {}) == {"w-1": {"rack": "r2"}}


def test_the_file_is_written_only_when_its_content_changed(tmp_path: Path) -> None:
    """Same hash: no write (mtime kept); new content replaces the file whole."""
    path = tmp_path / "topology.conf"
    one = render({"w-0": {}}, TopologySpec())
    assert write_if_changed(path, stamped(one), one.sha256)
    before = path.stat().st_mtime_ns
    assert not write_if_changed(path, stamped(one), one.sha256)
    assert path.stat().st_mtime_ns == before
    two = render({"w-0": {}, "w-1": {}}, TopologySpec())
    assert write_if_changed(path, stamped(two), two.sha256)
    assert stamped_hash(path.read_text()) == two.sha256
    assert [p.name for p in tmp_path.iterdir()] == ["topology.conf"]  # no temporary left


def test_settings_dataclass_refuses_nowhere_to_publish() -> None:
    """Built directly (not from JSON), the same checks hold."""
    with pytest.raises(ValueError, match="configmap and/or path"):
        TopologySettings(configmap=None, slurmctld_copy="/c")


class _NoSlurm:
    """A backend that must not be reached: a refused rendering calls no SLURM command."""

    async def show_topology(self) -> str:
        raise AssertionError("a refused topology reached slurmctld")

    async def reconfigure(self) -> None:
        raise AssertionError("a refused topology reached slurmctld")


async def test_a_rendering_24_11_would_die_on_is_never_published(tmp_path: Path) -> None:
    """No block reaches the configured base: nothing written, logged, `refused` in status."""
    path = tmp_path / "topology.conf"
    path.write_text("# the file slurmctld runs\n")
    settings = TopologySettings(
        spec=TopologySpec(plugin="block", block_key="nvl", block_sizes=(4,)),
        configmap=None,
        path=str(path),
    )
    applier = TopologyApplier(settings, configmap=None, slurm=cast(ScontrolBackend, _NoSlurm()))
    labels: dict[str, dict[str, str]] = {"w-0": {"nvl": "a"}, "w-1": {"nvl": "a"}, "w-2": {}}
    with structlog.testing.capture_logs() as logs:
        assert not await applier.apply(labels, cause="labels")
        assert not await applier.apply(labels, cause="resync")
    assert path.read_text() == "# the file slurmctld runs\n"
    status = applier.status()
    assert "fewer nodes than the base block size 4" in status["refused"]
    assert status["desired_sha256"] is None
    refusals = [e for e in logs if e["event"] == "topology.refused"]
    assert len(refusals) == 1  # logged once, not on every resync
    assert refusals[0]["cause"] == "labels"
    assert refusals[0]["log_level"] == "error"


# -- the loop: a change is never lost -------------------------------------------------------


class _Runner:
    """scontrol as the loop uses it: ``show topology`` and ``reconfigure`` (counted)."""

    def __init__(self) -> None:
        self.reconfigures = 0
        self.at: list[float] = []
        """When each reconfigure ran (monotonic)."""
        self.during_reconfigure: list[Callable[[], None]] = []

    async def run(self, *argv: str) -> str:
        if argv[1:] == ("reconfigure",):
            self.reconfigures += 1
            self.at.append(time.monotonic())
            while self.during_reconfigure:
                self.during_reconfigure.pop(0)()
        return ""  # show topology: slurmctld runs nothing yet, so the first render applies


class _Slurm:
    """A backend with four SLURM nodes; the loop reads their names and runs scontrol."""

    def __init__(self) -> None:
        self.runner = _Runner()
        self.reads = 0

    async def read_nodes(self) -> list[Any]:
        self.reads += 1
        return [SimpleNamespace(name=f"w-{i}") for i in range(4)]

    async def show_topology(self) -> str:
        return await self.runner.run("scontrol", "show", "topology")

    async def reconfigure(self) -> None:
        await self.runner.run("scontrol", "reconfigure")


def _node_json(name: str, rv: int, **labels: str) -> dict[str, Any]:
    meta = {"name": name, "uid": name, "resourceVersion": str(rv), "labels": labels}
    return {"metadata": meta, "spec": {}, "status": {}}


def _pod_json(name: str, node: str | None, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": "1"},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


@dataclass
class _Loop:
    """A running TopologySync over real informers fed watch lines by hand, and a fake SLURM."""

    sync: TopologySync
    nodes: Informer[Node]
    pods: Informer[Pod]
    slurm: _Slurm
    path: Path
    rv: int = 100

    def watch(self, informer: Informer[Any], kind: str, obj: dict[str, Any]) -> None:
        """One line of the informer's watch, handled exactly as the informer's task does."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        informer._on_line({"type": kind, "object": obj})

    def leaves(self) -> dict[str, str]:
        """``{SLURM node: leaf switch}`` of the file last published (slurmctld's copy)."""
        return leaf_membership(self.path.read_text())

    async def rendered_after(self, change: Callable[[], None]) -> None:
        """Make ``change``, then wait until the loop rendered once more (and finished it)."""
        renders = self.sync.status()["renders"]
        change()
        deadline = time.monotonic() + 5
        while self.sync.status()["renders"] <= renders:
            if time.monotonic() > deadline:
                raise AssertionError(f"no render within 5 s; status: {self.sync.status()}")
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # past the render: its publish and reconfigure, if any

    async def reconfigures(self, n: int, *, within_s: float) -> None:
        """Wait until ``n`` reconfigures happened; AssertionError with the state if not."""
        deadline = time.monotonic() + within_s
        while self.slurm.runner.reconfigures < n:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.slurm.runner.reconfigures} reconfigures, want {n} within {within_s}"
                    f" s; status: {self.sync.status()}"
                )
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def _loop(
    tmp_path: Path, *, resync_s: float, min_reconfigure_interval_s: float = 0.0
) -> AsyncIterator[_Loop]:
    """w-0/w-1 on k1 (leaf l1), w-2/w-3 on k2 (leaf l2); the loop started and first applied."""
    path = tmp_path / "topology.conf"
    path.write_text("")
    settings = TopologySettings(
        spec=TopologySpec(tree_keys=("leaf",)),
        configmap=None,
        path=str(path),
        debounce_s=0.01,
        max_delay_s=0.05,
        resync_s=resync_s,
        copy_poll_s=0.01,
        min_reconfigure_interval_s=min_reconfigure_interval_s,
    )
    nodes: Informer[Node] = Informer(cast(KubeTransport, None), node_source())
    pods: Informer[Pod] = Informer(cast(KubeTransport, None), pod_source("ns"))
    slurm = _Slurm()
    sync = TopologySync(
        settings, transport=cast(KubeTransport, None), namespace="ns", nodes=nodes, pods=pods,
        slurm=cast(ScontrolBackend, slurm),
    )  # fmt: skip
    loop = _Loop(sync=sync, nodes=nodes, pods=pods, slurm=slurm, path=path)
    loop.watch(nodes, "ADDED", _node_json("k1", 1, leaf="l1"))
    loop.watch(nodes, "ADDED", _node_json("k2", 1, leaf="l2"))
    for i in range(4):
        loop.watch(pods, "ADDED", _pod_json(f"w-{i}", "k1" if i < 2 else "k2"))
    nodes.synced.set()
    pods.synced.set()
    task = asyncio.create_task(sync.run())
    try:
        await loop.reconfigures(1, within_s=5)
        assert loop.leaves() == {"w-0": "l0-l1", "w-1": "l0-l1", "w-2": "l0-l2", "w-3": "l0-l2"}
        yield loop
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_relabel_is_rendered_from_the_cache_that_already_holds_it(tmp_path: Path) -> None:
    """The informer updates its cache before it calls handlers: the relabel is in the render."""
    async with _loop(tmp_path, resync_s=60) as loop:
        loop.watch(loop.nodes, "MODIFIED", _node_json("k2", 2, leaf="l3"))
        await loop.reconfigures(2, within_s=5)
        assert loop.leaves() == {"w-0": "l0-l1", "w-1": "l0-l1", "w-2": "l0-l3", "w-3": "l0-l3"}


async def test_a_relabel_during_a_render_is_rendered_next(tmp_path: Path) -> None:
    """A change landing after the loop read the caches (here: mid-reconfigure) is not lost."""
    async with _loop(tmp_path, resync_s=60) as loop:
        loop.slurm.runner.during_reconfigure.append(
            lambda: loop.watch(loop.nodes, "MODIFIED", _node_json("k1", 2, leaf="l9"))
        )
        loop.watch(loop.nodes, "MODIFIED", _node_json("k2", 2, leaf="l3"))
        await loop.reconfigures(3, within_s=5)
        assert loop.leaves() == {"w-0": "l0-l9", "w-1": "l0-l9", "w-2": "l0-l3", "w-3": "l0-l3"}


async def test_a_deleted_k8s_node_is_a_change(tmp_path: Path) -> None:
    """k2 deleted while its pods still name it: their SLURM nodes go unlabelled at once."""
    async with _loop(tmp_path, resync_s=60) as loop:
        loop.watch(loop.nodes, "DELETED", _node_json("k2", 2, leaf="l2"))
        await loop.reconfigures(2, within_s=5)
        assert loop.leaves() == {"w-0": "l0-l1", "w-1": "l0-l1", "w-2": "sw-unlabelled",
                                 "w-3": "sw-unlabelled"}  # fmt: skip


async def test_the_resync_renders_when_no_handler_saw_the_change(tmp_path: Path) -> None:
    """A change that reached the cache without an event is applied within resync_s."""
    async with _loop(tmp_path, resync_s=0.3) as loop:
        renders = loop.sync.status()["renders"]
        await asyncio.sleep(1.5)
        assert loop.sync.status()["renders"] >= renders + 2  # the timer woke the loop
        assert loop.sync.status()["last_render"]["cause"] == "resync"
        loop.nodes._cache["k2"] = replace(cast(Node, loop.nodes.get("k2")), labels={"leaf": "l3"})
        await loop.reconfigures(2, within_s=3)
        assert loop.leaves()["w-2"] == "l0-l3"


async def test_a_pod_merely_pending_or_absent_keeps_its_node_in_place(tmp_path: Path) -> None:
    """w-2's pod deleted, then Pending: no reconfigure; Running elsewhere: one, which moves it.

    Issue 37 item 8. Pending both unscheduled and scheduled onto the other K8s node. Each
    worker replacement (a rollout, an eviction) leaves its SLURM node without a running pod
    for a while; rendering it unlabelled meanwhile reconfigured slurmctld twice per pod
    (24.11 restarts on a reconfigure), for a node whose place had not changed.
    """
    async with _loop(tmp_path, resync_s=60) as loop:
        for kind, obj in (
            ("DELETED", _pod_json("w-2", "k2")),
            ("ADDED", _pod_json("w-2", None, "Pending")),
            ("MODIFIED", _pod_json("w-2", "k1", "Pending")),
        ):
            await loop.rendered_after(lambda: loop.watch(loop.pods, kind, obj))  # noqa: B023
            assert loop.slurm.runner.reconfigures == 1, (kind, obj["status"], loop.leaves())
            assert loop.leaves()["w-2"] == "l0-l2"
        loop.watch(loop.pods, "MODIFIED", _pod_json("w-2", "k1"))  # Running on k1 now
        await loop.reconfigures(2, within_s=5)
        assert loop.leaves() == {"w-0": "l0-l1", "w-1": "l0-l1", "w-2": "l0-l1", "w-3": "l0-l2"}


async def test_at_most_one_reconfigure_per_interval(tmp_path: Path) -> None:
    """Relabels in quick succession: each reconfigure at least the interval after the last.

    The loop defers the publish and the reconfigure (``topology.reconfigure_deferred``, and
    ``reconfigure_deferred_until`` in the status), then applies the latest labels once the
    interval is over: nothing is lost, slurmctld is not restarted on every change.
    """
    interval = 0.6
    async with _loop(tmp_path, resync_s=60, min_reconfigure_interval_s=interval) as loop:
        with structlog.testing.capture_logs() as logs:
            loop.watch(loop.nodes, "MODIFIED", _node_json("k2", 2, leaf="l3"))
            await asyncio.sleep(0.2)  # rendered, but deferred
            assert loop.slurm.runner.reconfigures == 1
            assert loop.sync.status()["reconfigure_deferred_until"] is not None
            assert loop.leaves()["w-2"] == "l0-l2"  # not even published yet
            loop.watch(loop.nodes, "MODIFIED", _node_json("k1", 2, leaf="l4"))
            await loop.reconfigures(2, within_s=5)
            loop.watch(loop.nodes, "MODIFIED", _node_json("k2", 3, leaf="l5"))
            await loop.reconfigures(3, within_s=5)
        at = loop.slurm.runner.at
        gaps = [b - a for a, b in itertools.pairwise(at)]
        assert all(gap >= interval for gap in gaps), gaps
        assert loop.leaves() == {"w-0": "l0-l4", "w-1": "l0-l4", "w-2": "l0-l5", "w-3": "l0-l5"}
        assert loop.sync.status()["reconfigure_deferred_until"] is None
        deferred = [e for e in logs if e["event"] == "topology.reconfigure_deferred"]
        assert deferred, [e["event"] for e in logs]

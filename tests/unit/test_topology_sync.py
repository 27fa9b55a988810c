"""The coordinator's topology settings, and which labels each SLURM node gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import structlog

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.kube_objects import KubeNodeName, Node, Pod, PodName, PodPhase
from slonkd.core.topology import TopologySpec, render, stamped, stamped_hash
from slonkd.runtime.topology_sync import (
    TopologyApplier,
    TopologySettings,
    labels_by_slurm_node,
    topology_settings,
    write_if_changed,
)


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
        },
        default_configmap="rel-topology",
    )
    assert s.spec == TopologySpec(plugin="block", block_key="nvl", block_sizes=(4, 8))
    assert s.configmap == "rel-topology"
    assert s.copy == "/etc/slurm/topology.conf"
    assert s.debounce_s == 0.5
    tree = topology_settings({"tree_keys": ["a", "b"], "path": "/x/topology.conf"})
    assert tree.spec.tree_keys == ("a", "b")
    assert tree.copy == "/x/topology.conf"  # no separate copy: the path slurmctld reads
    assert tree.configmap == "slonkd-topology"


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

    @property
    def runner(self) -> Any:
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

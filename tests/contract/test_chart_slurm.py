"""The chart's seed topology.conf lets the real slurmctld and slurmd start, then yields.

slurmctld and slurmd with a TopologyPlugin refuse to start without topology.conf (they retry
for 60 s and exit), and the coordinator that renders the real file needs a running
slurmctld: so the chart ships a seed (every node on one switch, or in one block) until the
coordinator's ConfigMap replaces it. Here the seed ``helm template`` renders for a pool whose
pod names are the harness's node names starts SLURM (tree on 22.05, block on 24.11), and a
file the coordinator renders afterwards is taken by ``scontrol reconfigure``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd.core.topology import TopologySpec, leaf_membership, render, stamped
from slonkd_sandbox.chart.helm import Helm
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from slonkd_sandbox.toolchain import ensure_tools

pytestmark = pytest.mark.slurm

NODES = ("rel-gpu-0", "rel-gpu-1", "rel-gpu-2", "rel-gpu-3")
POOL = {"name": "gpu", "replicas": 4, "gpus": 0, "cpus": 2, "realMemoryMB": 1000}


def _chart_files(tmp_path: Path, plugin: str) -> dict[str, Any]:
    """slurm-config's data and the coordinator's config.json for release ``rel``."""
    helm = Helm(binary=ensure_tools().helm, home=tmp_path / "helm")
    out = helm.template(
        "rel",
        namespace="hpc",
        set_json=(f"pools=[{json.dumps(POOL)}]", f'topology={{"plugin":"{plugin}"}}'),
    ).stdout
    objs = [d for d in yaml.safe_load_all(out) if d]
    cms = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "ConfigMap"}
    return {
        "slurm": cms["rel-slurm-config"],
        "coordinator": json.loads(cms["rel-coordinator"]["config.json"])["coordinator"],
    }


def _start_with_seed(cluster: SlurmCluster, files: dict[str, Any], plugin: str) -> None:
    conf = files["slurm"]["slurm.conf"]
    assert f"TopologyPlugin=topology/{plugin}\n" in conf
    cluster.topology_conf.parent.mkdir(parents=True, exist_ok=True)
    cluster.topology_conf.write_text(files["slurm"]["topology.conf"])  # the harness keeps it
    cluster.start()
    cluster.wait_idle(NODES)


def _relabel(cluster: SlurmCluster, spec: TopologySpec, labels: dict[str, dict[str, str]]) -> str:
    rendered = render(labels, spec)
    cluster.topology_conf.write_text(stamped(rendered))
    cluster.run("scontrol", "reconfigure")
    shown = cluster.run("scontrol", "show", "topology").stdout
    assert leaf_membership(shown) == leaf_membership(rendered.text)
    return shown


def test_tree_seed_starts_slurm_22_and_the_coordinators_file_replaces_it(
    session_root: Path, tmp_path: Path
) -> None:
    """22.05, topology/tree: seed -> every node on sw-unlabelled; then the labels' leaves."""
    files = _chart_files(tmp_path, "tree")
    root = Path(tempfile.mkdtemp(prefix="slurm-", dir=session_root))
    cluster = SlurmCluster(root, SlurmLayout(nodes=NODES, topology_plugin="topology/tree"))
    try:
        _start_with_seed(cluster, files, "tree")
        shown = cluster.run("scontrol", "show", "topology").stdout
        assert leaf_membership(shown) == dict.fromkeys(NODES, "sw-unlabelled")
        topo = files["coordinator"]["topology"]
        spec = TopologySpec(plugin="tree", tree_keys=tuple(topo["tree_keys"]))
        keys = topo["tree_keys"]
        labels = {
            n: {keys[0]: "z", keys[1]: "s", keys[2]: f"r{i % 2}"} for i, n in enumerate(NODES)
        }
        moved = leaf_membership(_relabel(cluster, spec, labels))
        assert moved["rel-gpu-0"] == moved["rel-gpu-2"] != moved["rel-gpu-1"]
    finally:
        cluster.stop()


def test_block_seed_starts_slurm_24(tmp_path: Path) -> None:
    """24.11, topology/block: seed -> one block b-unlabelled; then the labels' blocks."""
    files = _chart_files(tmp_path, "block")
    cluster = ChrootSlurmCluster.create(
        "24.11", SlurmLayout(nodes=NODES, topology_plugin="topology/block")
    )
    try:
        _start_with_seed(cluster, files, "block")
        shown = cluster.run("scontrol", "show", "topology").stdout
        assert leaf_membership(shown) == dict.fromkeys(NODES, "b-unlabelled")
        key = files["coordinator"]["topology"]["block_key"]
        # equal blocks: 24.11 exits on a block smaller than the base block ("children count
        # lower than bblock_node_cnt"), e.g. 2 labelled nodes + 1 unlabelled
        labels = {n: {key: "nvl0"} if n in NODES[:2] else {} for n in NODES}
        moved = leaf_membership(
            _relabel(cluster, TopologySpec(plugin="block", block_key=key), labels)
        )
        assert moved["rel-gpu-0"] == moved["rel-gpu-1"] != moved["rel-gpu-2"] == moved["rel-gpu-3"]
    finally:
        cluster.stop()

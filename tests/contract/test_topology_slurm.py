"""A rendered topology.conf is accepted by the real slurmctld and read back unchanged.

The tree runs on both releases (22.05 on the host, 24.11 in its root); ``topology/block``
exists from 23.11 on, so the block test runs on 24.11 only.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slonkd.core.topology import TopologySpec, leaf_membership, render, stamped
from slonkd.testing.slurm import SlurmCluster, SlurmLayout
from slonkd.testing.slurm_chroot import ChrootSlurmCluster

pytestmark = pytest.mark.slurm


def _reconfigure_and_show(cluster: SlurmCluster, text: str) -> str:
    cluster.topology_conf.write_text(text)
    cluster.run("scontrol", "reconfigure")
    return cluster.run("scontrol", "show", "topology").stdout


def test_slurmctld_accepts_the_rendered_tree(cluster_factory: Callable[..., SlurmCluster]) -> None:
    """After reconfigure, `scontrol show topology` puts every node on its rendered leaf."""
    cluster = cluster_factory(SlurmLayout(topology_plugin="topology/tree", extra_nodes=200))
    names = [*cluster.layout.nodes, *cluster.extra_node_names]
    labels = {
        n: {
            "topology.kubernetes.io/zone": f"z{i % 2}",
            "slonk.dev/spine": f"s{i % 4}",
            "slonk.dev/leaf": f"rack.{i % 9}",
        }
        for i, n in enumerate(names)
    }
    labels["x200"] = {}  # one node without labels
    rendered = render(labels, TopologySpec())
    shown = _reconfigure_and_show(cluster, stamped(rendered))  # the stamp line is a comment
    assert leaf_membership(shown) == leaf_membership(rendered.text)
    assert leaf_membership(shown)["x200"] == "sw-unlabelled"
    assert "SwitchName=sw-root" in shown
    assert cluster.run("sinfo", "-h", "-o", "%D").stdout.strip() == str(len(names))
    # relabel: a node changes leaf and slurmctld follows on the next reconfigure
    labels["x1"] = {**labels["x2"]}
    moved = render(labels, TopologySpec())
    again = leaf_membership(_reconfigure_and_show(cluster, stamped(moved)))
    assert again == leaf_membership(moved.text)
    assert again["x1"] == again["x2"]


def test_slurmctld_24_accepts_the_rendered_blocks() -> None:
    """topology/block on 24.11: every node in its label's block, unlabelled ones in theirs."""
    cluster = ChrootSlurmCluster.create(
        "24.11", SlurmLayout(topology_plugin="topology/block", extra_nodes=124)
    )
    cluster.start()
    try:
        names = [*cluster.layout.nodes, *cluster.extra_node_names]
        key = "slonk.dev/nvlink-domain"
        labels = {n: {key: f"nvl.{i // 32}"} for i, n in enumerate(names[:96])}
        labels.update({n: {} for n in names[96:]})  # 32 without the label
        rendered = render(labels, TopologySpec(plugin="block", block_key=key, block_sizes=(16,)))
        shown = _reconfigure_and_show(cluster, stamped(rendered))
        assert leaf_membership(shown) == leaf_membership(rendered.text)
        assert leaf_membership(shown)[names[-1]] == "b-unlabelled"
        assert len(set(leaf_membership(shown).values())) == 4
        job = cluster.run("sbatch", "--parsable", "-N", "2", "--wrap", "true", check=False)
        assert job.returncode == 0, job.stderr  # the scheduler takes the block layout
    finally:
        cluster.stop()

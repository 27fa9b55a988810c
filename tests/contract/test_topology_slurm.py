"""A rendered topology.conf is accepted by the real slurmctld and read back unchanged."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slonkd.core.topology import TopologySpec, leaf_membership, render
from slonkd.testing.slurm import SlurmCluster, SlurmLayout

pytestmark = pytest.mark.slurm


def test_slurmctld_accepts_the_rendered_tree(slurm_factory: Callable[..., SlurmCluster]) -> None:
    """After reconfigure, `scontrol show topology` puts every node on its rendered leaf."""
    cluster = slurm_factory(SlurmLayout(topology_plugin="topology/tree", extra_nodes=200))
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
    cluster.topology_conf.write_text(rendered.text)
    cluster.run("scontrol", "reconfigure")
    shown = cluster.run("scontrol", "show", "topology").stdout
    assert leaf_membership(shown) == leaf_membership(rendered.text)
    assert leaf_membership(shown)["x200"] == "sw-unlabelled"
    assert "SwitchName=sw-root" in shown
    assert cluster.run("sinfo", "-h", "-o", "%D").stdout.strip() == str(len(names))

"""A rendered topology.conf is accepted by the real slurmctld and read back unchanged.

The tree runs on both releases (22.05 on the host, 24.11 in its root); ``topology/block``
exists from 23.11 on, so the block tests run on 24.11 only. 24.11's slurmctld exits on a
block file with a block smaller than the base block size: the renderer never writes one, the
coordinator's applier refuses to publish what :func:`check_block` flags, and the last test
shows the flagged file really is fatal (so the check models slurmctld, not a guess).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.topology import TopologySpec, check_block, leaf_membership, render, stamped
from slonkd.runtime.coordinating.topology_apply import TopologyApplier
from slonkd.runtime.coordinating.topology_settings import TopologySettings
from slonkd_sandbox import procs
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests.contract.conftest import settings_for

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


@pytest.fixture
def blocks_24() -> Iterator[ChrootSlurmCluster]:
    """24.11 with topology/block: n1-n4 (slurmd) and x1-x2 (declared only)."""
    cluster = ChrootSlurmCluster.create(
        "24.11", SlurmLayout(topology_plugin="topology/block", extra_nodes=2)
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _block_applier(cluster: SlurmCluster, sizes: tuple[int, ...]) -> TopologyApplier:
    settings = TopologySettings(
        spec=TopologySpec(plugin="block", block_key=KEY, block_sizes=sizes),
        configmap=None,
        path=str(cluster.topology_conf),
        copy_poll_s=0.05,
    )
    return TopologyApplier(settings, configmap=None, slurm=ScontrolBackend(settings_for(cluster)))


KEY = "slonk.dev/nvlink-domain"
UNEVEN = {
    **{n: {KEY: "nvl-a"} for n in ("n1", "n2", "n3")},
    **{n: {KEY: "nvl-b"} for n in ("n4", "x1")},
    "x2": {},
}
"""3 + 2 + 1 unlabelled: before, 24.11 died on this (first block 3 nodes, the base)."""


async def test_uneven_blocks_keep_24_11_slurmctld_alive(blocks_24: ChrootSlurmCluster) -> None:
    """3 + 2 + 1 through the coordinator's applier: reconfigured, alive, topology matches."""
    cluster = blocks_24
    applier = _block_applier(cluster, ())
    assert await applier.apply(UNEVEN, cause="test")
    assert cluster.run("scontrol", "ping", check=False).returncode == 0
    shown = cluster.run("scontrol", "show", "topology").stdout
    assert leaf_membership(shown) == {
        **dict.fromkeys(["n1", "n2", "n3"], "b-nvl-a"),
        **dict.fromkeys(["n4", "x1"], "b-nvl-b"),
        "x2": "b-unlabelled",
    }
    assert applier.status()["drift_count"] == 0
    assert "Nodes=n[1-3] BlockSize=1" in shown  # base: the smallest block, not the first
    job = cluster.run("sbatch", "--parsable", "-N", "3", "--wrap", "true", check=False)
    assert job.returncode == 0, job.stderr

    # configured sizes 2,4: the 1-node unlabelled block is left out, the rest is accepted
    sized = _block_applier(cluster, (2, 4))
    assert await sized.apply(UNEVEN, cause="test")
    assert cluster.run("scontrol", "ping", check=False).returncode == 0
    shown = cluster.run("scontrol", "show", "topology").stdout
    desired = sized.state.desired
    assert desired is not None
    assert leaf_membership(shown) == leaf_membership(desired.text)
    assert set(leaf_membership(shown)) == {"n1", "n2", "n3", "n4", "x1"}
    assert "Nodes=n[1-3] BlockSize=2" in shown
    assert sized.status()["left_out_blocks"] == {"b-unlabelled": 1}
    assert sized.status()["drift_count"] == 0

    # sizes no block reaches: refused, the running file and slurmctld stay as they are
    before = cluster.topology_conf.read_text()
    refused = _block_applier(cluster, (4,))
    assert not await refused.apply(UNEVEN, cause="test")
    assert "fewer nodes than the base block size 4" in refused.status()["refused"]
    assert cluster.topology_conf.read_text() == before
    assert leaf_membership(cluster.run("scontrol", "show", "topology").stdout) == (
        leaf_membership(shown)
    )


def test_the_file_check_block_flags_is_fatal_to_24_11(blocks_24: ChrootSlurmCluster) -> None:
    """The colleague's crash, reproduced: check_block names it, and slurmctld exits on it."""
    cluster = blocks_24
    fatal = "BlockName=b-a Nodes=n[1-4]\nBlockName=b-unlabelled Nodes=x[1-2]\n"
    assert check_block(fatal) == [
        "block b-unlabelled has 2 nodes, fewer than the base block size 4"
    ]
    cluster.topology_conf.write_text(fatal)
    cluster.run("scontrol", "reconfigure", check=False)
    log = cluster.root / "log" / "slurmctld.log"
    procs.wait_for(
        "slurmctld's fatal",
        lambda: "fatal: Block configuration (b-unlabelled) children count lower" in log.read_text(),
        timeout_s=30,
    )
    assert cluster.run("scontrol", "ping", check=False).returncode != 0

"""The coordinator's topology step against a real slurmctld (22.05 and 24.11), without Kubernetes.

:class:`TopologyApplier` writes the stamped file, waits for slurmctld's copy, reconfigures
once per content, reports drift from ``scontrol show topology``, and a new applier (a new
leader) whose file slurmctld already runs does not reconfigure again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.topology import TopologySpec, leaf_membership, stamped_hash
from slonkd.runtime.coordinating.topology_apply import TopologyApplier
from slonkd.runtime.coordinating.topology_settings import TopologySettings
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests.contract.conftest import settings_for

pytestmark = pytest.mark.slurm

KEYS = ("rack",)


def _applier(cluster: SlurmCluster, **overrides: object) -> TopologyApplier:
    settings = TopologySettings(
        spec=TopologySpec(tree_keys=KEYS),
        configmap=None,
        path=str(cluster.topology_conf),
        copy_poll_s=0.05,
        **overrides,  # type: ignore[arg-type]
    )
    return TopologyApplier(settings, configmap=None, slurm=ScontrolBackend(settings_for(cluster)))


async def test_reconfigure_once_per_content_drift_and_a_new_leader(
    cluster_factory: Callable[..., SlurmCluster],
) -> None:
    """Apply, apply the same (no call), drift after a hand edit, a new applier adopts."""
    cluster = cluster_factory(SlurmLayout(topology_plugin="topology/tree", extra_nodes=20))
    names = [*cluster.layout.nodes, *cluster.extra_node_names]
    labels = {n: {"rack": f"r{i % 3}"} for i, n in enumerate(names)}
    applier = _applier(cluster)
    assert await applier.apply(labels, cause="test")
    status = applier.status()
    assert status["reconfigures"] == 1
    assert status["applied_sha256"] == status["desired_sha256"]
    assert status["slurmctld_copy_sha256"] == status["desired_sha256"]
    assert stamped_hash(cluster.topology_conf.read_text()) == status["desired_sha256"]
    assert status["drift_count"] == 0
    shown = leaf_membership(cluster.run("scontrol", "show", "topology").stdout)
    assert shown["x1"] == "l0-r1"

    calls = applier.slurm.calls
    assert not await applier.apply(labels, cause="test")  # same content: nothing to do
    assert applier.slurm.calls == calls
    assert applier.status()["reconfigures"] == 1

    # someone else puts x1 elsewhere in slurmctld: drift shows it, the labels have not changed
    text = cluster.topology_conf.read_text().split("\n", 1)[1]  # without the stamp
    edited = text.replace("x[1,", "x[").replace("Switches=l0-r0", "Switches=elsewhere,l0-r0")
    assert edited.count("x[") == text.count("x[")
    assert edited != text.replace("x[1,", "x[")  # both edits happened
    cluster.topology_conf.write_text(edited + "SwitchName=elsewhere Nodes=x1\n")
    cluster.run("scontrol", "reconfigure")
    await applier.refresh_drift()
    assert applier.status()["drift"] == {"x1": {"labels": "l0-r1", "slurmctld": "elsewhere"}}

    # a new leader: the copy lacks its hash, so it publishes and reconfigures back
    leader2 = _applier(cluster)
    assert await leader2.apply(labels, cause="test")
    assert leader2.status()["drift_count"] == 0
    # a third leader finds slurmctld already running its file: no reconfigure
    leader3 = _applier(cluster)
    calls = leader3.slurm.calls
    assert not await leader3.apply(labels, cause="test")
    assert leader3.status()["applied_sha256"] == leader2.status()["applied_sha256"]
    assert leader3.slurm.calls == calls + 1  # one `show topology`, no reconfigure


async def test_a_copy_that_never_arrives_means_no_reconfigure(
    cluster_factory: Callable[..., SlurmCluster],
) -> None:
    """slurmctld's copy elsewhere and never updated: wait, give up, do not reconfigure."""
    cluster = cluster_factory(SlurmLayout(topology_plugin="topology/tree"))
    copy = cluster.root / "stale-copy.conf"
    copy.write_text("# not stamped\n")
    applier = _applier(cluster, slurmctld_copy=str(copy), copy_timeout_s=0.5)
    before = cluster.run("scontrol", "show", "topology").stdout
    assert not await asyncio.wait_for(applier.apply({"n1": {"rack": "a"}}, cause="t"), 30)
    assert applier.status()["reconfigures"] == 0
    assert applier.status()["applied_sha256"] is None
    assert cluster.run("scontrol", "show", "topology").stdout == before

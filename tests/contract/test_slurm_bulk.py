"""Bulk updates at scale: 1,000 random nodes of 5,000 in a few chunked hostlist calls."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.core.reasons import Cause, ReasonOwner, reason_owner
from slonkd.core.slurm_plan import SkipReason
from slonkd_sandbox.slurm.cluster import SCALE_SLURMD_TIMEOUT_S, SlurmCluster, SlurmLayout
from tests.contract.conftest import kind_of

pytestmark = pytest.mark.slurm

K8S = Cause.parse("k8s-cordoned")
CALLS = {"scontrol": (3, 8), "pyslurm": (6, 12)}
"""The calls of a chunked bulk write of 1,000 nodes: scontrol's client runs (a read, then
an update per chunk, each chunk after the first read again), pyslurm's RPCs (its reads are two:
the nodes and the partitions)."""


@pytest.fixture
def big(cluster_factory: Callable[..., SlurmCluster]) -> SlurmCluster:
    """One slurmd node and 5,000 declared nodes without slurmd."""
    return cluster_factory(
        SlurmLayout(nodes=("n1",), extra_nodes=5000, slurmd_timeout_s=SCALE_SLURMD_TIMEOUT_S)
    )


async def _slonkd_held(backend: SlurmBackend) -> set[str]:
    return {
        n
        for g in await backend.read_reasons()
        if reason_owner(g.reason) is ReasonOwner.SLONKD
        for n in g.nodes
    }


async def test_bulk_drain_of_1000_random_nodes_in_few_calls(
    big: SlurmCluster, backend_factory: Callable[..., SlurmBackend]
) -> None:
    """1,000 random nodes drain in few calls (a read, then per chunk a re-read and an update).

    scontrol: 3-8 client runs; pyslurm: 6-12 RPCs (each read is the nodes and the partitions).
    """
    chosen = random.Random(4).sample(big.extra_node_names, 1000)  # noqa: S311 - seeded choice of test nodes
    foreign = chosen[:10]
    big.run("scontrol", "update", f"nodename={','.join(foreign)}", "state=drain", "reason=ops")
    backend = backend_factory(big, max_hostlist_chars=2048)
    low, high = CALLS[kind_of(backend)]
    result = await backend.drain(chosen, K8S, "cordoned")
    assert low <= result.calls <= high  # a read, 2-4 chunks, each after the first read again
    assert set(result.changed) == set(chosen[10:])
    assert result.skipped_for(SkipReason.FOREIGN_REASON) == set(foreign)
    assert await _slonkd_held(backend) == set(chosen[10:])
    resumed = await backend.resume(chosen, K8S)
    assert set(resumed.changed) == set(chosen[10:])
    assert resumed.skipped_for(SkipReason.FOREIGN_REASON) == set(foreign)
    assert resumed.calls <= high
    assert await _slonkd_held(backend) == set()
    still = {n for g in await backend.read_reasons() for n in g.nodes}
    assert still == set(foreign)


async def test_one_long_hostlist_is_accepted(
    big: SlurmCluster, backend_factory: Callable[..., SlurmBackend]
) -> None:
    """slurmctld takes 1,000 random nodes as one ~4.6 kB hostlist (the default chunk size)."""
    chosen = random.Random(7).sample(big.extra_node_names, 1000)  # noqa: S311 - seeded choice of test nodes
    backend = backend_factory(big)
    result = await backend.drain(chosen, K8S)
    assert result.calls == {"scontrol": 2, "pyslurm": 3}[kind_of(backend)]  # a read, an update
    assert await _slonkd_held(backend) == set(chosen)


async def test_bulk_with_a_vanished_node_reports_it_and_updates_the_rest(
    big: SlurmCluster, backend_factory: Callable[..., SlurmBackend]
) -> None:
    """A name slurmctld does not know is skipped as not-found; the others are drained."""
    backend = backend_factory(big)
    result = await backend.drain(["x1", "x2", "nosuch7"], K8S)
    assert set(result.changed) == {"x1", "x2"}
    assert result.skipped_for(SkipReason.NOT_FOUND) == {"nosuch7"}

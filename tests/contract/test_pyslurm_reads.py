"""pyslurm's reads and scontrol's of the same cluster agree (SLURM 22.05 and 24.11).

:class:`~slonkd.adapters.slurm.pyslurm_reads.PyslurmReads` asks the pyslurm child (pyslurm as
the bootstrap built it, loaded only in that child: on 24.11 under the root's loader, as in
tests/contract/test_pyslurm_build.py); the scontrol backend runs SLURM's clients. Both read
nodes (names, state, reason and its setter and time, comment, extra, features, CPUs,
partitions, running jobs), one node, the nodes that carry a reason, the jobs on a node and the
finished jobs, and agree, except where the two are documented to differ
(:mod:`slonkd.adapters.slurm.parsing_pyslurm`): a reason group is one node with slonkd's state
spelling (sinfo's compact word on the other side) and its setter's name alone (sinfo adds
``(uid)``), a job's state is one word (24.11's scontrol
backend lists the flags), so jobs are compared by presence and requeue-ability. Without a build
the tests are skipped with the bootstrap's reason, unless ``SLONKD_REQUIRE_PYSLURM=1``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.slurm.parsing import ReasonGroup
from slonkd.adapters.slurm.pyslurm_reads import PyslurmReads
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.slurm_job import Presence, SlurmJob
from slonkd.core.slurm_node import SlurmNode
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.contract.conftest import settings_for

pytestmark = pytest.mark.slurm


@pytest.fixture
def pair(pyslurm_built: Path, cluster: SlurmCluster) -> tuple[SlurmCluster, ScontrolBackend]:
    """The cluster and its scontrol backend, started only once a build was found."""
    return cluster, ScontrolBackend(settings_for(cluster))


@pytest.fixture
async def reads(
    pyslurm_built: Path, pair: tuple[SlurmCluster, ScontrolBackend]
) -> AsyncIterator[PyslurmReads]:
    """PyslurmReads on the cluster: its child on the root's loader for 24.11."""
    cluster = pair[0]
    prefix: tuple[str, ...] = ()
    if isinstance(cluster, ChrootSlurmCluster):
        prefix = tuple(cluster.libslurm_argv([], {})[0])
    settings = SlurmSettings(env={"SLURM_CONF": str(cluster.conf)}, timeout_s=30.0)
    got = PyslurmReads(settings, pyslurm_path=str(pyslurm_built), child_prefix=prefix)
    try:
        yield got
    finally:
        await got.aclose()


def _node_view(n: SlurmNode) -> tuple[Any, ...]:
    return (
        n.name,
        str(n.state),
        n.reason,
        n.reason_user,
        n.reason_time,
        n.comment,
        n.extra,
        n.features,
        n.active_features,
        n.cpus,
        n.alloc_cpus,
        n.partitions,
        n.running_jobs,
    )


def _reasons_by_node(groups: list[ReasonGroup]) -> dict[str, tuple[Any, ...]]:
    """Node -> reason, setter, time; sinfo writes the setter ``root(0)``, pyslurm ``root``."""
    return {n: (g.reason, g.user.split("(")[0], g.time) for g in groups for n in g.nodes}


def _job_view(j: SlurmJob) -> tuple[Any, ...]:
    return (j.job_id, j.nodes, j.batch, j.requeue, j.presence, j.requeueable)


def cluster_major(cluster: SlurmCluster) -> str:
    """SLURM's major release number (pyslurm writes 22.05 as 22.5)."""
    return cluster.run("scontrol", "--version").stdout.split()[-1].split(".")[0]


async def _settled(
    read: Callable[[], Awaitable[object]], ok: Callable[[object], bool], timeout_s: float = 90
) -> object:
    deadline = time.monotonic() + timeout_s
    while not ok(got := await read()):
        assert time.monotonic() < deadline, f"not settled in {timeout_s} s: {got}"
        await asyncio.sleep(0.5)
    return got


async def test_nodes_one_node_and_reasons_read_alike(
    pair: tuple[SlurmCluster, ScontrolBackend], reads: PyslurmReads
) -> None:
    """Comment, extra, an operator's drain and a down with reasons: both read them alike."""
    cluster, backend = pair

    def update(*args: str) -> None:
        cluster.run("scontrol", "update", *args)

    update("nodename=n1", "comment=hello world", 'extra={"rack":"r1"}')
    update("nodename=n2", "state=drain", "reason=admin maint")
    update("nodename=n3", "state=down", "reason=down it")
    update("nodename=n4", "state=drain", 'reason=slonkd:health:xid "q" x')
    update("nodename=n4", 'extra={"slonkd":["health:xid"]}')

    for with_jobs in (False, True):
        want = sorted(map(_node_view, await backend.read_nodes(with_jobs=with_jobs)))
        got = sorted(map(_node_view, await reads.read_nodes(with_jobs=with_jobs)))
        assert got == want
    assert len(want) >= 4

    named = await reads.read_nodes(["n2", "n4", "nosuch"])
    assert sorted(n.name for n in named) == ["n2", "n4"]
    for name in ("n1", "n2", "n4"):
        one, other = await reads.read_node(name), await backend.read_node(name)
        assert one is not None
        assert other is not None
        assert _node_view(one) == _node_view(other)
    assert await reads.read_node("nosuch") is None
    assert await backend.read_node("nosuch") is None

    got_reasons = _reasons_by_node(await reads.read_reasons())
    assert got_reasons == _reasons_by_node(await backend.read_reasons())
    assert set(got_reasons) == {"n2", "n3", "n4"}
    assert reads.calls > 0
    assert reads.child.hello["pyslurm"].split(".")[:1] == [cluster_major(cluster)]
    update("nodename=n2,n3,n4", "state=resume")


def _submit(cluster: SlurmCluster, *args: str) -> int:
    out = cluster.run("sbatch", "--parsable", "-o", "/dev/null", *args).stdout
    return int(out.strip().split(";")[0])


async def test_jobs_on_a_node_counts_and_finished_jobs_read_alike(
    pair: tuple[SlurmCluster, ScontrolBackend], reads: PyslurmReads
) -> None:
    """Two running jobs on n1 (one --no-requeue), one pending, two ended on n2."""
    cluster, backend = pair
    keep = _submit(cluster, "-w", "n1", "-n1", "--requeue", "--wrap", "sleep 120")
    stay = _submit(cluster, "-w", "n1", "-n1", "--no-requeue", "--wrap", "sleep 121")
    _submit(cluster, "-w", "n1", "--begin=now+3600", "--wrap", "sleep 9")
    failed = _submit(cluster, "-w", "n2", "--no-requeue", "--wrap", "exit 3")
    done = _submit(cluster, "-w", "n2", "--no-requeue", "--wrap", "true")

    def both_live(jobs: object) -> bool:
        assert isinstance(jobs, list)
        return {j.job_id for j in jobs if j.presence is Presence.LIVE} >= {keep, stay}

    await _settled(lambda: backend.jobs_on("n1"), both_live)
    want = sorted(map(_job_view, await backend.jobs_on("n1")))
    got = sorted(map(_job_view, await reads.jobs_on("n1")))
    assert got == want
    assert {v[0] for v in got} == {keep, stay}

    counts = {str(n.name): n.running_jobs for n in await reads.read_nodes(with_jobs=True)}
    assert counts == {n.name: n.running_jobs for n in await backend.read_nodes(with_jobs=True)}
    assert counts["n1"] == 2

    def ended(jobs: object) -> bool:
        assert isinstance(jobs, list)
        return {failed, done} <= {j.job_id for j in jobs}

    await _settled(backend.finished_jobs, ended)
    await _settled(reads.finished_jobs, ended)
    want_done = {
        int(j.job_id): j for j in await backend.finished_jobs() if j.job_id in (failed, done)
    }
    got_done = {int(j.job_id): j for j in await reads.finished_jobs() if j.job_id in (failed, done)}
    assert got_done == want_done
    assert got_done[failed].exit_code == 3
    assert got_done[done].exit_code == 0
    cluster.run("scancel", str(keep), str(stay))

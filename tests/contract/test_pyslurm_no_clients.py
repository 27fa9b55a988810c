"""The pyslurm backend runs no SLURM client: every port method through its child (issue 39).

A directory first on the backend's ``PATH`` (its own and its child's) holds ``scontrol``,
``sinfo``, ``squeue``, ``sdiag``, ``scancel``, ``strigger`` and ``sacct`` stand-ins that log
their argv and fail; the backend's argv prefix is empty, so a client it ran would be one of
them. Every read and write of the port runs on a real cluster of each release (a bulk
compare-and-set whose second chunk is read again, a requeue, the checkpoint signal, a
reconfigure, the topology), and the log stays empty. One call is the documented exception:
the reboot request, which libslurm has no call for, runs ``scontrol reboot`` (its stand-in
answers 0 and logs it), once, and nothing else. Every subprocess this process started
meanwhile is counted too: the child's own start alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.slurm import runner
from slonkd.adapters.slurm.pyslurm_writes import PyslurmBackend
from slonkd.core.checkpoint import SignalSpec
from slonkd.core.reasons import Cause
from slonkd.core.slurm_job import JobId
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.contract.conftest import settings_for

pytestmark = pytest.mark.slurm

CLIENTS = ("scontrol", "sinfo", "squeue", "sdiag", "scancel", "strigger", "sacct")
POD = Cause.parse("pod-terminating")
HEALTH = Cause.parse("health:gpu-xid-79")


def _stand_ins(directory: Path, log: Path) -> Path:
    """Each client logs its argv; ``scontrol reboot`` answers 0, anything else 1."""
    directory.mkdir()
    for tool in CLIENTS:
        script = directory / tool
        script.write_text(
            "#!/bin/sh\n"
            f'echo "{tool} $*" >> {log}\n'
            f'[ "{tool} $1" = "scontrol reboot" ] && exit 0\n'
            "exit 1\n"
        )
        script.chmod(0o755)
    return directory


@pytest.fixture
async def fenced(
    pyslurm_built: Path, cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[PyslurmBackend, Path, list[list[str]]]]:
    """The backend with the stand-ins first on its PATH; every subprocess started, recorded."""
    log = tmp_path / "clients.log"
    shims = _stand_ins(tmp_path / "bin", log)
    prefix: tuple[str, ...] = ()
    if isinstance(cluster, ChrootSlurmCluster):
        prefix = tuple(cluster.libslurm_argv([], {})[0])
    path = f"{shims}:/usr/local/bin:/usr/bin:/bin"
    settings = settings_for(
        cluster, argv_prefix=(), env={"SLURM_CONF": str(cluster.conf), "PATH": path}
    )
    started: list[list[str]] = []
    real = asyncio.create_subprocess_exec

    async def spy(program: str, *args: str, **kw: Any) -> asyncio.subprocess.Process:
        started.append([program, *args])
        return await real(program, *args, **kw)

    def spawned(argv: Sequence[str], *rest: Any) -> Any:
        started.append(list(argv))
        return real_spawn(argv, *rest)

    real_spawn = getattr(runner, "spawn")  # noqa: B009 - its import, not an export
    monkeypatch.setattr(asyncio, "create_subprocess_exec", spy)
    monkeypatch.setattr(runner, "spawn", spawned)  # the SLURM clients' own start (pidfd)
    backend = PyslurmBackend(settings, pyslurm_path=str(pyslurm_built), child_prefix=prefix)
    try:
        yield backend, log, started
    finally:
        await backend.aclose()


async def _two_jobs_on_n2(cluster: SlurmCluster, backend: PyslurmBackend) -> list[JobId]:
    for _ in range(2):
        cluster.run("sbatch", "-o", "/dev/null", "-w", "n2", "-n1", "--wrap", "sleep 300")
    deadline = time.monotonic() + 60
    while len(jobs := await backend.jobs_on("n2")) < 2:
        assert time.monotonic() < deadline, "two jobs on n2: not after 60 s"
        await asyncio.sleep(0.2)
    return [j.job_id for j in jobs]


async def test_every_port_method_runs_without_a_slurm_client(
    fenced: tuple[PyslurmBackend, Path, list[list[str]]], cluster: SlurmCluster
) -> None:
    """Reads, compare-and-set writes, jobs, signal, statistics: no client ran, one child did."""
    backend, log, started = fenced
    assert len(await backend.read_nodes(with_jobs=True)) == 4
    assert await backend.read_node("n1") is not None
    assert await backend.read_reasons() == []
    assert (await backend.diag()).server_threads > 0
    await backend.show_topology()
    assert (await backend.drain(["n1"], POD, "bye")).changed == ("n1",)
    cluster.run("scontrol", "update", "nodename=n3", 'extra={"rack":"r3"}')  # not the backend's
    bulk = await backend.drain(["n1", "n3", "n4"], HEALTH)  # two extras: two chunks
    assert set(bulk.changed) == {"n1", "n3", "n4"}
    assert set((await backend.resume(["n1", "n3", "n4"], HEALTH)).changed) == {"n3", "n4"}
    assert (await backend.undrain(["n1"], POD)).changed == ("n1",)
    assert (await backend.down(["n4"], POD)).changed == ("n4",)
    assert (await backend.resume(["n4"], POD)).changed == ("n4",)
    assert (await backend.fail(["n3"], POD)).changed == ("n3",)
    assert (await backend.resume(["n3"], POD)).changed == ("n3",)
    await backend.set_comment(["n1", "n2"], "rack r1")
    first, _second = await _two_jobs_on_n2(cluster, backend)
    await backend.signal_batch(first, SignalSpec.parse("B:USR1"))
    requeued = await backend.requeue_jobs("n2")
    assert requeued.requeued
    await backend.finished_jobs()
    await backend.reconfigure()
    assert not log.exists(), log.read_text()
    children = [argv for argv in started if "slonkd.adapters.slurm.pyslurm_child" in argv]
    assert len(children) == 1, started
    assert started == children, started  # nothing else was started


async def test_the_reboot_request_is_the_one_client_call(
    fenced: tuple[PyslurmBackend, Path, list[list[str]]],
) -> None:
    """The drain through pyslurm, then ``scontrol reboot ASAP`` once: libslurm has no call."""
    backend, log, started = fenced
    result = await backend.request_reboot(["n1"], HEALTH, "xid 79")
    assert result.changed == ("n1",)
    node = await backend.read_node("n1")
    assert node is not None
    assert node.reason.startswith("slonkd:health:gpu-xid-79")
    lines = log.read_text().splitlines()
    assert lines == ["scontrol reboot ASAP reason=slonkd:health:gpu-xid-79 xid 79 n1"], lines
    assert [a for a in started if "pyslurm_child" not in " ".join(a)] == [
        ["scontrol", "reboot", "ASAP", "reason=slonkd:health:gpu-xid-79 xid 79", "n1"]
    ]

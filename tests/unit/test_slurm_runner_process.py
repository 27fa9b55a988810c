"""The runner's process handling with real (tiny) programs, on both ways of waiting.

The pidfd way (``spawn.py``) and asyncio's subprocesses must behave alike: output, exit
codes, environment, timeouts and cancellation that kill the program, default signal
dispositions in the child.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from slonkd.adapters.slurm import runner as runner_module
from slonkd.adapters.slurm.runner import CommandRunner, NodeNotFoundError, SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.adapters.slurm.spawn import pidfd_supported
from slonkd.core.errors import TerminalError, TransientError

SH = "/bin/sh"


@pytest.fixture(params=["pidfd", "asyncio"])
def runner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> CommandRunner:
    """A runner without retries, waiting through a pidfd or through asyncio."""
    if request.param == "pidfd" and not pidfd_supported():
        pytest.skip("no pidfd on this kernel")
    monkeypatch.setattr(runner_module, "_PIDFD", request.param == "pidfd")
    return CommandRunner(SlurmSettings(env={"SLONKD_T": "v 1"}, timeout_s=0.5, attempts=1))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


async def test_output_environment_and_counting(runner: CommandRunner) -> None:
    """stdout comes back, stderr does not on success, the extra environment is set."""
    out = await runner.run(SH, "-c", 'echo "out $SLONKD_T"; echo err >&2')
    assert out == "out v 1\n"
    assert runner.calls == 1


async def test_failures_are_translated(runner: CommandRunner) -> None:
    """A non-zero exit raises the typed error its stderr names."""
    with pytest.raises(NodeNotFoundError):
        await runner.run(SH, "-c", "echo 'Invalid node name specified' >&2; exit 1")
    with pytest.raises(TransientError):  # killed by a signal: worth another try
        await runner.run(SH, "-c", "kill -TERM $$")
    with pytest.raises(TerminalError, match="cannot run"):
        await runner.run("/nonexistent/scontrol")


async def test_timeout_kills_the_program(runner: CommandRunner, tmp_path: Path) -> None:
    """Past the timeout the program is killed and reaped; the error is transient."""
    pidfile = tmp_path / "pid"
    began = time.monotonic()
    with pytest.raises(TransientError, match="timed out"):
        await runner.run(SH, "-c", f"echo $$ > {pidfile}; exec sleep 30")
    assert time.monotonic() - began < 5
    assert not _alive(int(pidfile.read_text()))


async def test_cancellation_kills_the_program(runner: CommandRunner, tmp_path: Path) -> None:
    """A cancelled call leaves no program behind."""
    pidfile = tmp_path / "pid"
    task = asyncio.create_task(runner.run(SH, "-c", f"echo $$ > {pidfile}; exec sleep 30"))
    while not pidfile.exists() or not pidfile.read_text().strip():  # noqa: ASYNC110 - another process writes it
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not _alive(int(pidfile.read_text()))


async def test_child_gets_default_sigpipe(runner: CommandRunner) -> None:
    """Python ignores SIGPIPE; the programs it starts must not inherit that."""
    status = await runner.run(SH, "-c", "grep SigIgn /proc/self/status")
    ignored = int(status.split()[1], 16)
    assert not ignored & (1 << (13 - 1))  # SIGPIPE is signal 13


async def test_many_calls_in_parallel(runner: CommandRunner) -> None:
    """Concurrent calls each get their own output and exit code."""
    outs = await asyncio.gather(*(runner.run(SH, "-c", f"echo {i}") for i in range(30)))
    assert outs == [f"{i}\n" for i in range(30)]


async def test_failed_job_count_stops_the_node_read(tmp_path: Path) -> None:
    """read_nodes(with_jobs=True): squeue's error is raised as it is, scontrol is killed."""
    pidfile = tmp_path / "pid"
    fake = tmp_path / "fake"
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = squeue ]; then while [ ! -s {pidfile} ]; do sleep 0.05; done\n'
        '  echo "Invalid job id" >&2; exit 1; fi\n'
        f"echo $$ > {pidfile}; exec sleep 30\n"
    )
    fake.chmod(0o755)
    backend = ScontrolBackend(SlurmSettings(argv_prefix=(str(fake),), attempts=1))
    began = time.monotonic()
    with pytest.raises(TerminalError, match="Invalid job id"):
        await backend.read_nodes(with_jobs=True)
    assert time.monotonic() - began < 10
    assert not _alive(int(pidfile.read_text()))


async def test_a_path_in_the_settings_env_finds_the_client_both_ways(
    runner: CommandRunner, tmp_path: Path
) -> None:
    """``PATH`` in ``SlurmSettings.env`` picks the client on both ways of waiting.

    asyncio's subprocesses search the child's PATH; ``posix_spawnp`` searched this process's,
    so a stand-in directory named in the settings was used by one way and not the other.
    """
    tool = tmp_path / "slonkd-stand-in"
    tool.write_text("#!/bin/sh\necho stand-in\n")
    tool.chmod(0o755)
    paths = CommandRunner(
        SlurmSettings(env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout_s=5.0, attempts=1)
    )
    assert (await paths.run("slonkd-stand-in")).strip() == "stand-in"
    with pytest.raises(TerminalError, match="slonkd-stand-in"):
        await runner.run("slonkd-stand-in")  # not on this process's PATH

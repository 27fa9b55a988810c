"""Reason times are read the same whatever this process's or the host's time zone.

sinfo and scontrol print a time in their own process's zone and in the format
``SLURM_TIME_FORMAT`` names, without a zone. slonkd runs every SLURM client with ``TZ`` set to
UTC and ``SLURM_TIME_FORMAT=standard`` (``runner.py``'s ``client_env``, also for the
primed ``scontrol`` of ``primed.py``) and reads those times as UTC (``parsing.py``,
``parsing_show_node.py``, ``parsing_cas.py``), so a coordinator or a client in another zone
does not shift ``reason_time`` by hours.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slonkd.adapters.slurm import runner as runner_module
from slonkd.adapters.slurm.parsing import parse_sinfo_reasons
from slonkd.adapters.slurm.parsing_cas import parse_cas_read
from slonkd.adapters.slurm.parsing_show_node import parse_show_node_line
from slonkd.adapters.slurm.primed import PrimedScontrol
from slonkd.adapters.slurm.runner import CommandRunner, SlurmSettings
from slonkd.adapters.slurm.spawn import pidfd_supported

STAMP = "2026-03-01T12:34:56"
WHEN = datetime(2026, 3, 1, 12, 34, 56, tzinfo=UTC)
SH = "/bin/sh"


@pytest.fixture
def far_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run this process in a zone hours away from UTC, with another time format set."""
    monkeypatch.setenv("TZ", "EST+5")  # POSIX form: no zoneinfo file needed
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_client_env_fixes_the_zone_and_the_format(far_zone: None) -> None:
    """Over this process's environment and over the configured one alike."""
    env = runner_module.client_env(SlurmSettings(env={"SLURM_CONF": "/x.conf", "TZ": "Asia/Tokyo"}))
    assert env["TZ"] == "UTC0"
    assert env["SLURM_TIME_FORMAT"] == "standard"
    assert env["SLURM_CONF"] == "/x.conf"
    assert env["PATH"] == os.environ["PATH"]


@pytest.mark.parametrize("way", ["pidfd", "asyncio"])
async def test_every_client_runs_in_utc_with_the_standard_format(
    way: str, far_zone: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client started by the runner sees TZ=UTC0 and SLURM_TIME_FORMAT=standard."""
    if way == "pidfd" and not pidfd_supported():
        pytest.skip("no pidfd on this kernel")
    monkeypatch.setattr(runner_module, "_PIDFD", way == "pidfd")
    for settings in (SlurmSettings(attempts=1), SlurmSettings(env={"A": "b"}, attempts=1)):
        out = await CommandRunner(settings).run(SH, "-c", 'echo "$TZ|$SLURM_TIME_FORMAT|$A"')
        assert out == f"UTC0|standard|{settings.env.get('A', '')}\n"


async def test_the_primed_scontrol_runs_in_utc_too(far_zone: None, tmp_path: Path) -> None:
    """The interactive scontrol a compare-and-set primes gets the same environment."""
    seen = tmp_path / "env"
    script = f'echo "$TZ|$SLURM_TIME_FORMAT" > {seen}; cat >/dev/null'
    primed = PrimedScontrol(SlurmSettings(argv_prefix=(SH, "-c", script)))
    await primed.start()
    await primed.update(["nodename=n1", "state=drain", "reason=x"])
    await primed.close()
    assert seen.read_text() == "UTC0|standard\n"


def test_reason_times_are_read_as_utc_in_any_local_zone(far_zone: None) -> None:
    """``scontrol -o show node``, ``sinfo -R`` and the compare-and-set read alike."""
    line = (
        "NodeName=n1 Arch=x86_64 CPUAlloc=0 CPUTot=4 State=IDLE+DRAIN Partitions=p "
        f"Reason=maint [root@{STAMP}]"
    )
    assert parse_show_node_line(line).reason_time == WHEN
    (group,) = parse_sinfo_reasons(f"n1|drained|{STAMP}|root|maint\n")
    assert group.time == WHEN
    read = parse_cas_read(f"n1|idle+drain|{STAMP}|root|(null)|maint\n", ["n1"])
    assert read.nodes["n1"].reason_time == WHEN

"""strigger registration against a real slurmctld: fires once per event, survives restarts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from slonkd.adapters.slurm.runner import CommandRunner
from slonkd.adapters.slurm.triggers import (
    OWNER,
    TriggerEvent,
    Triggers,
    owner_tag,
    parse_strigger_get,
    program_line,
)
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.contract.conftest import settings_for

pytestmark = pytest.mark.slurm

TAG = owner_tag(OWNER)  # slurmctld runs <program> --by=<owner> <event> <hostlist>
TRIGGER_PERIOD_S = 20.0  # slurmctld checks triggers about every 15 s


def _install_program(cluster: SlurmCluster) -> tuple[str, Path]:
    """A program that logs its arguments: (path as slurmctld sees it, log on this host)."""
    program = cluster.root / "bin" / "nudge"
    log = cluster.root / "log" / "nudge.log"
    seen = cluster.inner if isinstance(cluster, ChrootSlurmCluster) else str
    program.write_text(f'#!/bin/sh\necho "$*" >> {seen(log)}\n')
    program.chmod(0o755)
    return seen(program), log


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def _wait_line(log: Path, line: str, timeout_s: float) -> float:
    began = time.monotonic()
    while line not in await asyncio.to_thread(_lines, log):
        assert time.monotonic() - began < timeout_s, f"{line!r} not logged in {timeout_s} s"
        await asyncio.sleep(0.5)
    return time.monotonic() - began


async def test_triggers_fire_once_and_survive_restart(cluster: SlurmCluster) -> None:
    """ensure() is idempotent; a drain and a down each run the program once within a period.

    After a slurmctld restart the triggers are still there, ensure() adds nothing, and
    remove() clears exactly slonkd's triggers and leaves an operator's alone, even the
    operator's trigger that runs the same program without slonkd's owner tag.
    """
    program, log = _install_program(cluster)
    cluster.run(
        "strigger", "--set", "--node", "--down", "--flags=PERM", "--program=/bin/true operator"
    )
    cluster.run("strigger", "--set", "--node", "--up", "--flags=PERM", f"--program={program} up")
    operators = {
        (t.event, t.program) for t in parse_strigger_get(cluster.run("strigger", "--get").stdout)
    }
    triggers = Triggers(CommandRunner(settings_for(cluster)))
    first = await triggers.ensure(program)
    assert set(first.added) == set(TriggerEvent)
    second = await triggers.ensure(program)
    assert second.added == ()
    assert second.cleared == ()
    assert len(second.kept) == len(TriggerEvent)
    assert len(await triggers.read()) == len(TriggerEvent) + 2

    cluster.run("scontrol", "update", "nodename=n1", "state=drain", "reason=trigger test")
    await _wait_line(log, f"{TAG} drained n1", TRIGGER_PERIOD_S)
    cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=trigger test")
    await _wait_line(log, f"{TAG} down n2", TRIGGER_PERIOD_S)
    # By now at least one more trigger period has passed since the drain.
    assert _lines(log).count(f"{TAG} drained n1") == 1
    assert _lines(log).count(f"{TAG} down n2") == 1

    cluster.stop_slurmctld()
    cluster.start_slurmctld()
    after = await triggers.ensure(program)
    assert after.added == ()
    assert after.cleared == ()
    assert len(await triggers.read()) == len(TriggerEvent) + 2

    removed = await triggers.remove()
    assert len(removed) == len(TriggerEvent)
    left = await triggers.read()
    assert {(t.event, t.program) for t in left} == operators


async def test_one_shot_trigger_is_replaced_by_a_permanent_one(cluster: SlurmCluster) -> None:
    """A non-permanent trigger of slonkd's program is replaced by a PERM one, not doubled.

    slurmctld itself refuses an identical second trigger ("Duplicate event trigger").
    """
    program, _ = _install_program(cluster)
    line = f"--program={program_line(program, TriggerEvent.DRAINED)}"
    cluster.run("strigger", "--set", "--node", "--drained", line)
    dup = cluster.run("strigger", "--set", "--node", "--drained", line, check=False)
    assert dup.returncode != 0
    assert "Duplicate event trigger" in dup.stderr
    triggers = Triggers(CommandRunner(settings_for(cluster)))
    (old,) = await triggers.read()
    result = await triggers.ensure(program, [TriggerEvent.DRAINED])
    assert result.added == (TriggerEvent.DRAINED,)
    assert result.cleared == (old.trig_id,)
    (new,) = await triggers.read()
    assert new.permanent


async def test_own_triggers_of_an_old_program_path_are_replaced(cluster: SlurmCluster) -> None:
    """A tagged trigger of another program path (an older image) is cleared for the new one.

    The operator's trigger of the same old path without the tag stays.
    """
    program, _ = _install_program(cluster)
    old = cluster.root / "bin" / "old-nudge"
    old.write_text("#!/bin/sh\n")
    old.chmod(0o755)
    seen = cluster.inner(old) if isinstance(cluster, ChrootSlurmCluster) else str(old)
    stale = program_line(seen, TriggerEvent.DOWN)
    cluster.run("strigger", "--set", "--node", "--down", "--flags=PERM", f"--program={stale}")
    cluster.run("strigger", "--set", "--node", "--fail", "--flags=PERM", f"--program={seen} x")
    triggers = Triggers(CommandRunner(settings_for(cluster)))
    (stale_id,) = [t.trig_id for t in await triggers.read() if t.program == stale]
    result = await triggers.ensure(program, [TriggerEvent.DOWN])
    assert result.added == (TriggerEvent.DOWN,)
    assert result.cleared == (stale_id,)
    assert {t.program for t in await triggers.read()} == {
        program_line(program, TriggerEvent.DOWN),
        f"{seen} x",
    }

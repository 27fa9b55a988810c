"""An audit record says when its write was allowed: the task's last lease check.

The 5-minute soak failed I3 ("audit record with an old token") on a leader SIGSTOPped right
after a SLURM failure: its write had been allowed (lease checked) and sent before the stop,
and its record, stamped when the write returned, came 10 ms after the SIGCONT, 12 s into its
successor's term. Neighbours: :mod:`slonkd.core.fencing`,
:mod:`slonkd.runtime.coordinating.audit_log`,
``bench.soak_check`` (I3 judges ``lease_checked_at``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, cast

import pytest

from slonkd.adapters.kube.lease import LeaderElector, LeaseSettings
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import TerminalError
from slonkd.core.fencing import last_lease_check
from slonkd.runtime.coordinating.audit_log import AuditLog


def _leading(clock: list[float]) -> LeaderElector:
    elector = LeaderElector(
        cast(KubeTransport, None),
        LeaseSettings(namespace="ns", name="lease", identity="c-0"),
        clock=lambda: clock[0],
    )
    elector._token = 3
    elector._valid_until = 10.0
    return elector


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_each_task_records_its_own_last_lease_check(tmp_path: Path) -> None:
    """The check's wall time goes into that task's records; a task that never checked has none."""
    clock = [1.0]
    elector = _leading(clock)
    audit = AuditLog(tmp_path / "audit.jsonl", identity="c-0")
    allowed = asyncio.Event()
    resumed = asyncio.Event()

    async def writer() -> float:
        assert elector.check_valid() == 3
        checked = last_lease_check()
        assert checked is not None
        allowed.set()
        await resumed.wait()  # stopped mid-write, as by SIGSTOP: the record comes later
        audit.record(action="cordon", node="d-8", cause="slurm-failure", fencing_token=3,
                     outcome="changed")  # fmt: skip
        return checked

    async def bystander() -> None:
        await allowed.wait()
        audit.record(action="breaker", node="d-1", cause="mass", fencing_token=3, outcome="open")

    task = asyncio.create_task(writer())
    await bystander()
    await asyncio.sleep(0.05)
    resumed.set()
    checked = await task
    audit.close()
    bystander_rec, writer_rec = _records(tmp_path / "audit.jsonl")
    assert "lease_checked_at" not in bystander_rec
    assert writer_rec["lease_checked_at"] == round(checked, 3)
    assert writer_rec["ts"] >= writer_rec["lease_checked_at"] + 0.04
    assert abs(checked - time.time()) < 5


def test_a_lease_found_invalid_notes_nothing() -> None:
    """A check that raises allowed no write: the task's last check stays unset."""
    clock = [20.0]  # past valid_until
    elector = _leading(clock)

    async def check() -> float | None:
        with pytest.raises(TerminalError, match="not held"):
            elector.check_valid()
        return last_lease_check()

    assert asyncio.run(check()) is None

"""The preStop hook never sets a node DOWN under a job in a flag or unknown state (fake SLURM).

Issue 37 item 6: 22.05's ``squeue --json`` prints a stopped job as ``STOPPED``, one being
signalled as ``SIGNALING``; read as "not on the node", the hook took the node for empty and
set it DOWN, which kills the job. Here the real backend parses a recorded ``squeue --json``
(``tests/data/slurm/<release>/squeue.json``, job 1 on n3 in the state under test) from a fake
runner; the drain and the DOWN are recorded instead of written. The hook against real SLURM:
``tests/contract/test_prestop_slurm.py``; the classification of every state:
``test_slurm_job_states.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from slonkd.adapters.slurm.results import UpdateResult
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import NodeName
from slonkd.runtime import prestop
from slonkd.runtime.prestop import PrestopSettings, run_prestop
from tests.unit.recorded import squeue_json_with


class _Slurm:
    """What the hook's backends read and write: one ``squeue --json`` text, writes recorded."""

    def __init__(self, squeue: str) -> None:
        self.squeue = squeue
        self.writes: list[tuple[str, ...]] = []

    async def run(self, tool: str, *args: str, retry: bool = True) -> str:
        if (tool, *args[:1]) == ("squeue", "--json"):
            return self.squeue
        self.writes.append((tool, *args))
        return ""

    async def write(self, tool: str, *args: str, retry: bool = True) -> str:
        """A write: answered as :meth:`run` answers it."""
        return await self.run(tool, *args, retry=retry)


def _backend_class(slurm: _Slurm) -> type[ScontrolBackend]:
    """A ScontrolBackend that reads jobs through ``slurm`` and records drain and DOWN."""

    class Backend(ScontrolBackend):
        def __post_init__(self) -> None:
            self.runner = slurm  # type: ignore[assignment]

        async def drain(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
            slurm.writes.append(("drain", *names))
            return UpdateResult(changed=tuple(NodeName(n) for n in names))

        async def down(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
            slurm.writes.append(("down", *names))
            return UpdateResult(changed=tuple(NodeName(n) for n in names))

    return Backend


async def _prestop(monkeypatch: pytest.MonkeyPatch, slurm: _Slurm) -> prestop.PrestopOutcome:
    monkeypatch.setattr(prestop, "ScontrolBackend", _backend_class(slurm))
    monkeypatch.setattr(prestop, "process_age_s", lambda: 0.0)  # pytest is not a fresh hook
    # grace 1.0, margin 0.2, startup 0.5: jobs waited for 0.3 s, everything done by 0.5 s
    return await run_prestop(PrestopSettings(node="n3", grace_s=1.0, margin_s=0.2, poll_s=0.05))


@pytest.mark.parametrize(
    ("release", "state"),
    [
        ("22.05", "STOPPED"),
        ("22.05", "SIGNALING"),
        ("22.05", "RESIZING"),
        ("22.05", "REQUEUED"),
        ("22.05", "?"),
        ("24.11", ["RUNNING", "STOPPED"]),
        ("24.11", ["RUNNING", "SIGNALING"]),
        ("24.11", ["COMPLETED", "COMPLETING"]),
        ("24.11", ["RUNNING", "EXPEDITING"]),
    ],
)
async def test_a_job_in_a_flag_or_unknown_state_keeps_the_node_out_of_down(
    monkeypatch: pytest.MonkeyPatch, release: str, state: str | list[str]
) -> None:
    """Drained; the job is waited for, neither requeued nor taken for gone; no DOWN."""
    slurm = _Slurm(squeue_json_with(release, state))
    outcome = await _prestop(monkeypatch, slurm)
    assert slurm.writes == [("drain", "n3")]
    assert not outcome.down
    assert not outcome.jobs_finished
    assert (outcome.requeued, outcome.not_requeueable) == ((), (1,))


@pytest.mark.parametrize(("release", "state"), [("22.05", "RUNNING"), ("24.11", ["RUNNING"])])
async def test_a_running_job_is_requeued_and_the_node_set_down(
    monkeypatch: pytest.MonkeyPatch, release: str, state: str | list[str]
) -> None:
    """The other side: a plain running job is requeued at the deadline, then DOWN."""
    slurm = _Slurm(squeue_json_with(release, state))
    outcome = await _prestop(monkeypatch, slurm)
    assert slurm.writes == [("drain", "n3"), ("scontrol", "requeue", "1"), ("down", "n3")]
    assert outcome.down
    assert outcome.requeued == (1,)


@pytest.mark.parametrize(("release", "state"), [("22.05", "COMPLETED"), ("24.11", ["FAILED"])])
async def test_an_ended_job_is_gone(
    monkeypatch: pytest.MonkeyPatch, release: str, state: str | list[str]
) -> None:
    """An ended job holds nothing: the node goes DOWN at once, nothing requeued."""
    slurm = _Slurm(squeue_json_with(release, state))
    outcome = await _prestop(monkeypatch, slurm)
    assert slurm.writes == [("drain", "n3"), ("down", "n3")]
    assert (outcome.jobs_finished, outcome.down) == (True, True)

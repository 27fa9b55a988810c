"""Signals a job's batch shell for a checkpoint, only where the shell handles that signal.

Run on the job's node (the slurmd container: the preStop hook shares its PID namespace, so
the PIDs ``scontrol listpids`` gives are this process's PIDs too). The batch shell is the
``batch`` step's process with local id 0; its ``/proc/PID/status`` says which signals it
catches (:func:`slonkd.core.checkpoint.catches`). The SLURM port's
:meth:`~slonkd.adapters.slurm.backend.SlurmWrites.signal_batch` sends the signal to that
shell alone, as ``sbatch --signal=B:SIG`` would (the scontrol backend: ``scancel --batch
--signal``). Neighbours: :mod:`slonkd.adapters.slurm.runner` (``listpids``' subprocess, its
timeout and errors), :mod:`slonkd.adapters.slurm.backend` (the port),
:mod:`slonkd.core.checkpoint` (the rule and the spec), :mod:`slonkd.runtime.prestop` (when).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from slonkd.adapters.slurm.backend import SlurmWrites
from slonkd.adapters.slurm.runner import CommandRunner
from slonkd.core.checkpoint import SignalSpec, catches
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import JobId

STATUS_LIMIT = 16_384
"""Bytes of ``/proc/PID/status`` read (the file is about 1.5 KiB)."""


def parse_batch_shell(text: str, job_id: JobId) -> int | None:
    """The batch shell's PID from ``scontrol listpids JOB NODE`` output, None if absent.

    Columns: PID JOBID STEPID LOCALID GLOBALID; the shell is step ``batch``, local id 0
    (its children show ``-``). Anything else in the output is a parse error, not a guess.
    """
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0][:2] != ["PID", "JOBID"]:
        raise ParseError(f"scontrol listpids: no header in {text[:120]!r}")
    for cols in lines[1:]:
        if len(cols) < 4 or not cols[0].isdigit():
            raise ParseError(f"scontrol listpids: unexpected line {' '.join(cols)[:120]!r}")
        if cols[1] == str(job_id) and cols[2] == "batch" and cols[3] == "0":
            return int(cols[0])
    return None


class SignalOutcome(StrEnum):
    """What happened to one job's checkpoint signal."""

    SENT = "sent"
    NOT_CAUGHT = "not-caught"
    """The shell has no handler: the signal would kill it, so it was not sent."""
    NO_SHELL = "no-batch-shell"
    """No batch shell on this node (an interactive job, or the job ended meanwhile)."""


@dataclass(slots=True)
class JobSignaller:
    """Sends checkpoint signals to batch shells on this node."""

    runner: CommandRunner
    """Runs ``scontrol listpids`` (which shell is the job's)."""
    slurm: SlurmWrites
    """The SLURM port: sends the signal (:meth:`~SlurmWrites.signal_batch`)."""
    node: str
    proc: Path = field(default=Path("/proc"))

    async def signal(self, job_id: JobId, spec: SignalSpec) -> SignalOutcome:
        """Send ``spec`` to ``job_id``'s batch shell if it catches it; never kills a job."""
        text = await self.runner.run("scontrol", "listpids", str(job_id), self.node, retry=False)
        pid = parse_batch_shell(text, job_id)
        if pid is None:
            return SignalOutcome.NO_SHELL
        try:
            with (self.proc / str(pid) / "status").open("rb") as f:
                status = f.read(STATUS_LIMIT).decode("utf-8", "replace")
        except OSError:
            return SignalOutcome.NO_SHELL
        if not catches(status, spec.number):
            return SignalOutcome.NOT_CAUGHT
        await self.slurm.signal_batch(job_id, spec)
        return SignalOutcome.SENT

"""The port's typed ``diag`` and its ``signal_batch`` write, through the scontrol backend.

Issue 39 step 2: ``diag()`` answers :class:`SlurmctldStats` whatever the transport (the
scontrol backend parses ``sdiag``'s text, ``parsing_sdiag.py``), and the checkpoint signal
is a write of the port (``signal_batch``; scontrol: ``scancel --batch --signal``, sent once)
that :class:`~slonkd.adapters.slurm.job_signal.JobSignaller` makes through the backend it is
given. The SLURM clients are one shell script (the settings' argv prefix), as in
``test_slurm_write_resend.py``. Neighbours: ``test_slurm_parsing_sdiag`` (the parser),
``test_fleet_metrics`` (the exporter takes the typed statistics),
``tests/contract/test_slurm_sdiag.py`` and ``test_slurm_job_signal.py`` (real SLURM).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from slonkd.adapters.slurm.backend import SlurmWrites
from slonkd.adapters.slurm.job_signal import JobSignaller, SignalOutcome
from slonkd.adapters.slurm.parsing_sdiag import SlurmctldStats, parse_sdiag
from slonkd.adapters.slurm.runner import CommandRunner, NotReachedError, SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.checkpoint import SignalSpec
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import JobId
from tests.unit.recorded import RELEASES, recorded

USR1 = SignalSpec.parse("B:USR1")
CLIENTS = """\
dir=$(dirname "$0")
tool=$1
shift
echo "$tool $*" >> "$dir/sent"
case "$tool $1" in
"sdiag ") cat "$dir/sdiag.txt" ;;
"scontrol listpids") cat "$dir/listpids.txt" ;;
"scancel "*) . "$dir/answer" ;;
*) echo "fake SLURM: unexpected $tool $*" >&2; exit 2 ;;
esac
"""
UNREACHED = (
    'echo "scancel: error: Unable to contact slurm controller (connect failure)" >&2\nexit 1\n'
)


def _clients(root: Path, sdiag: str = "", answer: str = "") -> SlurmSettings:
    (root / "clients.sh").write_text(CLIENTS)
    (root / "sdiag.txt").write_text(sdiag)
    (root / "answer").write_text(answer)
    (root / "listpids.txt").write_text(
        "PID      JOBID    STEPID   LOCALID GLOBALID\n"
        "4242     7        batch    0       0\n"
        "4243     7        batch    -       -\n"
    )
    return SlurmSettings(
        argv_prefix=("/bin/sh", str(root / "clients.sh")),
        timeout_s=2.0,
        attempts=3,
        retry_wait_min_s=0.0,
        retry_wait_max_s=0.0,
    )


def _sent(root: Path) -> list[str]:
    path = root / "sent"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("release", RELEASES)
async def test_the_scontrol_backends_diag_is_sdiag_typed(tmp_path: Path, release: str) -> None:
    """One ``sdiag``, answered as the parser's :class:`SlurmctldStats` (not its text)."""
    text = recorded(release, "sdiag.txt")
    backend = ScontrolBackend(_clients(tmp_path, sdiag=text))
    stats = await backend.diag()
    assert isinstance(stats, SlurmctldStats)
    assert stats == parse_sdiag(text)
    assert _sent(tmp_path) == ["sdiag "]


async def test_output_that_is_not_sdiags_is_a_parse_error_of_the_port(tmp_path: Path) -> None:
    """The exporter counts it as a failed read (``test_fleet_metrics``); never a zero."""
    backend = ScontrolBackend(_clients(tmp_path, sdiag="sdiag: what?\n"))
    with pytest.raises(ParseError, match="not sdiag"):
        await backend.diag()


async def test_signal_batch_is_scancel_batch_signal_sent_once(tmp_path: Path) -> None:
    """``scancel --batch --signal=USR1 7``; one that never reached slurmctld is not re-sent.

    The checkpoint signal was sent with ``retry=False`` before it became a port write: the
    prestop hook decides on its own clock whether to try again.
    """
    backend = ScontrolBackend(_clients(tmp_path))
    await backend.signal_batch(JobId(7), USR1)
    assert _sent(tmp_path) == ["scancel --batch --signal=USR1 7"]
    (tmp_path / "answer").write_text(UNREACHED)
    with pytest.raises(NotReachedError):
        await backend.signal_batch(JobId(7), USR1)
    assert len(_sent(tmp_path)) == 2


class _Port:
    """The port's write half, as far as the signaller uses it: records each signal."""

    def __init__(self) -> None:
        self.signalled: list[tuple[JobId, SignalSpec]] = []

    async def signal_batch(self, job_id: JobId, signal: SignalSpec) -> None:
        self.signalled.append((job_id, signal))


def _proc(root: Path, sigcgt: str) -> Path:
    proc = root / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "status").write_text(f"Name:\tbash\nSigCgt:\t{sigcgt}\n")
    return proc


@pytest.mark.parametrize(
    ("sigcgt", "outcome"),
    [("0000000000000200", SignalOutcome.SENT), ("0000000000010000", SignalOutcome.NOT_CAUGHT)],
)
async def test_the_signaller_signals_through_the_port_it_is_given(
    tmp_path: Path, sigcgt: str, outcome: SignalOutcome
) -> None:
    """listpids on the runner finds the shell; only a handler of USR1 gets it, by the port."""
    settings = _clients(tmp_path)
    port = _Port()
    signaller = JobSignaller(
        runner=CommandRunner(settings),
        slurm=cast(SlurmWrites, port),
        node="n1",
        proc=_proc(tmp_path, sigcgt),
    )
    assert await signaller.signal(JobId(7), USR1) is outcome
    assert port.signalled == ([(JobId(7), USR1)] if outcome is SignalOutcome.SENT else [])
    assert _sent(tmp_path) == ["scontrol listpids 7 n1"]  # no scancel of its own

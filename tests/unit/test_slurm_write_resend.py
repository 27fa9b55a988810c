"""A SLURM write is never re-sent blind: only one that never reached slurmctld goes again.

Issue 37 item 2: a primed ``scontrol update`` that timed out fell back to the argv path, which
the runner retried (3 attempts of 20 s) up to a minute after the compare-and-set read. A
``state=resume`` that slurmctld applied but answered late was sent again after an operator's
drain, and cleared it. A write whose outcome is unknown (no answer after the request left)
is now raised, for the caller to judge on a fresh read; one that never reached slurmctld
(connection refused, name not resolved) may go again, after a fresh read of its nodes.

The SLURM clients here are one shell script (the settings' argv prefix) that answers the
compare-and-set read from a file and logs every update sent, by argv or through the primed
``scontrol``'s stdin; the real runner, primed process and retries run as in production. The
same race against real slurmctld 22.05 and 24.11: ``tests/contract/test_slurm_resend.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slonkd.adapters.slurm.runner import CommandRunner, NotReachedError, SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.errors import OutcomeUnknownError, TransientError
from slonkd.core.reasons import Cause
from slonkd.core.slurm_plan import SkipReason
from tests.unit.recorded import recorded

POD = Cause.parse("pod-terminating")

HELD_CAS = "n2|idle+drain|2026-11-30T06:31:56|root|(null)|slonkd:pod-terminating bye\n"
"""The compare-and-set read: n2 drained by slonkd for ``pod-terminating`` alone."""
OPERATOR_CAS = "n2|idle+drain|2026-11-30T06:32:10|root|(null)|admin maint\n"
"""n2 as an operator's drain leaves it."""
_N2 = next(
    line
    for line in recorded("22.05", "scontrol_show_node.txt").splitlines()
    if line.startswith("NodeName=n2 ")
)
HELD_SHOW = _N2.split(" Extra=")[0] + "\n"
"""``scontrol -o show node n2``: held by slonkd, no ``extra`` (one cause)."""
OPERATOR_SHOW = HELD_SHOW.replace(
    "Reason=slonkd:pod-terminating bye [root@2026-11-30T04:23:47]",
    "Reason=admin maint [root@2026-11-30T04:24:00]",
)

LATE = "exec sleep 30\n"
"""slurmctld took the update and has not answered yet: the client waits past its timeout."""
UNREACHED = (
    'echo "slurm_update error: Unable to contact slurm controller (connect failure)" >&2\nexit 1\n'
)
"""The connection was refused: the update never reached slurmctld."""

CLIENTS = """\
dir=$(dirname "$0")
tool=$1
shift
case "$tool $1" in
"sinfo "*) cat "$dir/cas.txt" ;;
"scontrol -o") cat "$dir/show.txt" ;;
"scontrol update") echo "argv $*" >> "$dir/sent"; . "$dir/answer" ;;
"scontrol ") IFS= read -r line; echo "primed $line" >> "$dir/sent"; . "$dir/answer" ;;
*) echo "fake SLURM: unexpected $tool $*" >&2; exit 2 ;;
esac
"""


class Clients:
    """The fake SLURM clients in ``root``: what they answer and what was sent."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "clients.sh").write_text(CLIENTS)
        (root / "cas.txt").write_text(HELD_CAS)
        (root / "show.txt").write_text(HELD_SHOW)
        self.answer(LATE)

    def answer(self, script: str) -> None:
        """What an ``scontrol update`` does once it has logged itself."""
        (self.root / "answer").write_text(script)

    def settings(self, *, primed: bool) -> SlurmSettings:
        """Short timeouts, three attempts without waits: the production retries, faster."""
        return SlurmSettings(
            argv_prefix=("/bin/sh", str(self.root / "clients.sh")),
            timeout_s=0.3,
            attempts=3,
            retry_wait_min_s=0.0,
            retry_wait_max_s=0.0,
            primed_writes=primed,
        )

    @property
    def sent(self) -> list[str]:
        """Every update sent, in order (``argv ...`` or ``primed update ...``)."""
        path = self.root / "sent"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(params=[True, False], ids=["primed", "argv"])
def primed(request: pytest.FixtureRequest) -> bool:
    """Whether the compare-and-set's scontrol is started before its read."""
    return bool(request.param)


async def test_an_update_answered_late_is_not_sent_again(tmp_path: Path, primed: bool) -> None:
    """The resume left and no answer came in time: raised after one send, never re-sent.

    The old code sent it four times (primed: the line, then three argv attempts), the last
    up to a minute after the read in production: slurmctld applies each, and a drain an
    operator made after the first is cleared by the next.
    """
    clients = Clients(tmp_path)
    backend = ScontrolBackend(clients.settings(primed=primed))
    with pytest.raises(OutcomeUnknownError, match="timed out"):
        await backend.resume(["n2"], POD)
    assert len(clients.sent) == 1, clients.sent
    assert clients.sent[0].endswith("nodename=n2 state=resume")


async def test_an_update_that_never_reached_slurmctld_is_judged_again_before_it_goes(
    tmp_path: Path, primed: bool
) -> None:
    """Refused connection, then an operator's drain: the fresh read skips it, nothing re-sent.

    An update that never reached slurmctld may go again, but only on a fresh read: by then an
    operator may have drained the node (here: while the refusal is answered), and a resume
    planned on the old read would clear that drain.
    """
    clients = Clients(tmp_path)
    clients.answer(
        UNREACHED.replace(
            "exit 1",
            f'printf "%s" "{OPERATOR_CAS}" > "$dir/cas.txt"\n'
            f"cat > \"$dir/show.txt\" <<'EOF'\n{OPERATOR_SHOW}EOF\nexit 1",
        )
    )
    backend = ScontrolBackend(clients.settings(primed=primed))
    result = await backend.resume(["n2"], POD)
    assert len(clients.sent) == 1, clients.sent
    assert result.changed == ()
    assert result.skipped_for(SkipReason.FOREIGN_REASON) == {"n2"}, result


async def test_an_update_that_never_reached_slurmctld_goes_again_if_the_node_is_unchanged(
    tmp_path: Path, primed: bool
) -> None:
    """Refused once, nothing changed meanwhile: read again, sent again, done."""
    clients = Clients(tmp_path)
    once = tmp_path / "refused"
    clients.answer(f'[ -e "{once}" ] && exit 0\n: > "{once}"\n' + UNREACHED)
    backend = ScontrolBackend(clients.settings(primed=primed))
    result = await backend.resume(["n2"], POD)
    assert len(clients.sent) == 2, clients.sent
    assert result.changed == ("n2",)


async def test_the_runner_sends_a_write_again_only_when_it_never_reached_slurmctld(
    tmp_path: Path,
) -> None:
    """``write``: a late answer is raised after one sending, a refused one is retried.

    A read of the same late answer is still retried (reads change nothing).
    """
    log = tmp_path / "sent"
    runner = CommandRunner(
        SlurmSettings(timeout_s=0.3, attempts=3, retry_wait_min_s=0.0, retry_wait_max_s=0.0)
    )
    late = f'echo sent >> "{log}"; exec sleep 30'
    refused = f'echo sent >> "{log}"; {UNREACHED}'

    def sent() -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0

    with pytest.raises(OutcomeUnknownError, match="may have been applied"):
        await runner.write("/bin/sh", "-c", late)
    assert sent() == 1
    with pytest.raises(NotReachedError):
        await runner.write("/bin/sh", "-c", refused)
    assert sent() == 1 + 3
    with pytest.raises(TransientError) as read:
        await runner.run("/bin/sh", "-c", late)
    assert not isinstance(read.value, OutcomeUnknownError)
    assert sent() == 4 + 3

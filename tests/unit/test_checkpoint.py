"""Checkpoint before requeue: the signal spec, the SigCgt rule and the deadline arithmetic."""

from __future__ import annotations

import argparse
import signal

import pytest

from slonkd.adapters.slurm.job_signal import parse_batch_shell
from slonkd.cli.prestop import add_parser, settings_from
from slonkd.core.checkpoint import Deadlines, SignalSpec, catches, deadlines
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import JobId


@pytest.mark.parametrize(
    ("grace", "margin", "startup", "window", "expected"),
    [
        # no checkpoint window: today's handshake (requeue at grace - margin - startup)
        (30, 5, 0.5, 0, Deadlines(signal_at_s=None, requeue_at_s=24.5, hard_s=27.0, window_s=0)),
        # a window that fits: the signal goes `window` before the requeue
        (
            120,
            10,
            0.5,
            60,
            Deadlines(signal_at_s=49.5, requeue_at_s=109.5, hard_s=114.5, window_s=60),
        ),
        # the window fills the whole wait: signalled at once
        (70, 10, 0.0, 60, Deadlines(signal_at_s=0.0, requeue_at_s=60.0, hard_s=65.0, window_s=60)),
        # a grace too short for the window: signalled at once, the window shortened, not the margin
        (30, 5, 0.5, 60, Deadlines(signal_at_s=0.0, requeue_at_s=24.5, hard_s=27.0, window_s=24.5)),
        # a margin that eats the grace: requeue at once, the DOWN still gets half a second
        (4, 10, 0.5, 0, Deadlines(signal_at_s=None, requeue_at_s=0.0, hard_s=0.5, window_s=0)),
    ],
)
def test_the_grace_is_split_into_wait_signal_window_requeue_and_margin(
    grace: float, margin: float, startup: float, window: float, expected: Deadlines
) -> None:
    """One function owns the arithmetic; each row is a case the handshake must get right."""
    got = deadlines(grace_s=grace, margin_s=margin, startup_s=startup, checkpoint_window_s=window)
    assert got == expected
    assert got.requeue_at_s <= got.hard_s <= max(0.5, grace)
    if got.signal_at_s is not None:
        assert 0 <= got.signal_at_s <= got.requeue_at_s


@pytest.mark.parametrize("bad", [{"grace_s": 0}, {"margin_s": -1}, {"checkpoint_window_s": -5}])
def test_nonsense_timing_is_refused(bad: dict[str, float]) -> None:
    """A negative window or margin, or no grace at all, is an error, not a silent zero."""
    kwargs = {"grace_s": 30.0, "margin_s": 5.0, "startup_s": 0.5, "checkpoint_window_s": 10.0}
    with pytest.raises(ValueError, match="grace must be positive"):
        deadlines(**{**kwargs, **bad})


@pytest.mark.parametrize(
    ("text", "number", "shown"),
    [
        ("B:USR1", signal.SIGUSR1, "B:USR1"),
        ("b:sigusr2", signal.SIGUSR2, "B:USR2"),
        ("B:10", signal.SIGUSR1, "B:USR1"),
        (" B:TERM ", signal.SIGTERM, "B:TERM"),
    ],
)
def test_signal_specs_in_slurms_own_syntax(text: str, number: int, shown: str) -> None:
    """``[B:]SIG`` as ``sbatch --signal`` writes it: names with or without SIG, or numbers."""
    spec = SignalSpec.parse(text)
    assert spec.number == number
    assert str(spec) == shown


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("USR1", "only the batch shell form"),
        ("B:KILL", "not one of"),
        ("B:STOP", "not one of"),
        ("B:99", "no such signal"),
        ("B:", "not one of"),
    ],
)
def test_bad_signal_specs_are_refused(text: str, message: str) -> None:
    """Signals that cannot be caught, unknown ones and step-wide signals are refused."""
    with pytest.raises(ValueError, match=message):
        SignalSpec.parse(text)


STATUS = """Name:\tbash
State:\tS (sleeping)
SigQ:\t0/63450
SigPnd:\t0000000000000000
ShdPnd:\t0000000000000000
SigBlk:\t0000000000010000
SigIgn:\t0000000000000004
SigCgt:\t{mask}
"""


@pytest.mark.parametrize(
    ("mask", "number", "expected"),
    [
        ("0000000000010200", signal.SIGUSR1, True),  # bit 9: USR1 (10) trapped
        ("0000000000010000", signal.SIGUSR1, False),  # bash's own CHLD handler only
        ("0000000000010000", signal.SIGCHLD, True),
        ("0000000000000800", signal.SIGUSR2, True),
        ("zz", signal.SIGUSR1, False),  # malformed: not proven
    ],
)
def test_a_signal_is_safe_only_where_a_handler_is_installed(
    mask: str, number: int, expected: bool
) -> None:
    """SigCgt decides: a shell that never trapped the signal would die of it."""
    assert catches(STATUS.format(mask=mask), number) is expected


def test_a_status_without_sigcgt_is_not_proof() -> None:
    """No SigCgt line (a kernel thread, a truncated read): never signalled."""
    assert catches("Name:\tbash\nState:\tS\n", signal.SIGUSR1) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PID      JOBID    STEPID   LOCALID GLOBALID\n17 1 batch 0 0\n18 1 batch - -\n", 17),
        ("PID      JOBID    STEPID   LOCALID GLOBALID\n40 1 0 0 0\n", None),  # srun step only
        ("PID      JOBID    STEPID   LOCALID GLOBALID\n", None),
    ],
)
def test_listpids_output_names_the_batch_shell(text: str, expected: int | None) -> None:
    """The shell is step ``batch``, local id 0; its children and other steps are not it."""
    assert parse_batch_shell(text, JobId(1)) == expected


@pytest.mark.parametrize("text", ["", "garbage\n", "PID JOBID\nx 1 batch 0 0\n"])
def test_unreadable_listpids_output_is_a_parse_error(text: str) -> None:
    """Output slonkd cannot read is an error, never a guessed PID."""
    with pytest.raises(ParseError):
        parse_batch_shell(text, JobId(1))


def _prestop_args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["prestop", "--node", "n1", "--grace", "30", *extra])


def test_prestop_takes_its_checkpoint_signal_and_window() -> None:
    """``--checkpoint-signal B:USR1 --checkpoint-window 20`` reach the handshake's settings."""
    s = settings_from(_prestop_args("--checkpoint-signal", "B:USR1", "--checkpoint-window", "20"))
    assert s.checkpoint_signal == SignalSpec.parse("B:USR1")
    assert s.checkpoint_window_s == 20.0
    plain = settings_from(_prestop_args())
    assert plain.checkpoint_signal is None
    assert plain.checkpoint_window_s == 0.0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--checkpoint-signal", "B:USR1", "--checkpoint-window", "26"), "must fit in the 30"),
        (("--checkpoint-signal", "B:KILL", "--checkpoint-window", "5"), "checkpoint signal"),
        (("--checkpoint-signal", "USR1", "--checkpoint-window", "5"), "batch shell form"),
        (("--checkpoint-signal", "B:USR1", "--checkpoint-window", "soon"), "not a number"),
    ],
)
def test_prestop_refuses_a_checkpoint_that_does_not_fit_or_cannot_be_sent(
    extra: tuple[str, ...], message: str
) -> None:
    """A window plus margin past the grace, or an unusable signal: one line, exit 2 upstream."""
    with pytest.raises(ValueError, match=message):
        settings_from(_prestop_args(*extra))


@pytest.mark.parametrize(
    ("env", "node"),
    [
        ({"SLONKD_SLURM_NODE": "gpu-7", "POD_NAME": "w-0"}, "gpu-7"),
        ({"SLONKD_NODE": "gpu-8", "POD_NAME": "w-0"}, "gpu-8"),
        ({"SLONKD_SLURM_NODE": "gpu-7", "SLONKD_NODE": "gpu-8"}, "gpu-7"),
        ({"POD_NAME": "w-0"}, "w-0"),
    ],
    ids=["agents-name", "old-name", "agents-name-first", "pod-name"],
)
def test_prestop_names_its_node_from_the_agents_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], node: str
) -> None:
    """``SLONKD_SLURM_NODE`` names the SLURM node for the agent and the preStop hook alike.

    ``SLONKD_NODE`` (the hook's old name) still counts when the new one is unset.
    """
    for name in ("SLONKD_SLURM_NODE", "SLONKD_NODE", "POD_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    assert settings_from(parser.parse_args(["prestop", "--grace", "30"])).node == node

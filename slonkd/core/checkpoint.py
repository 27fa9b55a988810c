"""Checkpoint before requeue: when to signal a job, and whether signalling it is safe (pure).

Before slonkd requeues a job (the preStop handshake today), it may send the job's batch shell
a signal so the job can write a checkpoint, then wait a bounded window. This module holds the
pure parts: the signal specification (SLURM's own ``[B:]SIG`` syntax), the deadline arithmetic
of the handshake (signal, checkpoint window, requeue, DOWN, margin) in one function, and the
safety rule: a signal whose default action terminates a process is sent only to a shell that
*catches* it (``SigCgt`` in ``/proc/PID/status``), because a batch script that never asked for
it would die of it, and slonkd never kills a job. Neighbours: :mod:`slonkd.runtime.prestop`
(runs the handshake with these deadlines), :mod:`slonkd.adapters.slurm.scontrol` (the job's
processes and the signal itself).
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass

# SLURM accepts these names (with or without SIG) for --signal; numbers too.
_ALLOWED = frozenset({"USR1", "USR2", "TERM", "INT", "HUP", "URG", "WINCH", "CONT", "QUIT", "ALRM"})


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalSpec:
    """What to send: a signal, to the batch shell (``B:``) as SLURM's ``--signal`` says it."""

    number: int
    name: str
    batch_only: bool = True

    @classmethod
    def parse(cls, text: str) -> SignalSpec:
        """``B:USR1``, ``USR1``, ``SIGUSR1``, ``10``; ValueError naming what is wrong."""
        raw = text.strip()
        batch_only = False
        if raw[:2].upper() == "B:":
            batch_only, raw = True, raw[2:]
        if not batch_only:
            # signals to job steps reach every process of every step, a data loader included;
            # only the batch shell's handling can be checked, so only that form is offered
            raise ValueError(
                f"checkpoint signal {text!r}: only the batch shell form B:SIG is supported"
            )
        name = raw.upper().removeprefix("SIG")
        if name.isdigit():
            try:
                name = _signal.Signals(int(name)).name.removeprefix("SIG")
            except ValueError:
                raise ValueError(f"checkpoint signal {text!r}: no such signal") from None
        if name not in _ALLOWED:
            raise ValueError(
                f"checkpoint signal {text!r}: not one of {', '.join(sorted(_ALLOWED))}"
            )
        return cls(number=int(_signal.Signals[f"SIG{name}"]), name=name, batch_only=batch_only)

    def __str__(self) -> str:
        return f"B:{self.name}" if self.batch_only else self.name


def catches(status_text: str, number: int) -> bool:
    """Whether the process whose ``/proc/PID/status`` this is catches signal ``number``.

    ``SigCgt`` is a hex mask, bit ``number - 1`` set when a handler is installed. A missing
    or malformed line is "no": a signal is sent only where handling is proven.
    """
    for line in status_text.splitlines():
        key, _, value = line.partition(":")
        if key == "SigCgt":
            try:
                mask = int(value.strip(), 16)
            except ValueError:
                return False
            return bool(mask >> (number - 1) & 1)
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class Deadlines:
    """The handshake's clock, in seconds after it started."""

    signal_at_s: float | None
    """When the jobs still running get the checkpoint signal (None: no checkpoint window)."""
    requeue_at_s: float
    """When waiting for jobs ends and what is left is requeued."""
    hard_s: float
    """When everything ends, the DOWN included."""
    window_s: float
    """The checkpoint window granted: signal to requeue (shorter than asked if the grace is)."""


def deadlines(
    *, grace_s: float, margin_s: float, startup_s: float, checkpoint_window_s: float = 0.0
) -> Deadlines:
    """Split the pod's grace: wait for jobs, signal ``window`` before the requeue, keep a margin.

    The requeue comes at ``grace - margin - startup``; the DOWN must be done by
    ``grace - margin/2 - startup`` (half the margin stays free for the process to exit). The
    signal goes ``window`` before the requeue, never before the start: a grace too short for
    the whole window shortens the window (the chart refuses such settings; this keeps a hook
    run by hand safe too).
    """
    if grace_s <= 0 or margin_s < 0 or startup_s < 0 or checkpoint_window_s < 0:
        raise ValueError("grace must be positive; margin, startup and window not negative")
    hard = max(0.5, grace_s - margin_s / 2 - startup_s)
    requeue_at = min(hard, max(0.0, grace_s - margin_s - startup_s))
    if checkpoint_window_s <= 0:
        return Deadlines(signal_at_s=None, requeue_at_s=requeue_at, hard_s=hard, window_s=0.0)
    signal_at = max(0.0, requeue_at - checkpoint_window_s)
    return Deadlines(
        signal_at_s=signal_at,
        requeue_at_s=requeue_at,
        hard_s=hard,
        window_s=requeue_at - signal_at,
    )


REQUEUE_CAUSES = ("rollout", "preemption", "eviction", "taint", "deletion", "other")
"""Why a pod went, as the signal-to-requeue metric labels it (a bounded set)."""

_BY_DISRUPTION = {
    "PreemptionByScheduler": "preemption",
    "EvictionByEvictionAPI": "eviction",
    "DeletionByTaintManager": "taint",
}
"""The pod's ``DisruptionTarget`` condition reason (set by the component that ends it)."""


def requeue_cause(*, held_for: str, disruption: str | None) -> str:
    """The cause label of one checkpoint-then-requeue, one of :data:`REQUEUE_CAUSES`.

    ``held_for`` is the slonkd cause name the SLURM node was drained for when the preStop
    began (``rollout``: the coordinator drained it, then evicted the pod); ``disruption`` is
    the reason of the pod's ``DisruptionTarget`` condition, None when the pod has none (a
    plain ``DELETE``, e.g. ``kubectl delete pod``). A rollout wins over the eviction it
    ends in; any other reason Kubernetes gives (the kubelet's own, the pod GC) is ``other``.
    """
    if held_for == "rollout":
        return "rollout"
    if disruption is None:
        return "deletion"
    return _BY_DISRUPTION.get(disruption, "other")

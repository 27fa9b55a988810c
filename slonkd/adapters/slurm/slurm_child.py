"""What every SLURM library child of slonkd shares: how it is started, restarted and heard.

libslurm may end the process that loads it (``fatal()``: a slurm.conf or plugins that do not
fit, a controller name that does not resolve), so slonkd never loads it itself: a child
process does (``python -m MODULE ...``), and slonkd asks over its pipes. Two children exist:
the change poll's (:mod:`slonkd.adapters.slurm.libslurm_child`, the parent's side of
:func:`~slonkd.adapters.slurm.libslurm.child_main`) and pyslurm's
(:mod:`slonkd.adapters.slurm.pyslurm_child`, asked by
:mod:`slonkd.adapters.slurm.pyslurm_reads`). Both use from here:

- :data:`CHILD_PREFIX`: put before the child's interpreter (the harness's 24.11: another
  release's dynamic loader, set by ``slonkd_sandbox/slurm/libslurm_launch.py``);
- :func:`child_argv`: the argv of a child (argv lists only, never a shell);
- :func:`keep_last`: a child's last words (stderr's last lines), said when it dies;
- :func:`started`: a child that said ``{"ready": ...}`` within :data:`CHILD_START_S`, or the
  verdict: TerminalError when it died first, TransientError when it was only slow;
- :class:`Restarts`: a child that keeps dying is started again at waits doubling from
  :data:`RESTART_S` to :data:`RESTART_MAX_S`, so a name that does not resolve costs a process
  start every few minutes at most.
"""

from __future__ import annotations

import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import IO

from slonkd.core.errors import TerminalError, TransientError

CHILD_PREFIX: tuple[str, ...] = ()
"""Put before every child's interpreter (tests, the harness: another release's loader)."""
CHILD_START_S = 10.0
"""How long a child may take to start, import and initialise libslurm."""
RESTART_S = 2.0
"""The first wait before a child that died is started again."""
RESTART_MAX_S = 300.0
"""The longest wait between two starts of a child that keeps dying."""
LAST_WORDS = 4
"""stderr lines kept of a child (the last one is said when it dies)."""


def child_argv(module: str, args: Sequence[str], prefix: Sequence[str] | None = None) -> list[str]:
    """``[*prefix, python, -m, module, *args]``; ``prefix`` None: :data:`CHILD_PREFIX`."""
    before = CHILD_PREFIX if prefix is None else tuple(prefix)
    return [*before, sys.executable, "-m", module, *args]


def keep_last(stream: Iterable[str], said: deque[str]) -> None:
    """Append each non-blank line of ``stream`` (stripped, its last 200 characters) to ``said``."""
    for line in stream:
        if line.strip():
            said.append(line.strip()[-200:])


def spawn(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[str], deque[str]]:
    """Start ``argv`` with pipes; its stderr's last lines are kept (a daemon thread)."""
    proc = subprocess.Popen(  # noqa: S603 (our interpreter, our module, paths as arguments)
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
    )
    said: deque[str] = deque(maxlen=LAST_WORDS)
    threading.Thread(target=_keep_stderr, args=(proc.stderr, said), daemon=True).start()
    return proc, said


def _keep_stderr(stream: IO[str], said: deque[str]) -> None:
    keep_last(stream, said)


def started(
    argv: Sequence[str],
    *,
    name: str,
    start_s: float,
    env: Mapping[str, str] | None = None,
) -> tuple[subprocess.Popen[str], deque[str], str]:
    """A child that said it is ready (with that line); TerminalError when it died first.

    TransientError when it could not be started or did not say so in ``start_s`` (a busy
    node: not a verdict on the library). ``name`` starts every error's text.
    """
    try:
        proc, said = spawn(argv, env)
    except OSError as exc:
        raise TransientError(f"{name}: {exc}") from None
    if proc.stdout is None:  # Popen with PIPE: never
        raise TransientError(f"{name}: no pipes")
    ready, _, _ = select.select([proc.stdout], [], [], start_s)
    line = proc.stdout.readline() if ready else ""
    if line.startswith('{"ready"'):
        return proc, said, line
    if not ready:
        proc.kill()
        proc.wait()
        raise TransientError(f"{name}: not ready in {start_s:g} s")
    if proc.poll() is None:  # alive, but it said something else: not a child of ours
        proc.kill()
    rc = proc.wait()
    time.sleep(0.05)  # its last words, read by the stderr thread
    raise TerminalError(f"{name} exited {rc}: {said[-1] if said else ''}")


class Restarts:
    """When a child that died may be started again: waits doubling while it keeps dying.

    ``starts`` counts the starts that succeeded (the first one included): the caller adds
    one after each (:meth:`starting` comes before a start that may fail).
    """

    def __init__(self, first_s: float, max_s: float, *, starts: int = 1) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.wait_s = first_s
        self.next_start = 0.0
        self.starts = starts

    def answered(self) -> None:
        """The child answered: the next death waits the first wait again."""
        self.wait_s = self.first_s

    def died(self) -> None:
        """The child died (or was killed): no start before the current wait is over."""
        self.next_start = time.monotonic() + self.wait_s

    def due_in(self) -> float:
        """Seconds until a start is allowed (0: now)."""
        return max(0.0, self.next_start - time.monotonic())

    def starting(self) -> None:
        """A start now: should this child die too, the wait after it is twice as long."""
        self.next_start = time.monotonic() + self.wait_s
        self.wait_s = min(self.wait_s * 2, self.max_s)

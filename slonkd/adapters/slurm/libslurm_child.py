"""libslurm in a child process: what the coordinator's change poll asks through.

libslurm ends the process that calls it (``fatal()``) where its configuration does not fit
(no slurm.conf, another release's plugins) and, at any call, when the controller's name in
slurm.conf does not resolve: which is every time slurmctld's pod restarts behind a headless
Service, or DNS falters. Loaded into slonkd, that ended the coordinator (exit 40). So the
library lives in a child (``python -m slonkd.adapters.slurm.libslurm PATH CONF``, the
binding's :func:`~slonkd.adapters.slurm.libslurm.child_main`), and slonkd talks to it over
a pipe, one JSON line each way per question.

- :func:`load` starts the child; a child that dies before it says it is ready (libslurm
  would not initialise) refuses that library for good (None, logged once); one that does
  not say so in ``CHILD_START_S`` is a retry later (TransientError), not a verdict.
- A child that dies on a question is a transient error for that question (logged with its
  exit status and last words); the next question starts a new child, at waits doubling from
  ``RESTART_S`` to ``RESTART_MAX_S`` while it keeps dying, so a name that does not resolve
  costs a process start every few minutes at most.

Neighbours: :mod:`slonkd.adapters.slurm.slurm_child` (the start, last words, restart waits
and prefix it shares with pyslurm's child), :mod:`slonkd.adapters.slurm.libslurm` (the
binding, the child's side, the one question and its errors),
:mod:`slonkd.runtime.coordinating.slurm_watch` (the poll that asks).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from slonkd.adapters.slurm import slurm_child
from slonkd.adapters.slurm.libslurm import (
    LIBRARY_PATHS,
    ChangeProbe,
    LibSlurm,
    NodeTableStamp,
)
from slonkd.core.errors import SlonkdError, TerminalError, TransientError
from slonkd.core.log_events import SLURM_LIBSLURM_CHILD_EXITED

log = structlog.get_logger("slonkd.slurm")

CHILD_PREFIX: tuple[str, ...] = ()
"""This child's own prefix (tests); empty: the shared :data:`slurm_child.CHILD_PREFIX`."""
CHILD_START_S = slurm_child.CHILD_START_S
"""How long a child may take to start, import and initialise libslurm."""
RESTART_S = slurm_child.RESTART_S
RESTART_MAX_S = slurm_child.RESTART_MAX_S
_NAME = "libslurm child"


def _started(path: str, conf: str | None) -> tuple[subprocess.Popen[str], deque[str]]:
    """A child that said it is ready; TerminalError when it died first, else TransientError."""
    argv = slurm_child.child_argv(
        "slonkd.adapters.slurm.libslurm", [path, conf or ""], CHILD_PREFIX or None
    )
    proc, said, _ = slurm_child.started(argv, name=_NAME, start_s=CHILD_START_S)
    return proc, said


class ChildLibSlurm(ChangeProbe):
    """Asks through a child process that holds libslurm; starts a new one when it dies."""

    def __init__(self, path: str, conf: str | None) -> None:
        super().__init__(path)
        self._conf = conf
        self._proc, self._said = _started(path, conf)
        self._restarts = slurm_child.Restarts(RESTART_S, RESTART_MAX_S)

    @property
    def starts(self) -> int:
        """Children started so far (the first included)."""
        return self._restarts.starts

    def _ask(self, since: int) -> NodeTableStamp:
        proc = self._alive()
        if proc.stdin is None or proc.stdout is None:  # Popen with PIPE: never
            raise TransientError("libslurm child: no pipes")
        try:
            proc.stdin.write(f"{since}\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except OSError:
            line = ""
        if not line:
            raise self._died(proc)
        try:
            said: dict[str, Any] = json.loads(line)
            if "error" in said:
                detail = str(said.get("detail", ""))
                raise (
                    TerminalError(detail) if said["error"] == "terminal" else TransientError(detail)
                )
            stamp = NodeTableStamp(
                changed=bool(said["changed"]), last_update=int(said["last_update"])
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise TransientError(f"libslurm child: {line[:200]!r}: {exc}") from None
        self._restarts.answered()
        return stamp

    def _alive(self) -> subprocess.Popen[str]:
        """The child, started again when the last one died and its wait is over."""
        if self._proc.poll() is None:
            return self._proc
        wait = self._restarts.due_in()
        if wait > 0:
            raise TransientError(
                f"libslurm child exited {self._proc.returncode}: next start in {wait:.0f} s"
            )
        self._restarts.starting()
        try:
            self._proc, self._said = _started(self.path, self._conf)
        except SlonkdError as exc:
            raise TransientError(str(exc)) from None
        self._restarts.starts += 1
        return self._proc

    def _died(self, proc: subprocess.Popen[str]) -> TransientError:
        rc = proc.wait()
        time.sleep(0.05)  # its last words, read by the stderr thread
        last = self._said[-1] if self._said else ""
        log.warning(SLURM_LIBSLURM_CHILD_EXITED, rc=rc, said=last, restart_s=self._restarts.wait_s)
        self._restarts.died()
        return TransientError(f"libslurm child exited {rc}: {last}")

    def close(self) -> None:
        """End the child (its stdin closed; it exits when its question, if any, returns)."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=CHILD_START_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


_failed_once: set[str] = set()


def load(
    path: str | None = None,
    *,
    conf: str | None = None,
    opener: Callable[[str], Any] | None = None,
) -> ChangeProbe | None:
    """The installed libslurm in a child, or None (logged once per reason) when it cannot be.

    ``conf``: slurm.conf's path (None: ``SLURM_CONF`` from the environment, else the
    compiled-in default). Raises TransientError when no candidate loaded and one's child
    only failed to start in time (a busy node): try again later. ``opener`` (unit tests)
    binds the library in this process instead.
    """
    candidates = [path] if path else _candidates()
    errors: list[str] = []
    unsure: list[str] = []
    for candidate in candidates:
        try:
            if opener is not None:
                return LibSlurm(opener(candidate), candidate, conf)
            return ChildLibSlurm(candidate, conf)
        except TransientError as exc:
            unsure.append(f"{candidate}: {exc}"[:300])
        except (OSError, AttributeError, TerminalError) as exc:
            errors.append(f"{candidate}: {exc}"[:300])
    if unsure:
        raise TransientError("; ".join(unsure))
    key = ";".join(errors)
    if key not in _failed_once:
        _failed_once.add(key)
        log.info("slurm.libslurm_unavailable", tried=errors or ["none found"])
    return None


def _candidates() -> list[str]:
    """The library paths to try: SLURM_LIBRARY, then the installed files of LIBRARY_PATHS."""
    env = os.environ.get("SLURM_LIBRARY")
    if env:
        return [env]
    return [p for p in LIBRARY_PATHS if not p.startswith("/") or Path(p).exists()]

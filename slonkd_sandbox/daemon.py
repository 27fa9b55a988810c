"""One slonkd process under test: started until a log event, read by event, stopped with a dump.

A :class:`Daemon` runs ``python -m slonkd.cli.main <role>`` with the environment it is
given, its stdout and stderr appended to a JSON log file (restarts append to the same file).
:meth:`Daemon.start` returns once a named log event (one of :mod:`slonkd.core.log_events`)
appears anew; :meth:`Daemon.events` reads the log's lines of one event. :meth:`Daemon.stop`
sends SIGTERM and, when the process does not exit within its grace, asks it for its asyncio
tasks (SIGUSR1, printed to the log) before it SIGKILLs it: a stuck daemon leaves its reason.

:class:`Coordinators` starts ``slonkd coordinator`` candidates for one test (the fixture
factory of the e2e tests) and stops them all, failing when one ignored SIGTERM.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from slonkd.core.log_events import COORDINATOR_SYNCED
from slonkd_sandbox.chart.logs import json_lines
from slonkd_sandbox.procs import HarnessError, spawn, tail, wait_for

STOP_GRACE_S = 15.0
"""How long a daemon has to exit after SIGTERM before it is dumped and killed."""

DUMP_S = 1.0
"""How long a stuck daemon has to print its tasks (SIGUSR1) before SIGKILL."""

STARTS: deque[tuple[int, Daemon]] = deque(maxlen=256)
"""This process's latest daemon starts, numbered in order (a failed test's report shows
their logs: ``tests/failure_logs.py``)."""
_starts = itertools.count(1)


def read_json_log(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a slonkd log file (other lines, e.g. tracebacks, are skipped)."""
    return json_lines(path.read_text(errors="replace")) if path.exists() else []


@dataclass(slots=True, kw_only=True)
class Daemon:
    """One ``slonkd <role>`` process and its JSON log (kept across restarts)."""

    role: str
    env: dict[str, str]
    log: Path
    args: Sequence[str] = ()
    """Arguments after the role."""
    python_args: Sequence[str] = ()
    """Arguments to the interpreter before ``-m slonkd.cli.main`` (e.g. cProfile's)."""
    prefix: Sequence[str] = ()
    """What runs the interpreter (e.g. another release's loader:
    :meth:`~slonkd_sandbox.slurm.chroot.ChrootSlurmCluster.libslurm_argv`)."""
    module: str = "slonkd.cli.main"
    """The module run (:mod:`slonkd_sandbox.slurm.libslurm_launch` with such a prefix)."""
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def argv(self) -> list[str]:
        """The command line the daemon runs."""
        return [
            *self.prefix, sys.executable, *self.python_args, "-m", self.module, self.role,
            *self.args,
        ]  # fmt: skip

    @property
    def pid(self) -> int:
        """The running process's id."""
        if self.proc is None:
            raise HarnessError(f"slonkd {self.role}: not started")
        return self.proc.pid

    @property
    def running(self) -> bool:
        """Started and not exited."""
        return self.proc is not None and self.proc.poll() is None

    def start(self, *, until: str | None = None, timeout_s: float = 30.0) -> Daemon:
        """Start the process; with ``until``, return once that event is logged anew.

        Events already in the log (of an earlier run) do not count; an exit meanwhile fails
        at once with the log's tail.
        """
        if self.running:
            raise HarnessError(f"slonkd {self.role}: already running as {self.pid}")
        seen = len(self.events(until)) if until is not None else 0
        self.proc = spawn(self.argv, log=self.log, env=self.env)
        STARTS.append((next(_starts), self))
        if until is not None:
            self.wait(until, count=seen + 1, timeout_s=timeout_s)
        return self

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The log's JSON lines, or only those of event ``name``."""
        lines = read_json_log(self.log)
        return lines if name is None else [e for e in lines if e.get("event") == name]

    def wait(self, name: str, *, count: int = 1, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait until event ``name`` is logged ``count`` times (all runs); return that line."""
        wait_for(
            f"slonkd {self.role}: {name} x{count}",
            lambda: len(self.events(name)) >= count,
            timeout_s=timeout_s,
            alive=self.exited,
        )
        return self.events(name)[count - 1]

    def exited(self) -> str | None:
        """None while running; else the exit status and the log's tail (for ``wait_for``)."""
        if self.proc is None:
            return "not started"
        if self.proc.poll() is None:
            return None
        return f"exited with {self.proc.returncode}; log tail:\n{tail(self.log)}"

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the running process (SIGUSR1: its asyncio tasks, to its log)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap it (a crash, for failover tests)."""
        if self.proc is not None:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, *, grace_s: float = STOP_GRACE_S, dump_s: float = DUMP_S) -> bool:
        """SIGTERM; past ``grace_s`` the task dump (SIGUSR1), then SIGKILL. Always reaps.

        True when the process exited by itself within the grace (or had already exited).
        """
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return True
        self.signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=dump_s)  # the dump's default action would end it too
            if proc.poll() is None:
                self.kill()
            return False
        return True


def coordinator_env(
    *, namespace: str, kubeconfig: Path, slurm_conf: Path, **extra: str
) -> dict[str, str]:
    """The test process's environment plus what the chart gives a coordinator pod."""
    return {
        **os.environ,
        "POD_NAMESPACE": namespace,
        "POD_NAME": "coordinator-0",
        "KUBECONFIG": str(kubeconfig),
        "SLURM_CONF": str(slurm_conf),
        **extra,
    }


def loopback_api(config: Mapping[str, Any]) -> dict[str, Any]:
    """A test coordinator's settings with its API on a free loopback port unless they name one.

    The product's default is 0.0.0.0:8081; two coordinators of tests in parallel workers
    would both ask for it ("address already in use"), so a harness coordinator gets
    127.0.0.1:0 (the port it got is logged as ``coordinator.api_listening``).
    """
    section = config.get("coordinator")
    if isinstance(section, Mapping):  # the configuration tree: the coordinator's section
        return {**config, "coordinator": loopback_api(section)}
    if "api_port" in config:
        return dict(config)
    return {"api_host": "127.0.0.1", **config, "api_port": 0}


@dataclass(slots=True, kw_only=True)
class Coordinators:
    """The ``slonkd coordinator`` candidates of one test; a context manager that stops them.

    Each candidate logs to ``root/<identity>.log`` unless told otherwise; a configuration
    given as a mapping is written to ``root/<identity>.json``.
    """

    root: Path
    python_args: Sequence[str] = ()
    """Arguments to each candidate's interpreter (e.g. cProfile's, for a benchmark)."""
    grace_s: float = STOP_GRACE_S
    """How long :meth:`stop` gives each candidate after SIGTERM."""
    started: list[Daemon] = field(default_factory=list)

    def start(
        self,
        env: Mapping[str, str],
        *,
        identity: str = "coordinator-0",
        config: Mapping[str, Any] | Path | None = None,
        log: Path | None = None,
        until: str | None = COORDINATOR_SYNCED,
        timeout_s: float = 30.0,
        prefix: Sequence[str] = (),
        module: str = "slonkd.cli.main",
    ) -> Daemon:
        """Start a candidate as pod ``identity``; return once it logs ``until`` anew.

        ``prefix``: what runs its interpreter (e.g. a mount namespace with its own files);
        ``module``: what it runs (:mod:`slonkd_sandbox.slurm.libslurm_launch` with another
        release's loader as ``prefix``).
        """
        full = {**env, "POD_NAME": identity}
        if isinstance(config, Path):
            full["SLONKD_CONFIG"] = str(config)
        elif config is not None:
            path = self.root / f"{identity}.json"
            path.write_text(json.dumps(loopback_api(config)))
            full["SLONKD_CONFIG"] = str(path)
        if "SLONKD_CONFIG" in full:
            full["SLONKD_CONFIG"] = str(
                self._with_loopback_api(Path(full["SLONKD_CONFIG"]), identity)
            )
        daemon = Daemon(
            role="coordinator",
            env=full,
            log=log or self.root / f"{identity}.log",
            python_args=self.python_args,
            prefix=prefix,
            module=module,
        )
        self.started.append(daemon)
        return daemon.start(until=until, timeout_s=timeout_s)

    def _with_loopback_api(self, config: Path, identity: str) -> Path:
        """``config`` with :func:`loopback_api`'s defaults written into it where it has none.

        In place, not a copy: a test that rewrites its file and restarts the daemon (the same
        environment) must be read again. A file that is not a JSON object is the test's own
        business and is left as it is.
        """
        del identity  # the same file for every candidate that names it
        try:
            data = json.loads(config.read_text())
        except (OSError, ValueError):
            return config
        if isinstance(data, dict) and loopback_api(data) != data:
            config.write_text(json.dumps(loopback_api(data)))
        return config

    def __getitem__(self, index: int) -> Daemon:
        return self.started[index]

    def stop(self) -> None:
        """Stop every candidate (newest first); fail when one ignored SIGTERM (with its log)."""
        stuck = [d for d in reversed(self.started) if not d.stop(grace_s=self.grace_s)]
        if stuck:
            logs = "\n".join(f"--- {d.log}\n{tail(d.log, 6000)}" for d in stuck)
            raise HarnessError(
                f"coordinators {[d.env['POD_NAME'] for d in stuck]} ignored SIGTERM"
                f" for {self.grace_s:g} s:\n{logs}"
            )

    def __enter__(self) -> Coordinators:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

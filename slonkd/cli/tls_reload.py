"""``slonkd tls-reload``: signal a process of the pod when its certificate and key change.

The broker pod's sidecar (the chart's mosquitto Deployment with ``tls.enabled``; the pod
shares its process namespace, so this container sees mosquitto). mosquitto loads its
certificate and key again on SIGHUP, keeping every connection, but nothing tells it that a
rotated Secret has changed them on disk: this command does. Every ``--period`` seconds it
takes the stamp of ``--cert`` and ``--key`` (symlinks resolved,
:func:`slonkd.runtime.kit.tls_files.stamp`); when it changed and the new pair loads, it sends
``--signal`` (HUP) to every process named ``--process-name`` (``/proc/PID/comm``, or the base
name of its ``argv[0]``), never to itself. A pair that does not load (half written, a key
that is not the certificate's) is not handed to the broker, which would lose its listener's
certificate: one ``tls.reload_failed`` warning, and the next change is looked at. mosquitto
does not reload a ``cafile`` on SIGHUP; the chart sets none (no client certificates).

Nothing runs through a shell. Exit codes: 2 bad flags (one line on stderr), 0 on SIGTERM.

Neighbours: :mod:`slonkd.runtime.kit.tls_files` (the stamp, the pair's trial load),
:mod:`slonkd.cli.main` (dispatch), ``deploy/helm/slonk/templates/mosquitto.yaml`` (the sidecar).
"""

from __future__ import annotations

import argparse
import os
import signal
import ssl
import sys
import time
from pathlib import Path
from types import FrameType

import structlog

from slonkd.cli.refusal import EXIT_BAD_SETTINGS
from slonkd.core.log_events import TLS_RELOAD_FAILED, TLS_SIGNALLED
from slonkd.runtime.kit.tls_files import RELOAD_PERIOD_S, fingerprint, load_pair, server_context
from slonkd.runtime.kit.tls_files import stamp as stamp_of

log = structlog.get_logger("slonkd.tls_reload")

COMM_LEN = 15
"""The kernel keeps this many characters of a process's name in ``/proc/PID/comm``."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tls-reload``."""
    parser = sub.add_parser(
        "tls-reload", help="signal a process when its TLS certificate and key change"
    )
    parser.add_argument("--cert", required=True, help="the certificate (chain) file, PEM")
    parser.add_argument("--key", required=True, help="its private key file, PEM")
    parser.add_argument("--process-name", required=True, help="whom to signal, e.g. mosquitto")
    parser.add_argument("--signal", default="HUP", help="which signal (%(default)s)")
    parser.add_argument(
        "--period", type=float, default=RELOAD_PERIOD_S, help="seconds between looks (%(default)s)"
    )


class Watcher:
    """The files' last stamp, and the signal for the named processes when it changes."""

    def __init__(self, cert: str, key: str, name: str, signum: signal.Signals) -> None:
        self.cert, self.key, self.name, self.signum = cert, key, name, signum
        self._seen = stamp_of((cert, key))

    def check(self, proc: Path = Path("/proc")) -> list[int]:
        """One look: the processes signalled (none when nothing changed or the pair is bad)."""
        now = stamp_of((self.cert, self.key))
        if now is None or now == self._seen:
            return []
        self._seen = now
        try:
            cert = Path(self.cert).read_bytes()
            load_pair(server_context(), cert, Path(self.key).read_bytes())
        except (OSError, ssl.SSLError) as exc:
            log.warning(TLS_RELOAD_FAILED, cert_file=self.cert, error=str(exc)[:200])
            return []
        signalled = []
        for pid in named(self.name, proc):
            try:
                os.kill(pid, self.signum)
            except OSError as exc:  # gone meanwhile, or not ours to signal
                log.warning(TLS_SIGNALLED, pid=pid, error=exc.strerror)
                continue
            signalled.append(pid)
        said = log.info if signalled else log.warning  # none: it loads the files when it starts
        said(
            TLS_SIGNALLED, process=self.name, pids=signalled, signal=self.signum.name,
            sha256=fingerprint(cert),
        )  # fmt: skip
        return signalled


def named(name: str, proc: Path = Path("/proc")) -> list[int]:
    """The processes called ``name`` (by ``comm``, or ``argv[0]``'s base name), not this one."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            comm = (entry / "comm").read_text().rstrip("\n")
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:  # ended meanwhile
            continue
        if (comm == name and len(name) <= COMM_LEN) or os.path.basename(argv0) == name.encode():
            found.append(int(entry.name))
    return sorted(found)


def _watcher(args: argparse.Namespace) -> tuple[Watcher, float] | str:
    """The watcher the flags describe and its period, or the line naming the wrong flag."""
    signum = getattr(signal.Signals, f"SIG{str(args.signal).upper().removeprefix('SIG')}", None)
    if not isinstance(signum, signal.Signals):
        return f"--signal {args.signal}: no such signal"
    if not 0 < args.period <= 3600:
        return f"--period {args.period}: give 0 to 3600 seconds"
    name = str(args.process_name)
    if not name or "/" in name or "\0" in name:
        return f"--process-name {name!r}: a process name, no path"
    return Watcher(args.cert, args.key, name, signum), float(args.period)


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd tls-reload`` until SIGTERM."""
    made = _watcher(args)
    if isinstance(made, str):  # a wrong flag: one line, before anything is watched
        print(f"slonkd tls-reload: {made}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    watcher, period = made

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    log.info(
        "tls_reload.watching", cert_file=watcher.cert, key_file=watcher.key,
        process=watcher.name, signal=watcher.signum.name, period_s=period,
    )  # fmt: skip
    while True:
        time.sleep(period)
        watcher.check()

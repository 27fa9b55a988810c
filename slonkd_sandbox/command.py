"""``slonkd sandbox``: the local sandbox cluster (real SLURM, mosquitto, Kubernetes, slonkd).

- ``slonkd sandbox up``: build what is missing, start everything detached, print where to look;
- ``slonkd sandbox demo``: play a short script against it and check every step;
- ``slonkd sandbox down``: stop everything ``up`` started, and nothing else;
- ``slonkd sandbox run`` (or plain ``slonkd sandbox``): the same services in the foreground,
  until Ctrl-C or ``--hold`` seconds.

``--real`` (on ``up`` and ``run``): instead of slonkd's processes next to a kubelet
stand-in, the Helm chart installed on a real kubelet node (containerd, runc, CoreDNS; root
needed; the images ``container/build.sh`` makes, cached by content). ``demo`` and ``down``
read the mode from the sandbox's ``state.json``.

Every subcommand takes ``--dir`` (default ``$SLONKD_SANDBOX_DIR`` or ``/tmp/slonkd-sandbox``).
"""

# How ``slonkd`` gets this command: the harness distribution declares this module in the entry
# point group ``slonkd.commands`` (slonkd_sandbox/pyproject.toml), which :mod:`slonkd.cli.commands`
# reads; ``python -m slonkd_sandbox ARGS`` is ``slonkd sandbox ARGS`` without it. The rest of
# the harness is imported only when an action runs: every ``slonkd`` start in a tree with the
# harness installed loads this module. Neighbours: :mod:`slonkd_sandbox.sandbox.run` (run),
# :mod:`slonkd_sandbox.sandbox.ctl` (up, down), :mod:`slonkd_sandbox.sandbox.demo` (demo),
# :mod:`slonkd_sandbox.sandbox.real` (``--real``).

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

DEFAULT_DIR = Path(
    os.environ.get("SLONKD_SANDBOX_DIR", Path(tempfile.gettempdir()) / "slonkd-sandbox")
)


def _common(parser: argparse.ArgumentParser, *, workers: bool) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIR,
        help="where every service keeps its files (default: %(default)s)",
    )
    if workers:
        parser.add_argument("--workers", type=int, default=4, help="worker pods / SLURM nodes")
        parser.add_argument(
            "--accounting",
            action="store_true",
            help="also run slurmdbd with a MariaDB (sacct works; about 10 s more to start)",
        )
        parser.add_argument(
            "--real",
            action="store_true",
            help="the Helm chart on a real kubelet node (root; images built by container/build.sh)",
        )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sandbox`` and its subcommands on the ``slonkd`` parser."""
    sandbox = sub.add_parser(
        "sandbox",
        help="a local sandbox cluster: real SLURM, mosquitto, Kubernetes (kwok), slonkd",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(sandbox)


def configure(sandbox: argparse.ArgumentParser) -> None:
    """Give ``sandbox``'s parser its options and actions."""
    _common(sandbox, workers=True)
    sandbox.add_argument(
        "--hold", type=float, default=0.0, metavar="SECONDS", help="foreground: stop after this"
    )
    actions = sandbox.add_subparsers(dest="sandbox_command", metavar="ACTION")
    up = actions.add_parser("up", help="start the sandbox detached and print where to look")
    _common(up, workers=True)
    demo = actions.add_parser("demo", help="play and check a short script against the sandbox")
    _common(demo, workers=False)
    down = actions.add_parser("down", help="stop everything `up` started")
    _common(down, workers=False)
    run = actions.add_parser("run", help="run the sandbox in the foreground (Ctrl-C stops it)")
    _common(run, workers=True)
    run.add_argument("--hold", type=float, default=0.0, metavar="SECONDS")
    run.add_argument("--keep-dir", action="store_true", help=argparse.SUPPRESS)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the chosen ``sandbox`` action."""
    action = args.sandbox_command or "run"
    if action in ("up", "run") and args.workers < 1:
        parser.error("--workers must be at least 1")
    if action in ("up", "run") and args.real and args.accounting:
        parser.error("--accounting is for the process mode (the chart's is accounting.enabled)")
    root = Path(args.dir).absolute()
    if action == "up":
        from slonkd_sandbox.sandbox.ctl import up

        return up(root, workers=args.workers, real=args.real, accounting=args.accounting)
    if action == "down":
        from slonkd_sandbox.sandbox.ctl import down

        return down(root)
    if action == "demo":
        from slonkd_sandbox.sandbox.play import run_demo

        return run_demo(root)
    keep = bool(getattr(args, "keep_dir", False))
    if args.real:
        from slonkd_sandbox.sandbox.real import run_real

        return run_real(root, workers=args.workers, hold_s=args.hold, fresh_dir=not keep)
    from slonkd_sandbox.sandbox.run import run_sandbox

    return run_sandbox(
        root,
        workers=args.workers,
        hold_s=args.hold,
        fresh_dir=not keep,
        accounting=args.accounting,
    )

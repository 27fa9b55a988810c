"""The ``slonkd`` command: parses arguments and hands over to one subcommand.

Subcommands: ``sandbox``, ``agent``, ``prestop``, ``check``, ``coordinator``, and the
operator's ``status``, ``explain``, ``pause``, ``unpause``, ``budget reset`` and ``recheck``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from slonkd import __version__
from slonkd.cli import agent, check, coordinator, ops, prestop, recheck
from slonkd.runtime.logging import configure_logging


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slonkd",
        description="Keeps SLURM and Kubernetes in agreement on every node of a GPU cluster.",
    )
    parser.add_argument("--version", action="version", version=f"slonkd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sandbox = sub.add_parser(
        "sandbox",
        help="run a local sandbox cluster with real SLURM, mosquitto and Kubernetes",
        description="Bring up real SLURM, mosquitto and a Kubernetes control plane with "
        "kwok nodes on loopback, with a worker StatefulSet bound to slurmd, and hold.",
    )
    sandbox.add_argument(
        "--dir",
        type=Path,
        default=Path(
            os.environ.get("SLONKD_SANDBOX_DIR", Path(tempfile.gettempdir()) / "slonkd-sandbox")
        ),
        help="where every service keeps its files (default: %(default)s)",
    )
    sandbox.add_argument("--workers", type=int, default=4, help="worker pods / SLURM nodes")
    sandbox.add_argument(
        "--hold",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="tear down after this long (default: hold until Ctrl-C)",
    )
    agent.add_parser(sub)
    check.add_parser(sub)
    coordinator.add_parser(sub)
    prestop.add_parser(sub)
    ops.add_parsers(sub)
    recheck.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``slonkd`` command line; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "sandbox":
        if args.workers < 1:
            parser.error("--workers must be at least 1")
        from slonkd.testing.sandbox import run_sandbox

        return run_sandbox(args.dir, workers=args.workers, hold_s=args.hold)
    if args.command == "check":
        configure_logging()
        return check.main(args)
    if args.command == "agent":
        configure_logging()
        return agent.main(args)
    if args.command == "coordinator":
        configure_logging()
        return coordinator.main(args)
    if args.command == "prestop":
        configure_logging()
        return prestop.main(args)
    if args.command == "status":
        return ops.status(args)
    if args.command == "explain":
        return ops.explain_node(args)
    if args.command in ("pause", "unpause"):
        return ops.operator(args, str(args.command))
    if args.command == "budget":
        return ops.operator(args, "budget reset")
    if args.command == "recheck":
        return recheck.main(args)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``slonkd`` command: parses arguments and hands over to one subcommand.

Subcommands: ``agent``, ``prestop``, ``check``, ``coordinator``, and the operator's ``status``,
``explain``, ``pause``, ``unpause``, ``budget reset``, ``state reset`` and ``recheck``; those
other distributions add (``sandbox``, from the harness) come through :mod:`slonkd.cli.commands`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from slonkd import __version__
from slonkd.cli import agent, check, commands, config_cmd, coordinator, ops, prestop, recheck
from slonkd.runtime.logging import configure_logging


def _parser() -> tuple[argparse.ArgumentParser, dict[str, commands.Command]]:
    parser = argparse.ArgumentParser(
        prog="slonkd",
        description="Keeps SLURM and Kubernetes in agreement on every node of a GPU cluster.",
    )
    parser.add_argument("--version", action="version", version=f"slonkd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    added = commands.add_parsers(sub)
    agent.add_parser(sub)
    check.add_parser(sub)
    coordinator.add_parser(sub)
    config_cmd.add_parser(sub)
    prestop.add_parser(sub)
    ops.add_parsers(sub)
    recheck.add_parser(sub)
    return parser, added


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``slonkd`` command line; returns the process exit code."""
    parser, added = _parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command in commands.DOCUMENTED and args.command not in added:
        return commands.absent(args.command)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command in added:
        return added[args.command].main(args, parser)
    if args.command == "check":
        configure_logging()
        return check.main(args)
    if args.command == "agent":
        configure_logging()
        return agent.main(args)
    if args.command == "coordinator":
        configure_logging()
        return coordinator.main(args)
    if args.command == "config":
        return config_cmd.main(args)
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
    if args.command == "state":
        return ops.operator(args, "state reset")
    if args.command == "recheck":
        return recheck.main(args)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

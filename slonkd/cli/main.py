"""The ``slonkd`` command: parses arguments and hands over to one subcommand.

Subcommands: ``agent``, ``prestop``, ``check``, ``coordinator``, and the operator's ``status``,
``explain``, ``pause``, ``unpause``, ``mode``, ``budget reset``, ``state reset``, ``recheck`` and
``return``, the chart Job's ``secrets ensure`` and the broker pod's ``tls-reload``; those
other distributions add (``sandbox``, from the harness) come through
:mod:`slonkd.cli.commands`.

Only the named subcommand's module is imported (:data:`MODULES`): ``slonkd check``, which
the kubelet and operators run often, does not pay for the agent's bus and HTTP clients
(aiohttp alone was about a fifth of its run). ``slonkd --help``, no command, an unknown
one and the other distributions' commands build the whole parser.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from slonkd import __version__
from slonkd.cli import commands
from slonkd.runtime.kit.logging import configure_logging

MODULES: dict[str, str] = {
    "agent": "agent",
    "check": "check",
    "coordinator": "coordinator",
    "config": "config_cmd",
    "prestop": "prestop",
    **dict.fromkeys(("status", "explain", "pause", "unpause", "budget", "state"), "ops"),
    "mode": "mode",
    "recheck": "recheck",
    "return": "quarantine",
    "secrets": "secrets_cmd",
    "tls-reload": "tls_reload",
}
"""Each built-in subcommand's module under ``slonkd.cli``, in the help's order."""

LOGGING = frozenset({"agent", "check", "coordinator", "prestop", "tls-reload"})
"""The daemons and checks, which log as JSON lines from the start."""


def _named(argv: Sequence[str]) -> str | None:
    """The built-in subcommand ``argv`` names, or None (help, version, none, another's)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is None or first not in MODULES or argv[0].startswith("-"):
        return None
    return first


def _parser(named: str | None) -> tuple[argparse.ArgumentParser, dict[str, commands.Command]]:
    """The parser for ``named`` alone, or for every subcommand when None."""
    parser = argparse.ArgumentParser(
        prog="slonkd",
        description="Keeps SLURM and Kubernetes in agreement on every node of a GPU cluster.",
    )
    parser.add_argument("--version", action="version", version=f"slonkd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    added = commands.add_parsers(sub) if named is None else {}
    wanted = [MODULES[named]] if named is not None else list(dict.fromkeys(MODULES.values()))
    for name in wanted:
        module = importlib.import_module(f"slonkd.cli.{name}")
        (getattr(module, "add_parsers", None) or module.add_parser)(sub)  # ops adds several
    return parser, added


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``slonkd`` command line; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, added = _parser(_named(argv))
    args, unknown = parser.parse_known_args(argv)
    if args.command in commands.DOCUMENTED and args.command not in added:
        return commands.absent(args.command)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command in added:
        return added[args.command].main(args, parser)
    if args.command not in MODULES:
        parser.print_help(sys.stderr)
        return 2
    if args.command in LOGGING:
        configure_logging()
    return _run(str(args.command), args)


def _run(command: str, args: argparse.Namespace) -> int:
    """Hand ``args`` to the subcommand (its module imported here, see :data:`MODULES`)."""
    module = importlib.import_module(f"slonkd.cli.{MODULES[command]}")
    if command == "status":
        return int(module.status(args))
    if command == "explain":
        return int(module.explain_node(args))
    if command in ("pause", "unpause"):
        return int(module.operator(args, command))
    if command in ("budget", "state"):
        return int(module.operator(args, f"{command} reset"))
    return int(module.main(args))


if __name__ == "__main__":
    raise SystemExit(main())

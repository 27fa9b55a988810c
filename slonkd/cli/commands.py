"""Subcommands other distributions add to ``slonkd``: the entry point group ``slonkd.commands``.

A distribution declares ``NAME = "package.module"`` in the group; the module has
``add_parser(sub)`` (registers ``NAME`` and its options on the ``slonkd`` parser) and
``main(args, parser) -> int``. The product names no such module: the harness distribution
``slonkd-sandbox`` (``slonkd_sandbox/`` in the repository, never in the product's wheel or
images) adds ``sandbox`` this way, so ``slonkd sandbox`` works wherever it is installed.

Two places declare commands: the installed distributions' metadata, and, when ``slonkd`` runs
from a source checkout, the ``pyproject.toml`` of the checkout's own distributions next to
``slonkd/`` (a virtualenv made before a distribution existed, or ``python -m slonkd.cli.main``
from the repository root); installed ones win. A declared module that does not import is not
there. ``sandbox`` is named in the README, so without it ``slonkd sandbox`` still parses and
says in one line what is missing, exit 2 (:func:`absent`).

Neighbours: :mod:`slonkd.cli.main` (builds the parser with :func:`add_parsers`, dispatches),
``slonkd_sandbox.command`` (the ``sandbox`` command, in the harness).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Protocol, cast

GROUP = "slonkd.commands"

# Commands the README documents that a distribution other than slonkd provides: what each is,
# and where it comes from.
DOCUMENTED = {
    "sandbox": (
        "a local sandbox cluster",
        "the harness distribution slonkd-sandbox: scripts/bootstrap, or pip install -e "
        "./slonkd_sandbox in a checkout; never in slonkd's images",
    ),
}


class Command(Protocol):
    """What a module named in the group provides."""

    def add_parser(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Register the command and its options."""

    def main(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Run the parsed command; the process exit code."""


def checkout_entry_points(package_dir: Path) -> list[EntryPoint]:
    """The group's entry points that the distributions of ``package_dir``'s checkout declare.

    ``package_dir`` is ``slonkd/``; its parent is a checkout when it holds slonkd's own
    ``pyproject.toml``. An installed ``slonkd`` (site-packages) has none: an empty list.
    """
    root = package_dir.parent
    try:
        own = tomllib.loads((root / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return []
    if own.get("project", {}).get("name") != "slonkd":
        return []
    found: list[EntryPoint] = []
    for path in sorted(root.glob("*/pyproject.toml")):
        try:
            project = tomllib.loads(path.read_text()).get("project", {})
        except (OSError, tomllib.TOMLDecodeError):
            continue
        declared = project.get("entry-points", {}).get(GROUP, {})
        found.extend(EntryPoint(name, value, GROUP) for name, value in declared.items())
    return found


def discover(package_dir: Path | None = None) -> dict[str, EntryPoint]:
    """Every declared command by name: the checkout's, overridden by the installed ones."""
    here = package_dir if package_dir is not None else Path(__file__).resolve().parents[1]
    found = {ep.name: ep for ep in checkout_entry_points(here)}
    found.update({ep.name: ep for ep in entry_points(group=GROUP)})
    return found


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    declared: dict[str, EntryPoint] | None = None,
) -> dict[str, Command]:
    """Register every command that loads; a documented one that does not gets a stand-in.

    The stand-in takes any arguments (``slonkd sandbox up --help`` too) so that
    :func:`absent` answers instead of argparse's usage error.
    """
    loaded: dict[str, Command] = {}
    for name, ep in sorted((discover() if declared is None else declared).items()):
        try:
            module = cast(Command, ep.load())
        except ImportError:
            continue
        module.add_parser(sub)
        loaded[name] = module
    for name, (what, _) in DOCUMENTED.items():
        if name not in loaded:
            sub.add_parser(name, help=f"{what} (not installed here)", add_help=False)
    return loaded


def absent(name: str) -> int:
    """Say in one line that ``name`` is not installed here; exit code 2."""
    what, source = DOCUMENTED[name]
    print(f"slonkd {name}: {what}, not installed here ({source})", file=sys.stderr)
    return 2

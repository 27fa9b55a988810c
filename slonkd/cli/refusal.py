"""A command's settings, or the one line on stderr that refuses them and exit code 2.

``slonkd agent`` and ``slonkd coordinator`` (:mod:`slonkd.cli.agent`,
:mod:`slonkd.cli.coordinator`: settings from the environment) and ``slonkd check`` and
``slonkd prestop`` (:mod:`slonkd.cli.check`, :mod:`slonkd.cli.prestop`: settings from flags)
build their settings before they start anything; the ValueError that refuses them is printed
as ``slonkd COMMAND: reason`` and the command exits with :data:`EXIT_BAD_SETTINGS`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

EXIT_BAD_SETTINGS = 2
"""The exit code of a command whose settings were refused."""

T = TypeVar("T")


def settings_or_refusal(command: str, build: Callable[[], T]) -> T | None:
    """``build()``; on its ValueError, ``slonkd COMMAND: reason`` on stderr and None."""
    try:
        return build()
    except ValueError as exc:
        print(f"slonkd {command}: {exc}", file=sys.stderr)
        return None

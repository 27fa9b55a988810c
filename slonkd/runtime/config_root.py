"""The one configuration tree: a section per role, ``agent``, ``coordinator`` and ``prestop``.

One file (``SLONKD_CONFIG``, the chart's one ConfigMap) serves every role: each builds only
its own section (:mod:`slonkd.cli.config` puts it together from the file and the
environment), and a file holding only that section is as good. A section *is* the role's
settings class (its fields are the keys, :mod:`slonkd.core.config_tree`):
:class:`~slonkd.runtime.agent.sidecar.AgentSettings`,
:class:`~slonkd.runtime.coordinating.settings.CoordinatorSettings` and
:class:`~slonkd.runtime.prestop.PrestopSettings`. ``slonkd config schema`` describes the
whole tree (:mod:`slonkd.cli.config_cmd`).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from typing import Any

from slonkd.runtime.agent.settings import AgentSettings
from slonkd.runtime.coordinating.settings import CoordinatorSettings
from slonkd.runtime.prestop import PrestopSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class SlonkdConfig:
    """Every role's settings in one tree (each role reads its own section)."""

    agent: AgentSettings | None = None
    """``slonkd agent``: the sidecar of every slurmd pod."""
    coordinator: CoordinatorSettings | None = None
    """``slonkd coordinator``: the leader-elected reconciler of every worker node."""
    prestop: PrestopSettings | None = None
    """``slonkd prestop``: the slurmd container's preStop hook (its flags win over these)."""


ROLES: tuple[str, ...] = tuple(f.name for f in fields(SlonkdConfig))
"""The sections of the tree, one per role, in the order the schema lists them."""


def section_class(role: str) -> type[Any]:
    """The settings class of the section ``role``."""
    hint = typing.get_type_hints(SlonkdConfig)[role]
    (cls,) = (a for a in typing.get_args(hint) if a is not type(None))
    return typing.cast(type[Any], cls)


__all__ = ["ROLES", "SlonkdConfig", "section_class"]

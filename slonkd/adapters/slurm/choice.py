"""The choice of SLURM backend at a role's start: ``slurm_backend: auto | pyslurm | scontrol``.

:func:`select_backend` returns the backend a role uses for its life (:class:`BackendChoice`:
the backend, its name, the SLURM release it talks to, and why), logged once at start
(``slurm.backend_chosen``) and shown by ``slonkd status``:

- ``scontrol``: SLURM's clients (:class:`~slonkd.adapters.slurm.scontrol.ScontrolBackend`);
  no pyslurm child is started.
- ``pyslurm``: pyslurm in a child process (:class:`~slonkd.adapters.slurm.pyslurm_writes.
  PyslurmBackend`), or the start fails with one line saying why (pyslurm not installed, its
  child cannot start, slurmctld not reached, another release): never a silent fallback.
- ``auto``: pyslurm where it is installed (at ``pyslurm_path`` or on this interpreter's path),
  its child starts, and its major.minor is the running slurmctld's (asked through the child:
  pyslurm writes 22.05 as ``22.5.x``); else scontrol, with the reason.

pyslurm is never imported here: ``import pyslurm`` runs ``slurm_init``, which ends the process
that calls it when no configuration is found (its version comes from the installed
distribution's metadata). Neighbours: :mod:`slonkd.adapters.slurm.backend` (the port).
"""

from __future__ import annotations

import importlib.metadata
from enum import StrEnum
from typing import NamedTuple

import structlog

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.pyslurm_writes import PyslurmBackend
from slonkd.adapters.slurm.runner import CommandRunner, SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.errors import SlonkdError, TerminalError
from slonkd.core.log_events import SLURM_BACKEND_CHOSEN

log = structlog.get_logger("slonkd.slurm")


class SlurmBackendName(StrEnum):
    """The ``slurm_backend`` setting."""

    AUTO, PYSLURM, SCONTROL = "auto", "pyslurm", "scontrol"


BackendChoice = NamedTuple(  # noqa: UP014 - its fields on one line
    "BackendChoice",
    [("backend", SlurmBackend), ("why", str), ("name", str), ("slurm_version", str)],
)
"""The backend chosen at start, and why (logged once): ``name`` is ``scontrol`` or
``pyslurm``; ``slurm_version`` slurmctld's release (pyslurm), the clients' (auto's scontrol),
or "" (scontrol named: not asked)."""


def _major_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) as numbers: pyslurm writes 22.05 as ``22.5.3``, SLURM as ``22.05.8``."""
    parts = version.split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def pyslurm_verdict(module_version: str | None, slurm_version: str) -> tuple[bool, str]:
    """Whether a pyslurm of ``module_version`` (None: not installed) fits ``slurm_version``."""
    if module_version is None:
        return False, "pyslurm is not installed"
    wanted = _major_minor(slurm_version)
    if wanted is None or _major_minor(module_version) != wanted:
        return False, f"pyslurm {module_version} does not match SLURM {slurm_version}"
    return True, f"pyslurm {module_version} matches SLURM {slurm_version}"


def pyslurm_version(path: str = "") -> str | None:
    """The installed pyslurm's version from its metadata; None when none is installed.

    ``path``: a build's site directory (empty: this interpreter's path). Never imports it.
    """
    if path:
        found = list(importlib.metadata.distributions(name="pyslurm", path=[path]))
        return found[0].version if found else None
    try:
        return importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return None


async def installed_slurm_version(settings: SlurmSettings) -> str:
    """The SLURM release of the configured clients (``scontrol --version``)."""
    out = await CommandRunner(settings).run("scontrol", "--version")
    parts = out.split()
    return parts[-1] if parts else "unknown"


async def _scontrol(settings: SlurmSettings, why: str) -> BackendChoice:
    version = await installed_slurm_version(settings)
    return BackendChoice(
        backend=ScontrolBackend(settings), name="scontrol", slurm_version=version, why=why
    )


async def select_backend(
    settings: SlurmSettings,
    wanted: SlurmBackendName = SlurmBackendName.AUTO,
    *,
    pyslurm_path: str = "",
    child_prefix: tuple[str, ...] | None = None,
) -> BackendChoice:
    """The backend ``wanted`` names, or for ``auto`` the one that fits (module docstring).

    TerminalError when ``pyslurm`` was named and cannot serve (one line: why).
    """
    if wanted is SlurmBackendName.SCONTROL:  # no client run: the release is not asked
        return BackendChoice(
            backend=ScontrolBackend(settings),
            name="scontrol",
            slurm_version="",
            why="slurm_backend is scontrol",
        )
    named = wanted is SlurmBackendName.PYSLURM
    where = f" at {pyslurm_path}" if pyslurm_path else ""
    module = pyslurm_version(pyslurm_path)
    if module is None:
        if named:
            raise TerminalError(f"slurm_backend pyslurm: pyslurm is not installed{where}")
        return await _scontrol(settings, f"auto: pyslurm is not installed{where}")
    backend = PyslurmBackend(settings, pyslurm_path=pyslurm_path, child_prefix=child_prefix)
    try:
        said = await backend.versions()
    except SlonkdError as exc:
        await backend.aclose()
        why = f"pyslurm {module} could not ask slurmctld's release: {exc}"[:300]
        if named:
            raise TerminalError(f"slurm_backend pyslurm: {why}") from None
        return await _scontrol(settings, f"auto: {why}")
    ctld = said.get("slurmctld", "unknown")
    fits, why = pyslurm_verdict(said.get("pyslurm", module), ctld)
    if fits:
        return BackendChoice(backend=backend, name="pyslurm", slurm_version=ctld, why=why)
    await backend.aclose()
    if named:
        raise TerminalError(f"slurm_backend pyslurm: {why}")
    return await _scontrol(settings, f"auto: {why}")


async def open_backend(
    settings: SlurmSettings, wanted: SlurmBackendName, *, pyslurm_path: str = ""
) -> BackendChoice:
    """:func:`select_backend` for a role's start, logged once (``slurm.backend_chosen``)."""
    choice = await select_backend(settings, wanted, pyslurm_path=pyslurm_path)
    log.info(
        SLURM_BACKEND_CHOSEN,
        backend=choice.name,
        wanted=str(wanted),
        slurm_version=choice.slurm_version,
        why=choice.why,
    )
    return choice


async def close_backend(backend: SlurmBackend) -> None:
    """End what a backend started (the pyslurm child); the scontrol backend keeps nothing."""
    if isinstance(backend, PyslurmBackend):
        await backend.aclose()

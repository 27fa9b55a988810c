"""What this machine has, for a plain ``slonkd check``: GPUs, InfiniBand ports, NICs, mounts.

:func:`discover` looks under the roots it is given (``/dev``, ``/sys``; a test gives a fake
tree) and asks ``nvidia-smi -L`` (an argv, never a shell, with a deadline: through
:func:`slonkd.adapters.health.probes.run_command`, or the runner a test gives); the mounts
are the ones the agent's config names (``health.mounts``), none without one.
:func:`settings_for` turns what it found into the
:class:`~slonkd.adapters.health.settings.HealthSettings` that
:func:`slonkd.adapters.health.checks.build_checks` builds the checks from, and
:func:`not_checked` says which check families those settings leave out, and why.
``slonkd check`` (:mod:`slonkd.cli.check`) is the user; the agent keeps its configured checks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from slonkd.adapters.health import probes
from slonkd.adapters.health.settings import HealthSettings

GPU_LIST_ARGV: Final = ("nvidia-smi", "-L")
_GPU_LINE: Final = re.compile(r"GPU (\d+): (.+) \(UUID: (GPU-[0-9A-Za-z-]+)\)")
_MIG_LINE: Final = re.compile(r"\s+MIG .*\(UUID: MIG-[0-9A-Za-z-]+\)")
_DEV_GPU: Final = re.compile(r"nvidia(\d+)")
_UP: Final = frozenset({"up", "unknown"})
"""Operstates the NIC check takes as up (``unknown``: drivers that do not report one)."""

Runner = Callable[[Sequence[str]], Awaitable[probes.Outcome]]
"""Runs an argv with a deadline (``probes.run_command`` with its guard and timeout)."""


@dataclass(frozen=True, slots=True)
class NotChecked:
    """A check family ``slonkd check`` did not run, and why."""

    check: str
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """What :func:`discover` found on this machine."""

    gpus: int = 0
    gpu_how: str = ""
    """How the GPUs were counted, or why there are none."""
    ib_ports: tuple[str, ...] = ()
    """``device/port`` under ``<sys>/class/infiniband``."""
    nics: tuple[str, ...] = ()
    """Physical interfaces that are up (the NIC check requires them)."""
    nics_down: tuple[tuple[str, str], ...] = ()
    """Physical interfaces not up when found, with their operstate (not required)."""
    mounts: tuple[str, ...] = ()
    mounts_how: str = "none configured (no agent config)"
    dcgmi: bool = False
    """``dcgmi`` is on PATH."""
    notes: tuple[str, ...] = ()
    """What discovery could not make sense of (unparseable tool output, disagreements)."""
    sys_root: str = "/sys"


def parse_gpu_list(text: str) -> int:
    """The number of GPUs in ``nvidia-smi -L``'s output; ValueError naming the odd line.

    MIG devices listed under a GPU are not counted; anything else unknown is an error, as
    is no GPU line at all or a GPU index given twice.
    """
    seen: set[int] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or _MIG_LINE.fullmatch(line.rstrip()):
            continue
        match = _GPU_LINE.fullmatch(line.strip())
        if match is None:
            raise ValueError(f"nvidia-smi -L line {number} not understood: {line.strip()[:120]!r}")
        index = int(match.group(1))
        if index in seen:
            raise ValueError(f"nvidia-smi -L lists GPU {index} twice")
        seen.add(index)
    if not seen:
        raise ValueError("nvidia-smi -L lists no GPU")
    return len(seen)


def dev_gpus(dev_root: Path) -> int:
    """How many ``<dev>/nvidiaN`` device files there are (not nvidiactl, nvidia-uvm, ...)."""
    try:
        return sum(1 for e in dev_root.iterdir() if _DEV_GPU.fullmatch(e.name))
    except OSError:
        return 0


def ib_ports(sys_root: Path) -> tuple[str, ...]:
    """``device/port`` for every port under ``<sys>/class/infiniband/*/ports/*``."""
    base = sys_root / "class" / "infiniband"
    found = []
    try:
        for dev in sorted(base.iterdir()) if base.is_dir() else []:
            ports = dev / "ports"
            found += [f"{dev.name}/{p.name}" for p in sorted(ports.iterdir()) if ports.is_dir()]
    except OSError:
        pass
    return tuple(found)


def physical_nics(sys_root: Path) -> tuple[tuple[str, str], ...]:
    """``(interface, operstate)`` under ``<sys>/class/net``, without lo and virtual ones.

    Virtual: its entry links under ``devices/virtual`` (bridges, veths, tunnels, bonds).
    """
    base = sys_root / "class" / "net"
    found = []
    try:
        entries = sorted(base.iterdir()) if base.is_dir() else []
    except OSError:
        entries = []
    for entry in entries:
        if entry.name == "lo" or "/devices/virtual/" in os.path.realpath(entry) + "/":
            continue
        try:
            state = (entry / "operstate").read_text().strip()
        except OSError:
            state = "unreadable"
        found.append((entry.name, state))
    return tuple(found)


def agent_mounts(doc: Any, where: str) -> tuple[str, ...]:
    """``health.mounts`` of the agent's section of a config document; ValueError when odd.

    ``doc`` is the whole tree (``{"agent": {...}}``) or, as the agent also reads it, the
    agent's own (flat) section.
    """
    if not isinstance(doc, Mapping):
        raise ValueError(f"{where}: not a JSON object")
    section = doc.get("agent") if set(doc) & {"agent", "coordinator", "prestop"} else doc
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        raise ValueError(f"{where}: agent must be a JSON object")
    health = section.get("health")
    if health is None:
        return ()
    if not isinstance(health, Mapping):
        raise ValueError(f"{where}: agent.health must be a JSON object")
    mounts = health.get("mounts")
    if mounts is None:
        return ()
    if isinstance(mounts, str) or not isinstance(mounts, list):
        raise ValueError(f"{where}: agent.health.mounts must be a list of paths")
    if not all(isinstance(m, str) and m for m in mounts):
        raise ValueError(f"{where}: agent.health.mounts must be a list of non-empty paths")
    return tuple(mounts)


def read_agent_mounts(path: str) -> tuple[str, ...]:
    """:func:`agent_mounts` of the JSON file at ``path``; ValueError when unreadable."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    return agent_mounts(doc, path)


async def count_gpus(dev_root: Path, run: Runner) -> tuple[int, str, list[str]]:
    """GPUs from ``<dev>/nvidiaN``, counted by ``nvidia-smi -L`` when it answers.

    Returns the count (the larger of the two when they disagree: the GPU checks then find
    the missing one), how it was found or why none, and notes on what made no sense.
    """
    on_dev = dev_gpus(dev_root)
    files = f"{on_dev} {dev_root}/nvidia* files"
    out = await run(GPU_LIST_ARGV)
    if out.missing:
        how = f"{files}, no nvidia-smi" if on_dev else f"no {dev_root}/nvidia* and no nvidia-smi"
        return on_dev, how, []
    problem = ""
    if out.timed_out:
        problem = "nvidia-smi -L gave no answer before the deadline"
    elif out.rc != 0:
        said = (out.stderr or out.stdout).strip().splitlines()
        problem = f"nvidia-smi -L exited {out.rc}" + (f": {said[0][:160]}" if said else "")
    else:
        try:
            listed = parse_gpu_list(out.stdout)
        except ValueError as exc:
            problem = str(exc)
        else:
            notes = []
            if on_dev and listed != on_dev:
                notes.append(f"nvidia-smi -L lists {listed} GPUs, {dev_root} has {on_dev}")
            return max(listed, on_dev), f"{listed} listed by nvidia-smi -L", notes
    if on_dev:
        return on_dev, f"{files} ({problem})", [problem]
    return 0, f"no {dev_root}/nvidia*, and {problem}", [problem]


async def discover(
    *,
    run: Runner,
    dev_root: str = "/dev",
    sys_root: str = "/sys",
    agent_config: str = "",
    which: Callable[[str], str | None] = shutil.which,
) -> Found:
    """What this machine has (see the module's docstring); never raises for odd input."""
    gpus, gpu_how, notes = await count_gpus(Path(dev_root), run)
    nics = physical_nics(Path(sys_root))
    mounts: tuple[str, ...] = ()
    mounts_how = "none configured (no agent config)"
    if agent_config:
        try:
            mounts = read_agent_mounts(agent_config)
        except ValueError as exc:
            mounts_how = f"agent config unreadable: {exc}"
        else:
            mounts_how = f"from {agent_config}" if mounts else "none configured (agent config)"
    return Found(
        gpus=gpus,
        gpu_how=gpu_how,
        ib_ports=ib_ports(Path(sys_root)),
        nics=tuple(n for n, state in nics if state.lower() in _UP),
        nics_down=tuple((n, state) for n, state in nics if state.lower() not in _UP),
        mounts=mounts,
        mounts_how=mounts_how,
        dcgmi=which("dcgmi") is not None,
        notes=tuple(notes),
        sys_root=sys_root,
    )


def settings_for(found: Found, base: HealthSettings) -> HealthSettings:
    """``base`` expecting what was found (GPUs, IB ports, NICs, mounts; dcgmi when there)."""
    return replace(
        base,
        expected_gpus=found.gpus,
        ib_expected_ports=len(found.ib_ports),
        nic_interfaces=found.nics,
        mounts=found.mounts,
        dcgm=base.dcgm and found.dcgmi,
        sysfs_root=found.sys_root,
    )


def not_checked(s: HealthSettings, found: Found | None, *, dcgm_off: str) -> list[NotChecked]:
    """The check families ``build_checks(s)`` leaves out, each with why.

    ``found`` is None when discovery was off (the reasons then name the option that would
    turn the family on); ``dcgm_off`` says why ``s.dcgm`` is off, when it is.
    """
    skipped: list[NotChecked] = []

    def skip(check: str, why: str) -> None:
        skipped.append(NotChecked(check, why))

    if s.expected_gpus == 0:
        skip("gpu", found.gpu_how if found else "no --expected-gpus given")
        for family in ("dcgm", "nvlink", "fabric"):
            skip(family, "no GPU")
    else:
        if not s.dcgm:
            skip("dcgm", dcgm_off or "dcgmi not found")
        if s.nvlink_links == 0:
            skip("nvlink", "no --nvlink-links given (the link count is not discovered)")
        if not s.fabric:
            skip("fabric", "fabric off in the settings")
    if not s.mounts:
        skip("mounts", found.mounts_how if found else "no --mount given")
    if s.slurmd_port is None:
        skip("slurmd", "no --slurmd-port given")
    if not s.peers:
        skip("peers", "no --peer given")
    if not s.nic_interfaces:
        nic_dir = f"{found.sys_root}/class/net" if found else ""
        skip("nic", f"no physical NIC up in {nic_dir}" if found else "no --nic given")
    for name, state in found.nics_down if found else ():
        skip("nic", f"{name}: {state} when found, not required (--nic {name} requires it)")
    if s.ib_expected_ports == 0:
        ib_dir = f"{found.sys_root}/class/infiniband" if found else ""
        skip("infiniband", f"no port in {ib_dir}" if found else "no --ib-ports given")
    if not (s.pcie_vendors and (s.expected_gpus or s.ib_expected_ports)):
        skip("pcie", "no GPU and no InfiniBand port")
    return skipped

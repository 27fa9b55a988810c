"""Choosing the SLURM backend: pyslurm only when it is installed and matches slurmctld's release.

The choice asks slurmctld's release through the pyslurm child; here the child imports a
stand-in pyslurm (a package in a site directory, as a build's site is given) and SLURM's
clients are ``echo``: no SLURM runs. Real builds on real clusters:
tests/contract/test_slurm_backend_choice.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slonkd.adapters.slurm.choice import (
    SlurmBackendName,
    pyslurm_verdict,
    pyslurm_version,
    select_backend,
)
from slonkd.adapters.slurm.pyslurm_writes import PyslurmBackend
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.errors import TerminalError

CASES = [
    (None, "22.05.8", False, "not installed"),
    ("25.11.0", "22.05.8", False, "does not match"),
    ("24.11.2", "24.11.5", True, "matches"),
    ("24.1.0", "24.11.5", False, "does not match"),
    ("22.5.3", "22.05.8", True, "matches"),  # pyslurm writes the minor without its zero
    ("22.5.3", "22.5.0", True, "matches"),
    ("2.5.3", "22.05.8", False, "does not match"),
    ("unknown", "22.05.8", False, "does not match"),
]


@pytest.mark.parametrize(("module", "slurm", "fits", "says"), CASES)
def test_pyslurm_verdict(module: str | None, slurm: str, fits: bool, says: str) -> None:
    """pyslurm fits only for the same major.minor release; the reason says why not."""
    ok, why = pyslurm_verdict(module, slurm)
    assert ok is fits
    assert says in why


def test_the_pyslurm_version_is_read_without_importing_pyslurm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import pyslurm`` runs ``slurm_init``, which ends the process without a config source.

    The version comes from the installed distribution's metadata, so choosing a backend at
    start never loads libslurm into the daemon (the pyslurm backend runs in a child).
    """
    package = tmp_path / "pyslurm"
    package.mkdir()
    (package / "__init__.py").write_text('raise SystemExit("fatal: Could not establish a source")')
    info = tmp_path / "pyslurm-22.5.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pyslurm\nVersion: 22.5.3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert pyslurm_version() == "22.5.3"
    assert pyslurm_version(str(tmp_path)) == "22.5.3"  # a build's site, named
    assert pyslurm_version(str(tmp_path / "nowhere")) is None


def _stand_in(site: Path, module: str, slurmctld: str) -> None:
    """A pyslurm ``module`` whose slurmctld says ``slurmctld`` (the child imports it)."""
    package = site / "pyslurm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from types import SimpleNamespace\n"
        f"__version__ = {module!r}\n"
        "slurmctld = SimpleNamespace(Config=SimpleNamespace(\n"
        f"    load=lambda: SimpleNamespace(version={slurmctld!r})))\n"
    )
    info = site / f"pyslurm-{module}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pyslurm\nVersion: {module}\n")


def _settings(tmp_path: Path, clients: str) -> SlurmSettings:
    """SLURM's clients stand in as ``sh -c 'echo slurm RELEASE'``; a readable slurm.conf."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lab\n")
    return SlurmSettings(
        argv_prefix=("sh", "-c", f"echo slurm {clients}", "sh"),
        env={"SLURM_CONF": str(conf)},
        timeout_s=20.0,
    )


async def test_auto_takes_scontrol_where_slurmctld_runs_another_release(tmp_path: Path) -> None:
    """A 24.11 pyslurm against a 26.05 slurmctld (no pyslurm for 26.05): scontrol, and why."""
    _stand_in(tmp_path / "site", "24.11.0", "26.05.5")
    settings = _settings(tmp_path, "26.05.5")
    site = str(tmp_path / "site")
    choice = await select_backend(settings, pyslurm_path=site)
    assert isinstance(choice.backend, ScontrolBackend)
    assert choice.slurm_version == "26.05.5"
    assert choice.why == "auto: pyslurm 24.11.0 does not match SLURM 26.05.5"
    with pytest.raises(TerminalError, match=r"^slurm_backend pyslurm: pyslurm 24\.11\.0 does not"):
        await select_backend(settings, SlurmBackendName.PYSLURM, pyslurm_path=site)


async def test_auto_takes_pyslurm_where_the_releases_match(tmp_path: Path) -> None:
    """pyslurm 22.5.3 and slurmctld 22.05.8: the pyslurm backend, its child started."""
    _stand_in(tmp_path / "site", "22.5.3", "22.05.8")
    choice = await select_backend(
        _settings(tmp_path, "22.05.8"), pyslurm_path=str(tmp_path / "site")
    )
    assert isinstance(choice.backend, PyslurmBackend)
    try:
        assert (choice.name, choice.slurm_version) == ("pyslurm", "22.05.8")
        assert choice.why == "pyslurm 22.5.3 matches SLURM 22.05.8"
    finally:
        await choice.backend.aclose()


async def test_a_pyslurm_whose_child_cannot_start_is_scontrol_or_a_failed_start(
    tmp_path: Path,
) -> None:
    """An import that fails in the child (a broken build): auto says so; named, one line."""
    _stand_in(tmp_path / "site", "24.11.0", "24.11.5")
    (tmp_path / "site" / "pyslurm" / "__init__.py").write_text(
        "raise ImportError('libslurmfull.so')\n"
    )
    settings = _settings(tmp_path, "24.11.5")
    site = str(tmp_path / "site")
    choice = await select_backend(settings, pyslurm_path=site)
    assert choice.name == "scontrol"
    assert choice.why.startswith("auto: pyslurm 24.11.0 could not ask slurmctld's release: ")
    assert "libslurmfull.so" in choice.why
    with pytest.raises(TerminalError, match=r"slurm_backend pyslurm: pyslurm 24\.11\.0 could not"):
        await select_backend(settings, SlurmBackendName.PYSLURM, pyslurm_path=site)

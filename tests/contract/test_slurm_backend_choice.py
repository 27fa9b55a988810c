"""``slurm_backend`` at start against real SLURM 22.05 and 24.11 (choice.py).

``auto`` takes the bootstrap's pyslurm build of the release where its child starts and
slurmctld runs the same major.minor; without pyslurm it takes scontrol and says why; named,
``pyslurm`` without a build ends the start with one line; ``scontrol`` starts no child. The
mismatch of releases (a 24.11 pyslurm against a 26.05 slurmctld) is shown with a stand-in
module in tests/unit/test_slurm_backend_choice.py: no harness runs two releases at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slonkd.adapters.slurm.choice import SlurmBackendName, select_backend
from slonkd.adapters.slurm.pyslurm_writes import PyslurmBackend
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.errors import TerminalError
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.contract.conftest import settings_for

pytestmark = pytest.mark.slurm


def _prefix(cluster: SlurmCluster) -> tuple[str, ...]:
    if isinstance(cluster, ChrootSlurmCluster):
        return tuple(cluster.libslurm_argv([], {})[0])
    return ()


async def test_auto_takes_the_build_of_the_running_release(
    pyslurm_built: Path, cluster: SlurmCluster, slurm_release: str
) -> None:
    """pyslurm, with slurmctld's release and why; its reads serve."""
    settings = settings_for(cluster, env={"SLURM_CONF": str(cluster.conf)})
    choice = await select_backend(
        settings, pyslurm_path=str(pyslurm_built), child_prefix=_prefix(cluster)
    )
    assert isinstance(choice.backend, PyslurmBackend)
    try:
        assert choice.name == "pyslurm"
        assert choice.slurm_version.startswith(slurm_release)
        assert "matches" in choice.why
        assert len(await choice.backend.read_nodes()) == 4
    finally:
        await choice.backend.aclose()


async def test_without_pyslurm_auto_is_scontrol_and_pyslurm_named_fails(
    cluster: SlurmCluster, slurm_release: str, tmp_path: Path
) -> None:
    """No build at the path: auto says so and reads through scontrol; named, one line."""
    settings = settings_for(cluster)
    choice = await select_backend(settings, pyslurm_path=str(tmp_path))
    assert isinstance(choice.backend, ScontrolBackend)
    assert choice.slurm_version.startswith(slurm_release)
    assert choice.why == f"auto: pyslurm is not installed at {tmp_path}"
    assert len(await choice.backend.read_nodes()) == 4
    with pytest.raises(TerminalError, match="slurm_backend pyslurm: pyslurm is not installed"):
        await select_backend(settings, SlurmBackendName.PYSLURM, pyslurm_path=str(tmp_path))
    named = await select_backend(settings, SlurmBackendName.SCONTROL)
    assert (named.name, named.why) == ("scontrol", "slurm_backend is scontrol")

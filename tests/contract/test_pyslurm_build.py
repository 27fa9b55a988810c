"""pyslurm as the bootstrap built it, loaded against the real cluster of its release.

The build is :mod:`slonkd_sandbox.pyslurm_build`'s (``scripts/bootstrap`` runs it); this test
only loads it. ``import pyslurm`` runs ``slurm_init``, which may end its process, so pyslurm is
loaded in a child with ``PYTHONPATH`` the build's site and ``SLURM_CONF`` the cluster's; on
24.11 the child runs under the root's loader and C library
(:meth:`~slonkd_sandbox.slurm.chroot.ChrootSlurmCluster.libslurm_argv`, as the libslurm change
poll's child does). Without a build the test is skipped with the bootstrap's reason, unless
``SLONKD_REQUIRE_PYSLURM=1`` (CI), where it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster

pytestmark = pytest.mark.slurm

CHILD = """\
import json, pyslurm
nodes = pyslurm.Nodes.load()
print(json.dumps({"version": pyslurm.__version__, "nodes": sorted(n.name for n in nodes.values())}))
"""


def _scontrol_names(cluster: SlurmCluster) -> list[str]:
    shown = cluster.run("scontrol", "show", "node", "-o").stdout
    words = [line.split(None, 1)[0] for line in shown.splitlines() if line.strip()]
    assert all(w.startswith("NodeName=") for w in words), shown
    return sorted(w.removeprefix("NodeName=") for w in words)


def test_pyslurm_of_the_release_reads_the_nodes_scontrol_shows(
    pyslurm_built: Path, slurm_release: str, cluster_factory: Callable[..., SlurmCluster]
) -> None:
    """The build imports, says its release's major.minor and lists the cluster's nodes."""
    cluster = cluster_factory()
    env = {**os.environ, "PYTHONPATH": str(pyslurm_built), "SLURM_CONF": str(cluster.conf)}
    argv = [sys.executable, "-c", CHILD]
    if isinstance(cluster, ChrootSlurmCluster):
        argv, env = cluster.libslurm_argv(argv, env)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    major, minor = (int(x) for x in str(got["version"]).split(".")[:2])
    assert (major, minor) == tuple(int(x) for x in slurm_release.split(".")), got
    assert got["nodes"] == _scontrol_names(cluster)
    assert len(got["nodes"]) >= 4

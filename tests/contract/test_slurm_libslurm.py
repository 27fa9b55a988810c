"""libslurm's change detection against the real slurmctld of 22.05 and 24.11.

The probe (tests/contract/libslurm_probe.py) runs in its own process with the cluster's
``SLURM_CONF``; on 24.11 it loads the root's library under the root's C library.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.slurm import libslurm_child
from slonkd.core.errors import TransientError
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import SCALE_SLURMD_TIMEOUT_S, SlurmCluster, SlurmLayout
from tests.offline_names import offline_prefix

PROBE = Path(__file__).with_name("libslurm_probe.py")


class Probe:
    """One probe process talking to one cluster."""

    def __init__(self, cluster: SlurmCluster) -> None:
        env = {**os.environ, "SLURM_CONF": str(cluster.conf)}
        argv = [sys.executable, str(PROBE)]
        if isinstance(cluster, ChrootSlurmCluster):
            argv, env = cluster.libslurm_argv(argv, env)
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.loaded = self._answer()["loaded"]

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "probe exited"
        return dict(json.loads(line))

    def ask(self, since: int) -> dict[str, Any]:
        """The answer to "changed since ``since``?"."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{since}\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        """End the probe (stdin closed)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_change_detection_against_slurmctld(
    cluster_factory: Callable[..., SlurmCluster],
) -> None:
    """libslurm answers "changed since T?" as slurmctld sees it, on both releases.

    First ask -> changed with a time; same time again -> no change; a drain -> changed;
    slurmctld stopped -> a TransientError answer, and the probe keeps answering. SLURM's
    default SlurmdTimeout (300 s: a ping every 100 s), not the harness's 10 s, whose pings
    every few seconds move the table's time too (the "no change" ask failed under load).
    """
    cluster = cluster_factory(SlurmLayout(slurmd_timeout_s=SCALE_SLURMD_TIMEOUT_S))
    probe = Probe(cluster)
    try:
        assert probe.loaded, "libslurm did not load"
        first = probe.ask(0)
        assert first.get("changed") is True, first
        t = first["last_update"]
        assert t > 0
        time.sleep(1.5)  # a change in the second of the read is reported once more
        again = probe.ask(t)
        for _ in range(20):  # and slurmctld's own bookkeeping (a registration) moves it
            if not again.get("changed"):
                break
            t = again["last_update"]
            time.sleep(1.5)
            again = probe.ask(t)
        assert again == {"changed": False, "last_update": t}, again
        cluster.run("scontrol", "update", "nodename=n2", "state=drain", "reason=libslurm test")
        after = probe.ask(t)
        assert after.get("changed") is True, after
        assert after["last_update"] >= t
        cluster.stop_slurmctld()
        down = probe.ask(after["last_update"])
        assert down.get("error") == "TransientError", down
        assert probe.proc.poll() is None
    finally:
        probe.close()


UNRESOLVABLE = """\
ClusterName=nowhere
SlurmctldHost=slurmctld-0.slurmctld.nowhere.invalid
AuthType=auth/munge
NodeName=n1 CPUs=1 State=UNKNOWN
PartitionName=p Nodes=n1 Default=YES
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a resolver of the test's own needs root")
def test_a_controller_name_that_does_not_resolve_ends_the_child_not_slonkd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The installed libslurm ends its process when slurmctld's name does not resolve.

    That is slurmctld's pod restarting behind a headless Service: loaded into the
    coordinator, the library ended it (exit 40). In its child, the question is a transient
    error and this process lives; the next question starts a new child. The child looks the
    name up in the test's hosts file only: no query goes to the machine's nameserver.
    """
    conf = tmp_path / "slurm.conf"
    conf.write_text(UNRESOLVABLE)
    monkeypatch.setattr(libslurm_child, "CHILD_PREFIX", offline_prefix(tmp_path))
    lib = libslurm_child.load(conf=str(conf))
    assert isinstance(lib, libslurm_child.ChildLibSlurm), "libslurm did not load"
    try:
        with pytest.raises(TransientError, match="exited"):
            asyncio.run(lib.changed_since(0, timeout_s=30))
        assert lib.starts == 1
    finally:
        lib.close()

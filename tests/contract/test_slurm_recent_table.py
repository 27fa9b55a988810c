"""The node table a read keeps for the pass that follows, on real SLURM 22.05 and 24.11.

The coordinator's poll and its passes send slurmctld the same ``scontrol -o show node``; a
pass that starts right after the poll's read takes that table (issue 21: the passes' own
reads kept the poll's next read waiting for the read limit), the term's ``NodeTable`` fed
through ``KeptSlurm``. What must hold: the kept table is the one a full read gives, it ages
out, and once slonkd writes it is never served again.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import DrainStatus
from slonkd.runtime.coordinating.node_table import KeptSlurm, NodeTable
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests.contract.conftest import settings_for

pytestmark = pytest.mark.slurm

CAUSE = Cause.parse("pod-terminating")


@pytest.fixture
def two(cluster_factory: Callable[..., SlurmCluster]) -> SlurmCluster:
    """Two slurmd nodes n1 and n2 of the release under test."""
    return cluster_factory(SlurmLayout(nodes=("n1", "n2")))


async def test_the_polls_table_is_a_full_reads_until_slonkd_writes(two: SlurmCluster) -> None:
    """The poll's read keeps the whole table; a write drops it; the next full read keeps it."""
    table = NodeTable()
    slurm = KeptSlurm(ScontrolBackend(settings_for(two)), table)
    assert table.recent(60) is None  # nothing read yet
    two.run("scontrol", "update", "nodename=n2", "state=drain", "reason=operator")
    polled = await slurm.read_nodes()  # the poll's read (it compares the nodes with a reason)
    assert [n.name for n in polled if n.reason] == ["n2"]
    kept = table.recent(60)
    assert kept is not None
    assert kept == await ScontrolBackend(settings_for(two)).read_nodes()  # a pass's own read
    assert table.recent(0) is None  # too old for a pass that wants it fresher
    drained = await slurm.drain(["n1"], CAUSE)
    assert drained.changed == ("n1",)
    assert table.recent(60) is None  # read before slonkd's own write: never served
    after = await slurm.read_nodes()
    assert table.recent(60) == after
    assert all(n.state.drain is not DrainStatus.NONE for n in after), after

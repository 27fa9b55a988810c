"""The harness's fleet shape (slonkd_sandbox/fleet.py): names, SLURM layout, nothing started."""

from __future__ import annotations

from slonkd_sandbox.fleet import FleetShape, worker_names
from slonkd_sandbox.slurm.conf import SlurmLayout


def test_declared_nodes_continue_the_pool_or_have_their_own() -> None:
    """1 slurmd and 3 declared in pool w are w-0 and w-1..w-3; in a pool d, d-0..d-2."""
    same = FleetShape(slurmds=1, declared=3)
    assert same.names == ("w-0", "w-1", "w-2", "w-3")
    assert same.layout() == SlurmLayout(
        nodes=("w-0",), extra_prefix="w-", extra_first=1, extra_nodes=3
    )
    own = FleetShape(slurmds=2, declared=3, declared_pool="d", autostart=False)
    assert own.names == ("w-0", "w-1", "d-0", "d-1", "d-2")
    assert own.pods == 5
    assert own.layout() == SlurmLayout(
        nodes=("w-0", "w-1"), autostart=False, extra_prefix="d-", extra_first=0, extra_nodes=3
    )


def test_the_layout_takes_the_shapes_timeout_and_more_fields() -> None:
    """slurmd_timeout_s comes from the shape; other SlurmLayout fields pass through."""
    layout = FleetShape(slurmds=2, slurmd_timeout_s=3600).layout(accounting=True)
    assert (layout.slurmd_timeout_s, layout.accounting, layout.extra_nodes) == (3600, True, 0)


def test_kube_node_names_and_worker_names() -> None:
    """kwok nodes ``<prefix><i>``, pods ``<pool>-<i>`` from an ordinal on."""
    assert FleetShape(slurmds=4, kube_nodes=2).kube_node_names("kn-") == ("kn-0", "kn-1")
    assert worker_names("d", 2, first=3) == ("d-3", "d-4")

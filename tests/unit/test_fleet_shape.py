"""The harness's fleet shape (slonkd_sandbox/fleet.py): names, SLURM layout, nothing started."""

from __future__ import annotations

from slonkd.core.kube_objects import WORKER_LABELS
from slonkd_sandbox.fleet import TEST_LABEL, FleetBuilder, FleetShape, worker_names
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


def test_a_bound_fleet_is_a_kwok_node_per_pod_and_the_pod_bound_to_it() -> None:
    """The benchmarks' bulk fleets: node ``<prefix><pod>``, the pod's nodeName that node."""
    shape = FleetShape(slurmds=1, declared=4, declared_pool="x")
    build = FleetBuilder(kube=None, namespace="bench", shape=shape, labelled=False)  # type: ignore[arg-type]
    nodes, pods = build.bound("k", shape.declared_names[1:3])
    assert [n["metadata"]["name"] for n in nodes] == ["kx-1", "kx-2"]
    assert [(p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods] == [
        ("x-1", "kx-1"),
        ("x-2", "kx-2"),
    ]
    assert all(p["metadata"]["labels"].items() >= WORKER_LABELS.items() for p in pods)
    labelled = FleetBuilder(kube=None, namespace="t1", shape=shape)  # type: ignore[arg-type]
    nodes, _ = labelled.bound("k", node_body=None)
    assert len(nodes) == shape.pods
    assert nodes[0]["metadata"]["labels"][TEST_LABEL] == "t1"

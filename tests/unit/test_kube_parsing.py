"""Parsing of recorded apiserver JSON (Kubernetes 1.36, kwok) into slonkd's core types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.kube.parsing import field_owners, node_from_json, pod_from_json
from slonkd.core.errors import ParseError
from slonkd.core.kube_objects import PodPhase, TaintEffect, Toleration, TolerationOperator

DATA = Path(__file__).resolve().parents[1] / "data" / "kube"


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / name).read_text())
    return loaded


def test_cordoned_kwok_node_is_read_with_taints_conditions_and_only_our_annotations() -> None:
    """A cordoned, tainted node keeps its labels, all taints, conditions and slonk.dev/ notes."""
    node = node_from_json(_load("node-kwok-cordoned-1.36.json"))
    assert node.name == "gpu-1"
    assert node.unschedulable
    assert node.ready is True
    assert node.slurm_healthy is None
    assert node.labels["topology.slonk.dev/block"] == "b1"
    assert {(t.key, t.effect) for t in node.taints} == {
        ("example.com/maint", TaintEffect.NO_SCHEDULE),
        ("node.kubernetes.io/unschedulable", TaintEffect.NO_SCHEDULE),
    }
    assert node.our_taints == ()
    assert node.annotations == {"slonk.dev/cordoned-by": "health"}
    assert node.cordoned_by_slonkd
    assert not node.held


def test_managed_fields_name_who_cordoned() -> None:
    """managedFields say kubectl owns spec.unschedulable of the recorded node, nobody else."""
    raw = _load("node-kwok-cordoned-1.36.json")
    assert field_owners(raw, "spec", "unschedulable") == {"kubectl"}
    assert field_owners(raw, "spec", "taints") == {"kubectl-taint"}
    assert field_owners(raw, "spec", "nothing") == set()


@pytest.mark.parametrize(
    ("name", "terminating"),
    [("pod-worker-running-1.36.json", False), ("pod-worker-terminating-1.36.json", True)],
)
def test_worker_pod_is_read_running_ready_and_maybe_terminating(
    name: str, terminating: bool
) -> None:
    """A kwok worker pod is Running and Ready on its node; a deleted one is terminating."""
    pod = pod_from_json(_load(name))
    assert pod.name == "worker-0"
    assert pod.namespace == "slonk"
    assert pod.node_name == "gpu-2"
    assert pod.phase is PodPhase.RUNNING
    assert pod.ready
    assert pod.terminating is terminating
    assert pod.termination_grace_s == 30
    assert pod.restarts == 0
    assert [c.name for c in pod.containers] == ["slurmd"]
    assert pod.labels["slonk.dev/pool"] == "worker"
    if terminating:
        assert pod.deletion_grace_s == 30
    assert pod.created == "2026-11-30T04:11:35Z"  # where a job ran when (job blame)
    assert pod.disruption is None
    assert pod.disruption_since is None


def test_a_disrupted_pod_is_read_with_who_ends_it_and_since_when() -> None:
    """The DisruptionTarget condition (True): its reason and lastTransitionTime (job blame)."""
    raw = _load("pod-worker-terminating-1.36.json")
    raw["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "lastTransitionTime": "2026-11-30T04:12:00Z",
        }
    )
    pod = pod_from_json(raw)
    assert pod.disruption == "PreemptionByScheduler"
    assert pod.disruption_since == "2026-11-30T04:12:00Z"


def test_objects_without_a_name_are_refused() -> None:
    """An object without metadata.name is a ParseError, never a half-filled value."""
    with pytest.raises(ParseError):
        node_from_json({"metadata": {}})
    with pytest.raises(ParseError):
        pod_from_json({})


def test_unknown_pod_phase_reads_as_unknown() -> None:
    """A phase this version does not know reads as Unknown rather than failing."""
    pod = pod_from_json({"metadata": {"name": "p"}, "status": {"phase": "Hibernating"}})
    assert pod.phase is PodPhase.UNKNOWN
    assert not pod.ready


def test_a_worker_pods_tolerations_are_read_as_its_spec_lists_them() -> None:
    """spec.tolerations of the recorded pod: key, operator, value, effect and seconds kept."""
    pod = pod_from_json(_load("pod-worker-running-1.36.json"))
    exists = TolerationOperator.EXISTS
    assert pod.tolerations == (
        Toleration(key="kwok.x-k8s.io/node", operator=exists, effect=TaintEffect.NO_SCHEDULE),
        Toleration(
            key="node.kubernetes.io/not-ready",
            operator=exists,
            effect=TaintEffect.NO_EXECUTE,
            seconds=300,
        ),
        Toleration(
            key="node.kubernetes.io/unreachable",
            operator=exists,
            effect=TaintEffect.NO_EXECUTE,
            seconds=300,
        ),
    )


def test_an_equal_toleration_without_operator_or_effect_reads_as_equal_for_every_effect() -> None:
    """Kubernetes' defaults: no operator is Equal, no effect (or "") matches every effect."""
    raw = {"key": "nvidia.com/gpu", "value": "present"}
    pod = pod_from_json({"metadata": {"name": "p"}, "spec": {"tolerations": [raw]}})
    assert pod.tolerations == (
        Toleration(key="nvidia.com/gpu", operator=TolerationOperator.EQUAL, value="present"),
    )
    assert pod.tolerations[0].effect is None


@pytest.mark.parametrize(
    "tolerations",
    [
        "nvidia.com/gpu",
        {"key": "nvidia.com/gpu"},
        [
            "nvidia.com/gpu",
            None,
            {"key": 3, "operator": "Exists"},
            {"key": "a", "operator": "Gt", "value": "3"},
            {"key": "a", "operator": ["Exists"]},
            {"key": "a", "value": 5},
            {"key": "a", "operator": "Exists", "effect": "Sometimes"},
            {"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "soon"},
            {"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": True},
        ],
    ],
    ids=["a-string", "an-object", "entries"],
)
def test_tolerations_that_cannot_be_read_are_left_out_never_a_crash(tolerations: Any) -> None:
    """What cannot be read tolerates nothing: such a toleration is dropped, the pod still reads.

    A dropped toleration hides no taint, so slonkd then drains for it as before tolerations
    were read (the safe side); an unknown operator (a newer Kubernetes') is dropped the same.
    """
    ok = {"key": "ok", "operator": "Exists"}
    listed = [*tolerations, ok] if isinstance(tolerations, list) else tolerations
    pod = pod_from_json({"metadata": {"name": "p"}, "spec": {"tolerations": listed}})
    want = (
        (Toleration(key="ok", operator=TolerationOperator.EXISTS),) if listed != tolerations else ()
    )
    assert pod.tolerations == want

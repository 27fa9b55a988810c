"""The worker pod the unit tests of a coordinator pass start from: Running and Ready.

:func:`running_pod` serves ``tests/unit/test_coordinator_pass.py`` and
``tests/unit/test_coordinator_first_pass.py`` (the informers' caches filled by hand) and
``tests/unit/test_health_causes.py`` (the settled view a decision starts from); the tests of
the decisions and the rollout (``test_decide.py``, ``test_rollout.py``) build pods in other
states with their own helpers.
"""

from __future__ import annotations

from slonkd.core.kube_objects import KubeNodeName, Pod, PodName, PodPhase


def running_pod(name: str, *, uid: str, on: str, ready_since: str | None = None) -> Pod:
    """Pod ``name`` of namespace slonk on K8s node ``on``, Running and Ready (resourceVersion 1)."""
    return Pod(
        name=PodName(name),
        namespace="slonk",
        uid=uid,
        resource_version="1",
        node_name=KubeNodeName(on),
        phase=PodPhase.RUNNING,
        ready=True,
        ready_since=ready_since,
    )

"""Which node taints a worker pod tolerates by design: the pool's nature, not maintenance.

A managed GPU pool taints every one of its nodes (``nvidia.com/gpu=present:NoSchedule``) and
gives its pods a toleration for it (the chart's ``pools[].tolerations``). Such a taint is no
cordon: :func:`slonkd.core.decide.decide` (rule 5, Kubernetes maintenance) asks
:func:`tolerated` of every foreign NoSchedule/NoExecute taint before it drains for it as
``k8s-tainted:<key>``, with the tolerations of the node's worker pod
(:attr:`slonkd.core.kube_objects.Pod.tolerations`, read by
:mod:`slonkd.adapters.kube.parsing`; what cannot be read is left out and hides nothing).
The disruption budget (:func:`slonkd.core.budget.out_of_service`) never counts a foreign
taint, tolerated or not, so a tolerated taint neither drains a node nor uses a pool's room.

The match is Kubernetes' own (``Toleration.ToleratesTaint``): an effect, if given, equals the
taint's (an empty effect matches every effect); a key, if given, equals the taint's; Exists
matches any value, Equal (the default) only the same value. Two tolerations match as
Kubernetes says yet never make a taint the pool's nature:

- a **wildcard** (no key, with Exists): it tolerates every taint there is, so it says nothing
  of which taint is the pool's; a pod that tolerates everything would otherwise hide every
  maintenance taint;
- one with **tolerationSeconds** (Kubernetes allows it only on NoExecute): the pod is evicted
  once they run out, so the taint is maintenance on its way, not the pool's nature.

Pure: the values are :mod:`slonkd.core.kube_objects`'.
"""

from __future__ import annotations

from collections.abc import Iterable

from slonkd.core.kube_objects import Taint, Toleration, TolerationOperator


def matches(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' rule: ``toleration`` tolerates ``taint`` (the scheduler and kubelet agree)."""
    if toleration.effect is not None and toleration.effect is not taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator is TolerationOperator.EXISTS:
        return True
    return toleration.value == taint.value


def hides(toleration: Toleration, taint: Taint) -> bool:
    """``toleration`` makes ``taint`` the pool's nature: it matches, keyed and for good."""
    return bool(toleration.key) and toleration.seconds is None and matches(toleration, taint)


def tolerated(taint: Taint, tolerations: Iterable[Toleration]) -> bool:
    """Some toleration of the pod makes ``taint`` its pool's nature, not maintenance."""
    return any(hides(t, taint) for t in tolerations)


__all__ = ["hides", "matches", "tolerated"]

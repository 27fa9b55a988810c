"""The pod readiness tracker shared by agent and coordinator: since when Ready, or not."""

from __future__ import annotations

from dataclasses import replace

from slonkd.core.kube_objects import KubeNodeName, Pod, PodName, PodPhase
from slonkd.core.pod_ready import ReadyTracker, epoch, serving

KUBELET = "2026-12-01T10:00:00Z"
T_KUBELET = epoch(KUBELET)


def pod(uid: str = "u1", *, ready: bool = True, terminating: bool = False) -> Pod:
    """Worker pod w-0 (uid ``uid``), Running, Ready since the kubelet's ``KUBELET``."""
    return Pod(
        name=PodName("w-0"),
        namespace="slonk",
        uid=uid,
        resource_version="1",
        node_name=KubeNodeName("kn-0"),
        phase=PodPhase.RUNNING,
        ready=ready,
        ready_since=KUBELET,
        deletion_timestamp="2026-12-01T11:00:00Z" if terminating else None,
    )


def times(t: ReadyTracker) -> tuple[float | None, float | None]:
    """(ready_since, unready_since) of ``t``."""
    return t.ready_since, t.unready_since


def test_serving_is_ready_running_and_not_terminating() -> None:
    """Ready alone is not enough: Running and not terminating too."""
    assert serving(pod())
    assert not serving(None)
    assert not serving(pod(ready=False))
    assert not serving(pod(terminating=True))
    assert not serving(replace(pod(), phase=PodPhase.PENDING))


def test_epoch_reads_rfc3339_or_gives_none() -> None:
    """The apiserver's times as seconds; unreadable or missing: None."""
    assert T_KUBELET == 1_796_119_200.0
    assert epoch(None) is None
    assert epoch("yesterday") is None


def test_the_agent_counts_from_its_first_sight() -> None:
    """Ready since first seen Ready; kept while Ready; not Ready since first seen not Ready."""
    t = ReadyTracker()
    t.observe(pod(), 2_000_000_000.0)
    assert times(t) == (2_000_000_000.0, None)
    t.observe(pod(), 2_000_000_010.0)
    assert t.ready_since == 2_000_000_000.0
    t.observe(pod(ready=False), 2_000_000_020.0)
    t.observe(pod(ready=False), 2_000_000_030.0)
    assert times(t) == (None, 2_000_000_020.0)
    t.observe(pod(), 2_000_000_040.0)
    assert times(t) == (2_000_000_040.0, None)


def test_the_coordinator_starts_from_the_kubelets_time() -> None:
    """A new leader takes the kubelet's Ready time, never later than now."""
    t = ReadyTracker(kubelet_time=True)
    t.observe(pod(), 2_000_000_000.0)
    assert t.ready_since == T_KUBELET
    early = ReadyTracker(kubelet_time=True)
    assert T_KUBELET is not None
    early.observe(pod(), T_KUBELET - 5)  # the kubelet's clock ahead of ours
    assert early.ready_since == T_KUBELET - 5


def test_a_new_pod_or_no_pod_starts_afresh() -> None:
    """A new uid forgets the old pod's times; no pod at all is not Ready from then on."""
    t = ReadyTracker()
    t.observe(pod(ready=False), 100.0)
    t.observe(pod("u2", ready=False), 200.0)
    assert t.unready_since == 200.0
    t.observe(None, 300.0)
    assert (t.uid, t.ready_since, t.unready_since) == ("", None, 300.0)

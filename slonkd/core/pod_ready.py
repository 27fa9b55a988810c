"""How long a worker pod has been Ready, or not Ready: one tracker for agent and coordinator.

``decide`` reads ``pod_ready_since`` (a node is released only once its pod has served a
while) and ``pod_unready_since`` (a pod not Ready for too long is a K8s cause). Both are
tracked per pod uid from the pod caches: a new pod (a new uid) starts afresh, a Ready pod
keeps the time it became Ready, a pod that is not Ready keeps the time it stopped.

The agent counts from its own first sight of the Ready pod. The coordinator starts from the
kubelet's Ready transition time when it first sees a Ready pod, so a new leader does not
mistake an old failure for history. Pure: the caller gives the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from slonkd.core.kube_objects import Pod, PodPhase


def serving(pod: Pod | None) -> bool:
    """Whether ``pod`` serves: Ready, Running, not terminating."""
    return pod is not None and pod.ready and pod.phase is PodPhase.RUNNING and not pod.terminating


def epoch(stamp: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time from the apiserver (None if unreadable)."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(slots=True, kw_only=True)
class ReadyTracker:
    """When one worker pod became Ready, or stopped being Ready (seconds since the epoch)."""

    kubelet_time: bool = False
    """Start a Ready pod first seen from the kubelet's Ready transition time (the
    coordinator); otherwise from the first sight of it Ready (the agent)."""
    uid: str = ""
    ready_since: float | None = None
    unready_since: float | None = None

    def observe(self, pod: Pod | None, now: float) -> None:
        """Update from the pod as cached at ``now`` (None: no pod).

        A Ready time later than ``now`` (the kubelet's clock ahead, or ours stepped back) is
        taken as ``now``: a pod is never ready for less than nothing.
        """
        uid = pod.uid if pod is not None else ""
        if uid != self.uid:
            self.uid, self.ready_since, self.unready_since = uid, None, None
        if pod is not None and serving(pod):
            kubelet = epoch(pod.ready_since) if self.kubelet_time else None
            since = self.ready_since or kubelet or now
            self.ready_since, self.unready_since = min(since, now), None
        else:
            self.ready_since, self.unready_since = None, self.unready_since or now


__all__ = ["ReadyTracker", "epoch", "serving"]

"""Where a finished job ran: the worker pod behind each of its SLURM node names then (pure).

A SLURM node name outlives the pods that serve it: a rollout, an eviction or a preemption
replaces the pod, often on another machine. The job-failure blame judges hardware, so a job
is keyed by its **places**: each node name with the pod that served it when the job started
(:func:`place`, ``w-0@<pod uid>``; the uid fixes the K8s node too, a pod never moves). A
failure on a previous pod never counts against the new one; a job that started before every
pod this leader knows of for a name ran on an earlier, unknown pod (:data:`UNKNOWN_POD`),
which is judged like any place (its partners need it) and can never be drained.

The coordinator records each pod's life from its pod cache (:class:`PodHistory`): its uid, K8s
node, creation time, and when it was asked to go (a deletion request: ``deletionTimestamp``
less the grace period; a ``DisruptionTarget`` condition: preemption, eviction, the kubelet's
termination; a Failed or Succeeded phase, or the pod gone, when first seen). A failure of a
job whose pod was asked to go before the job ended (:data:`SKEW_S` for the two clocks), or
was replaced while it ran, is the pod's own lifecycle, not its hardware (:func:`locate`'s
``lifecycle``): the preStop hook, the kubelet or slurmctld ended the job because the pod went.

Neighbours: :mod:`slonkd.core.job_blame` (the triangulation over places),
:mod:`slonkd.core.kube_objects` (the pods), :mod:`slonkd.core.pod_ready` (their RFC 3339
times); the coordinator's wiring is :mod:`slonkd.runtime.coordinating.job_outcomes`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import NewType

from slonkd.core.kube_objects import Pod, PodPhase
from slonkd.core.pod_ready import epoch
from slonkd.core.slurm_node import NodeName

Place = NewType("Place", str)
"""``node@pod-uid`` (``~N`` appended once an operator's resume retired it, see
:func:`retired`). SLURM node names hold neither ``@`` nor ``~``, pod uids neither ``~``."""

UNKNOWN_POD = "?"
"""The pod of a place whose job started before every pod this leader knows of for the name."""

SKEW_S = 5.0
"""Clock difference allowed between slurmctld's job times and the apiserver's pod times."""

KEEP_LIVES = 8
"""Pods remembered per node name (the oldest are forgotten first)."""


def place(node: NodeName, pod: str, era: int = 0) -> Place:
    """The place of ``node`` served by pod ``pod`` (``era`` > 0: retired by a resume)."""
    key = f"{node}@{pod}"
    return Place(f"{key}~{era}" if era else key)


def place_parts(where: str) -> tuple[NodeName, str, int]:
    """(node name, pod uid, era) of a place."""
    head, _, era = where.partition("~")
    node, _, pod = head.partition("@")
    return NodeName(node), pod, int(era) if era.isdigit() else 0


def retired(where: str, era: int) -> Place:
    """``where`` as it was before an operator's ``era``-th resume of its node.

    A retired place is judged like any (its failed jobs stay evidence for and against their
    other places) but is never drained: it names hardware an operator declared repaired.
    """
    node, pod, _ = place_parts(where)
    return place(node, pod, era)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodLife:
    """One pod of a node name, as the pod cache showed it."""

    uid: str
    kube_node: str
    """The K8s node it was scheduled on ("" while it was not)."""
    created: float
    """``metadata.creationTimestamp`` (seconds since the epoch)."""
    leaving: float | None = None
    """When it was asked to go (None: it was not, as far as this leader saw)."""
    why: str = ""
    """Who asked: the DisruptionTarget reason, ``deleted``, or its phase."""


Lives = Mapping[NodeName, tuple[PodLife, ...]]
"""The pods of each node name, oldest first: an immutable snapshot for :func:`locate`."""


def _leaving(pod: Pod, now: float, gone: bool) -> tuple[float | None, str]:
    """When the pod was asked to go and why, from what the cache shows of it."""
    seen: list[tuple[float, str]] = []
    deleted = epoch(pod.deletion_timestamp)
    if deleted is not None:
        seen.append((deleted - (pod.deletion_grace_s or 0), pod.disruption or "deleted"))
    disrupted = epoch(pod.disruption_since)
    if pod.disruption is not None:
        seen.append((disrupted if disrupted is not None else now, pod.disruption))
    if pod.phase in (PodPhase.FAILED, PodPhase.SUCCEEDED):
        seen.append((now, f"phase {pod.phase.value}"))
    if gone:
        seen.append((now, "deleted"))
    return min(seen) if seen else (None, "")


class PodHistory:
    """The pods of every node name this leader saw, with when each came and was asked to go."""

    def __init__(self) -> None:
        self._lives: dict[NodeName, tuple[PodLife, ...]] = {}

    def observe(self, pod: Pod, now: float, *, gone: bool = False) -> None:
        """Record ``pod`` as the cache holds it at ``now`` (``gone``: its DELETED event)."""
        name = NodeName(pod.name)
        lives = list(self._lives.get(name, ()))
        known = next((i for i, life in enumerate(lives) if life.uid == pod.uid), None)
        leaving, why = _leaving(pod, now, gone)
        if known is not None:
            life = lives[known]
            if leaving is not None and (life.leaving is None or leaving < life.leaving):
                life = replace(life, leaving=leaving, why=why)
            if pod.node_name and not life.kube_node:
                life = replace(life, kube_node=pod.node_name)
            lives[known] = life
        else:
            created = epoch(pod.created)
            if created is None:  # the apiserver always sets it; a replacement seen live: now
                created = now if lives else 0.0
            lives.append(
                PodLife(
                    uid=pod.uid,
                    kube_node=pod.node_name or "",
                    created=created,
                    leaving=leaving,
                    why=why,
                )
            )
            lives.sort(key=lambda life: life.created)
        self._lives[name] = tuple(lives[-KEEP_LIVES:])

    def lives(self) -> Lives:
        """A snapshot (the tuples are never changed in place: safe in another thread)."""
        return dict(self._lives)

    def current(self, node: NodeName) -> PodLife | None:
        """The newest pod of ``node`` this leader saw (it may be going or gone)."""
        lives = self._lives.get(node)
        return lives[-1] if lives else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Located:
    """Where a job ran, and whether its pods' own lifecycle explains its end."""

    places: frozenset[Place]
    lifecycle: str = ""
    """Why a pod of the job went away under it ("" : none did)."""


def locate(
    lives: Lives, nodes: Iterable[NodeName], *, start: float | None, end: float | None, now: float
) -> Located:
    """The places of a job on ``nodes`` that ran from ``start`` to ``end``.

    Each node's place is the pod that served it at the start (at the end when the start is
    not known, at ``now`` when neither is). The job's end is that pod's lifecycle when the
    pod was asked to go before the job ended, or a newer pod of the name existed by then.
    """
    at = start if start is not None else end if end is not None else now
    until = (end if end is not None else now) + SKEW_S
    places: set[Place] = set()
    why = ""
    for node in nodes:
        known = lives.get(node, ())
        ran = None
        later = None
        for life in known:
            if life.created <= at:
                ran = life
            elif later is None:
                later = life
        places.add(place(node, ran.uid if ran is not None else UNKNOWN_POD))
        if why:
            continue
        if ran is not None and ran.leaving is not None and ran.leaving <= until:
            why = f"{node}'s pod {ran.uid} went away ({ran.why}) before the job ended"
        elif later is not None and later.created <= until:
            why = f"{node}'s pod was replaced (by {later.uid}) while the job ran"
    return Located(places=frozenset(places), lifecycle=why)

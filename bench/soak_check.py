"""The soak's checker: every second, from outside slonkd, the invariants of issue 18.

It reads what an operator can read (``sinfo``, ``squeue``, the apiserver, the Lease, the
coordinators' audit logs, ``/proc``) and never slonkd's memory. The one exception is I5:
"agrees with decide()'s verdict" is the leader's ``/v1/status`` drift (the pending actions
of its plan), checked together with the outside reads.

- I1 a SLURM drain/failure (reason and state) or a K8s cordon/taint the soak made as an
  operator stays exactly as the soak left it until the soak undoes it (:class:`Marks`); the
  pools' tolerated taint (:data:`bench.soak_fleet.POOL_TAINT`) stays on every K8s node and
  never drains a node;
- I2 no job ends FAILED/CANCELLED/NODE_FAIL/BOOT_FAIL unless an injected event touched one of
  its nodes while it lived (then it is counted as lost to that event, not hidden);
- I3 no audit record carries a fencing token older than the Lease's token seen before the
  write was allowed (its ``lease_checked_at``: :mod:`slonkd.core.fencing`; else its ``ts``);
- I4 per pool, the SLURM nodes out for slonkd's automated causes (its cordon on their K8s
  node, its ``slonkd:health`` drain, or its rollout's hold: :meth:`Checker.rollout_holds`)
  never exceed the budget's limit;
- I5 convergence: once the churn and the faults stop and the operator undid its changes,
  seconds until each node has converged (:meth:`Checker.node_converged`), within a bound;
  and after each fault, seconds until a leader finishes a pass again (recovery);
- I6 RSS, open fds and live asyncio tasks (``slonkd_asyncio_tasks``, every 30 s) of every
  slonkd process (slopes per role), log lines per minute.

A violation is counted once per distinct key (invariant, node, what) and written to the
time-line with the evidence around it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TypeVar

from bench.soak_fleet import COORDINATOR_CONFIG, NAMESPACE, POOL_TAINT, SoakFleet
from slonkd.core.budget import BudgetPolicy
from slonkd.core.kube_objects import CORDONED_BY_ANNOTATION
from slonkd.core.plan import Kind

INVARIANTS = ("I1", "I2", "I3", "I4", "I5", "I6")
BAD_JOB_STATES = {"FAILED", "CANCELLED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE"}
JOB_KILLERS = {"pod_delete", "slurm_fail", "health_fail", "slurmctld_stop"}
"""Injected events that may end a job (a remediation evicts the pod; its preStop requeues
what it can and the rest ends with its slurmd) or lose state (slurmctld stopped)."""
RECOVERY_CAP_S = 120.0
SINFO_ARGV = ("sinfo", "-h", "-N", "-o", "%N|%T|%E|%u")
SLURM_OUT_WORDS = ("drain", "fail", "down")
"""A node whose sinfo state (``%T``) has one of these is out: drained, draining, fail(ing), down."""
ROLLOUT_REASON = "slonkd:rollout"
"""The reason of the rollout's drain (``sinfo -R``), until a cause ranked above it shows."""
RESTART_READ_S = 30.0
"""How long the checker tries to read SLURM once slurmctld answers a ping again."""
SlurmView = dict[str, tuple[str, str, str]]
"""``{node: (state, reason, reason user)}`` as ``sinfo`` shows an operator."""
_T = TypeVar("_T")


class Timeline:
    """The JSONL time-line: every injected event, every violation, the samples."""

    def __init__(self, path: Path, t0: float) -> None:
        self.path = path
        self.t0 = t0
        self._lock = threading.Lock()
        self._out: IO[str] = path.open("a")

    def write(self, kind: str, **fields: Any) -> None:
        """Append one line (``t``: seconds since the start, ``wall``: epoch seconds)."""
        now = time.time()
        line = json.dumps(
            {"t": round(now - self.t0, 3), "wall": round(now, 3), "kind": kind, **fields},
            default=str,
        )
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._out.close()


@dataclass(slots=True)
class Mark:
    """A foreign (operator or SLURM) change the soak made and has not undone yet."""

    event: int
    since: float
    """When the operator's write had returned (epoch seconds)."""
    reason: str = ""
    key: str = ""
    began: float = 0.0
    """When the operator's write was started (epoch seconds; 0: not known)."""


@dataclass(slots=True)
class Marks:
    """What the soak changed as an operator, shared by the schedule and the checker."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    slurm: dict[str, Mark] = field(default_factory=dict)
    cordons: dict[str, Mark] = field(default_factory=dict)
    taints: dict[str, Mark] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)
    node_events: dict[str, list[tuple[float, str]]] = field(default_factory=dict)

    def take(self, table: dict[str, Mark], node: str, event: int) -> Mark | None:
        """Claim the mark ``event`` left on ``node`` in ``table`` (slurm, cordons, taints).

        The mark leaves ``table`` (:meth:`give_back` returns it) and ``node`` is in flight
        until :meth:`settle`; None, and nothing claimed, when ``table`` holds no mark of that
        event for ``node``.
        """
        with self.lock:
            mark = table.get(node)
            if mark is None or mark.event != event:
                return None
            self.in_flight.add(node)
            del table[node]
            return mark

    def give_back(self, table: dict[str, Mark], node: str, mark: Mark) -> None:
        """Put back a mark :meth:`take` claimed whose undo failed: it is still the operator's.

        The final undo (``Soak.undo_everything`` in bench/soak.py) retries it.
        """
        with self.lock:
            table[node] = mark

    def settle(self, node: str) -> None:
        """The soak's write on ``node`` is over (done, refused or failed): no longer in flight."""
        with self.lock:
            self.in_flight.discard(node)

    def touched(self, node: str, kind: str) -> None:
        """Note an injected event on a SLURM node (for classifying lost jobs)."""
        with self.lock:
            self.node_events.setdefault(node, []).append((time.time(), kind))

    def injected_between(self, nodes: Iterable[str], begin: float, end: float) -> list[str]:
        """The injected job-ending events on ``nodes`` in ``[begin, end]``."""
        with self.lock:
            return [
                f"{kind}@{n}"
                for n in nodes
                for t, kind in self.node_events.get(n, [])
                if kind in JOB_KILLERS and begin <= t <= end
            ]


@dataclass(slots=True)
class Snapshot:
    """One second's outside view (a part is None when its service did not answer)."""

    t: float
    slurm: dict[str, tuple[str, str, str]] | None
    """``{node: (state, reason, reason user)}`` from sinfo."""
    knodes: dict[str, dict[str, Any]] | None
    pods: dict[str, dict[str, Any]] | None
    lease: dict[str, Any] | None


def _client(env: dict[str, str], *argv: str) -> str | None:
    try:
        out = subprocess.run(
            list(argv), env=env, capture_output=True, text=True, timeout=5, check=False
        )
    except subprocess.TimeoutExpired:
        return None
    return out.stdout if out.returncode == 0 else None


def parse_sinfo(out: str) -> SlurmView:
    """The output of :data:`SINFO_ARGV` as ``{node: (state, reason, reason user)}``."""
    view: SlurmView = {}
    for line in out.splitlines():
        name, state, reason, user = [*line.split("|", 3), "", "", ""][:4]
        view[name] = (state, "" if reason == "none" else reason, user)
    return view


def carries(mark: Mark, state: str, reason: str) -> bool:
    """Whether a node read as ``state`` (sinfo's ``%T``) and ``reason`` still holds ``mark``."""
    return reason == mark.reason and any(w in state for w in SLURM_OUT_WORDS)


def poll(
    read: Callable[[], _T | None],
    *,
    timeout_s: float,
    interval_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[_T | None, int]:
    """Call ``read`` until it answers (not None) or ``timeout_s`` has passed: (answer, calls)."""
    began = clock()
    calls = 0
    while True:
        calls += 1
        got = read()
        if got is not None or clock() - began >= timeout_s:
            return got, calls
        sleep(interval_s)


def _slope_per_h(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(t seconds, value)``, per hour."""
    if len(samples) < 3 or samples[-1][0] - samples[0][0] < 30:
        return 0.0
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    return 0.0 if den == 0 else sum((t - mt) * (v - mv) for t, v in samples) / den * 3600


WARM_UP_S = 120.0
"""A process's first two minutes (imports, caches, its first lists, a leader's first passes)."""
MIN_TREND_S = 900.0
"""A trend is read over at least 15 minutes of one process after its warm-up; a shorter span
measures the warm-up (a leader the soak SIGKILLs every few minutes never gets that far)."""


def _trend(samples: list[tuple[float, float]]) -> float | None:
    """The per-hour slope of one process's samples after :data:`WARM_UP_S`, or None.

    None when what is left spans less than :data:`MIN_TREND_S`.
    """
    if not samples:
        return None
    warm = [s for s in samples if s[0] >= samples[0][0] + WARM_UP_S]
    if len(warm) < 3 or warm[-1][0] - warm[0][0] < MIN_TREND_S:
        return None
    return _slope_per_h(warm)


def _larger(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass(slots=True)
class Checker:
    """Runs :meth:`check_once` every second on its own thread (see the module doc)."""

    fleet: SoakFleet
    marks: Marks
    timeline: Timeline
    violations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INVARIANTS, 0))
    seen: set[tuple[str, ...]] = field(default_factory=set)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs_lost: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    jobs_done: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lease_tokens: list[tuple[float, int]] = field(default_factory=list)
    audit_offsets: dict[Path, int] = field(default_factory=dict)
    audit_recent: list[dict[str, Any]] = field(default_factory=list)
    actions: int = 0
    pending_faults: list[tuple[str, float, int]] = field(default_factory=list)
    """(fault, time it ended, the leader's pass count then) waiting for convergence."""
    recovery: dict[str, list[float]] = field(default_factory=dict)
    """Seconds from a fault's end until a leader finished a pass again, per fault kind."""
    proc_samples: dict[tuple[int, str], list[tuple[float, float, float]]] = field(
        default_factory=dict
    )
    task_samples: dict[tuple[int, str], list[tuple[float, float]]] = field(default_factory=dict)
    """(time, live asyncio tasks) per (pid, role), every 30 s from each /metrics."""
    log_offsets: dict[Path, tuple[int, int]] = field(default_factory=dict)
    last_resources: float = 0.0
    checks: int = 0
    foreign_lost: int = 0
    """Foreign SLURM marks lost without a write of slonkd's, to an injected slurmctld stop."""
    foreign_raced: int = 0
    """Foreign SLURM marks an agent's write overwrote inside its compare-and-set window."""
    gaps: list[float] = field(default_factory=list)
    """Seconds between the starts of consecutive checks (1 s unless the reads are slow)."""
    last: Snapshot | None = None
    last_status: dict[str, Any] | None = None
    rollout_held: set[str] = field(default_factory=set)
    """Nodes the rollout holds, as far as sinfo shows (:meth:`rollout_holds`)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        """Check every second until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, name="soak-checker", daemon=True)
        self._thread.start()
        tasks = threading.Thread(target=self._task_loop, name="soak-tasks", daemon=True)
        tasks.start()

    def _task_loop(self) -> None:
        while not self._stop.wait(30.0):
            try:
                self.sample_tasks()
            except Exception as exc:  # noqa: BLE001 - a checker bug must not end the run
                self.timeline.write("checker_error", error=repr(exc)[:500])

    def stop(self) -> None:
        """Stop checking (the current check finishes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _loop(self) -> None:
        next_proc = 0.0
        while not self._stop.is_set():
            began = time.time()
            try:
                self.check_once()
                if began >= next_proc:
                    self.sample_processes()
                    next_proc = began + 5
            except Exception as exc:  # noqa: BLE001 - a checker bug must not end the run
                self.timeline.write("checker_error", error=repr(exc)[:500])
            self._stop.wait(max(0.05, 1.0 - (time.time() - began)))

    # -- reading ---------------------------------------------------------------------------

    def read(self) -> Snapshot:
        """One outside view of SLURM, Kubernetes and the Lease."""
        now = time.time()
        slurm = self.read_slurm()
        knodes = pods = lease = None
        kube = self.fleet.kube
        try:
            api = kube.api
            knodes = {
                n["metadata"]["name"]: n
                for n in api.request("GET", "/api/v1/nodes", timeout_s=5)["items"]
            }
            pods = {
                p["metadata"]["name"]: p
                for p in api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods", timeout_s=5)[
                    "items"
                ]
            }
            lease = self.fleet.lease()
        except Exception:  # noqa: BLE001, S110 - the apiserver is down: those checks wait
            pass
        return Snapshot(t=now, slurm=slurm, knodes=knodes, pods=pods, lease=lease)

    def read_slurm(self) -> SlurmView | None:
        """Every SLURM node as ``sinfo`` shows it (None when slurmctld does not answer in 5 s)."""
        out = _client(self.fleet.env, *SINFO_ARGV)
        return None if out is None else parse_sinfo(out)

    def leader_status(self) -> dict[str, Any] | None:
        """The Lease holder's ``/v1/status`` (None when it does not answer)."""
        try:
            slot = self.fleet.leader()
            if slot is None or slot.stopped:
                return None
            url = f"http://127.0.0.1:{slot.port}/v1/status"
            with urllib.request.urlopen(url, timeout=3) as response:
                body: dict[str, Any] = json.loads(response.read())
            return body if body.get("leading") else None
        except Exception:  # noqa: BLE001 - not answering is an answer
            return None

    # -- the checks ------------------------------------------------------------------------

    def violate(self, invariant: str, key: tuple[str, ...], **evidence: Any) -> None:
        """Count a violation once per key, with its evidence on the time-line."""
        with self._lock:
            if (invariant, *key) in self.seen:
                return
            self.seen.add((invariant, *key))
            self.violations[invariant] += 1
        self.timeline.write("violation", invariant=invariant, key=list(key), **evidence)

    def check_once(self) -> None:
        """Read once and check I1-I5."""
        snap = self.read()
        self.checks += 1
        if self.last is not None:
            self.gaps.append(snap.t - self.last.t)
        self._tail_audit()
        if snap.lease is not None and "leaseTransitions" in snap.lease:
            token = int(snap.lease["leaseTransitions"])
            if not self.lease_tokens or token != self.lease_tokens[-1][1]:
                self.lease_tokens.append((snap.t, token))
                self.timeline.write("lease", holder=snap.lease.get("holderIdentity"), token=token)
        self._check_marks(snap)
        self._check_pool_taint(snap)
        self._check_jobs(snap)
        self._check_budget(snap)
        self._check_recovery()
        self.last = snap

    def _evidence(self, snap: Snapshot, node: str) -> dict[str, Any]:
        """The node as read, the coordinators' audit records and its agent's last writes."""
        audit = [a for a in self.audit_recent if a.get("node") == node][-5:]
        slurm = (snap.slurm or {}).get(node)
        agent: list[dict[str, Any]] = []
        log = self.fleet.logs / f"agent-{node}.log"
        if log.exists():
            for line in log.read_bytes()[-200_000:].decode(errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and str(entry.get("event", "")).startswith(
                    ("agent.mirror", "slurm.")
                ):
                    agent.append(entry)
        return {"slurm": slurm, "audit": audit, "agent": agent[-5:]}

    def _check_marks(self, snap: Snapshot) -> None:
        with self.marks.lock:
            slurm_marks = dict(self.marks.slurm)
            cordons = dict(self.marks.cordons)
            taints = dict(self.marks.taints)
            busy = set(self.marks.in_flight)
        if snap.slurm is not None:
            for node, mark in slurm_marks.items():
                if node in busy or mark.since >= snap.t - 0.05 or node not in snap.slurm:
                    continue
                state, reason, _ = snap.slurm[node]
                if not carries(mark, state, reason):
                    self._slurm_mark_changed(snap, node, mark, [state, reason])
        if snap.knodes is not None:
            for knode, mark in cordons.items():
                if knode in busy or mark.since >= snap.t - 0.05 or knode not in snap.knodes:
                    continue
                if not snap.knodes[knode]["spec"].get("unschedulable"):
                    self.violate("I1", (knode, str(mark.event)), what="operator cordon removed")
            for knode, mark in taints.items():
                if knode in busy or mark.since >= snap.t - 0.05 or knode not in snap.knodes:
                    continue
                keys = {t["key"] for t in snap.knodes[knode]["spec"].get("taints", [])}
                if mark.key not in keys:
                    self.violate("I1", (knode, str(mark.event)), what="operator taint removed")

    def _check_pool_taint(self, snap: Snapshot) -> None:
        """The pools' tolerated taint is no maintenance: it drains nothing and stays put."""
        drained_for = f"slonkd:k8s-tainted:{POOL_TAINT['key'].rsplit('/', 1)[-1]}"
        for node, (state, reason, _) in (snap.slurm or {}).items():
            if reason.replace(";", " ").split(" ", 1)[0] == drained_for:
                self.violate("I1", (node, "pool-taint"), state=state, reason=reason,
                             what="drained for the pool's tolerated taint")  # fmt: skip
        for knode in self.fleet.kube_nodes:
            body = (snap.knodes or {}).get(knode)
            if body is None:
                continue
            if POOL_TAINT["key"] not in {t["key"] for t in body["spec"].get("taints") or []}:
                self.violate("I1", (knode, "pool-taint"), what="the pool's tolerated taint removed")

    def _slurm_mark_changed(self, snap: Snapshot, node: str, mark: Mark, got: list[str]) -> None:
        """A foreign SLURM mark changed: slonkd's doing (I1), or lost to an injected fault.

        Slonkd's doing when one of its processes wrote to the node in SLURM since the mark was
        made (an audit record other than a Kubernetes-only one, an agent's write, a preStop
        run) or when nothing explains it. It is lost to a fault only when slonkd wrote nothing
        and slurmctld was stopped by the soak since. (slurmctld stopped with SIGTERM and
        started again keeps drains, 22.05 and 24.11 alike; the marks once seen "lost" there were
        cleared by the soak's own resume that SLURM refused and applied: see
        :meth:`bench.soak.Soak.do_workload`.)
        """
        evidence = self._evidence(snap, node)
        writes = [
            a
            for a in evidence["audit"]
            if float(a.get("ts", 0)) >= mark.since and a.get("action") not in KUBE_ONLY
        ]
        writes += [a for a in evidence["agent"] if _agent_wrote_after(a, mark)]
        writes += [e for e in self._prestops(node) if float(e["t"]) >= mark.since]
        if writes and all(_raced(w, mark) for w in writes):
            self._forget(node, mark)
            self.foreign_raced += 1
            self.timeline.write("foreign_mark_raced", node=node, want=mark.reason, got=got,
                                operator_write=[mark.began, mark.since], slonkd_writes=writes,
                                **evidence)  # fmt: skip
            return
        restarts = self.marks.injected_between(["slurmctld"], mark.since, snap.t)
        if writes or not restarts:
            self.violate(
                "I1", (node, str(mark.event)), what="foreign SLURM reason/state changed",
                want=mark.reason, got=got, slonkd_writes=writes, **evidence,
            )  # fmt: skip
            return
        self._forget(node, mark)
        self.foreign_lost += 1
        self.timeline.write("foreign_mark_lost", node=node, want=mark.reason, got=got,
                            causes=restarts, **evidence)  # fmt: skip

    def _forget(self, node: str, mark: Mark) -> None:
        with self.marks.lock:
            if self.marks.slurm.get(node) is mark:
                del self.marks.slurm[node]

    def after_slurmctld_restart(
        self,
        read: Callable[[], SlurmView | None] | None = None,
        *,
        timeout_s: float = RESTART_READ_S,
        interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> int:
        """Right after slurmctld answers again: foreign SLURM marks it came back without.

        Reads SLURM (``read``, default :meth:`read_slurm`: sinfo with a 5 s timeout) until it
        answers, for up to ``timeout_s`` (a single read that got no answer used to record
        nothing, silently). A mark missing from the first answer is lost to the injected fault
        (slonkd's agents write again only after that); a mark still there stays under watch.
        slurmctld stopped with SIGTERM keeps drains and their reasons (a drained node not
        registered again reads ``drained``: UNKNOWN+DRAIN), so this is expected to find none.
        What it read goes to the time-line (``slurmctld_restart_read``: calls, seconds, the
        marked nodes as read, the marks lost). Returns the number of marks lost.
        """
        began = clock()
        view, calls = poll(
            read or self.read_slurm, timeout_s=timeout_s, interval_s=interval_s,
            clock=clock, sleep=sleep,
        )  # fmt: skip
        seconds = round(clock() - began, 3)
        if view is None:
            self.timeline.write("slurmctld_restart_read", answered=False, calls=calls,
                                seconds=seconds)  # fmt: skip
            return 0
        lost: list[str] = []
        seen: dict[str, list[str]] = {}
        with self.marks.lock:
            for node, mark in list(self.marks.slurm.items()):
                if node in self.marks.in_flight or node not in view:
                    continue
                state, reason, _ = view[node]
                seen[node] = [state, reason]
                if carries(mark, state, reason):
                    continue
                del self.marks.slurm[node]
                lost.append(node)
                self.foreign_lost += 1
                self.timeline.write("foreign_mark_lost", node=node, want=mark.reason,
                                    got=[state, reason], causes=["slurmctld_restart"])  # fmt: skip
        self.timeline.write("slurmctld_restart_read", answered=True, calls=calls,
                            seconds=seconds, marks=seen, lost=lost)  # fmt: skip
        return len(lost)

    def _prestops(self, node: str) -> list[dict[str, Any]]:
        """The kubelet stand-in's preStop runs for the pod of ``node``."""
        journal = self.fleet.root / "kubelet" / "kubelet-journal.jsonl"
        if not journal.exists():
            return []
        out = []
        for line in journal.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("event") == "prestop.started" and entry.get("pod") == node:
                out.append(entry)
        return out

    def _check_jobs(self, snap: Snapshot) -> None:
        out = _client(self.fleet.env, "squeue", "-h", "-t", "all", "-o", "%i|%T|%N|%r")
        if out is None:
            return
        for line in out.splitlines():
            job_id, state, nodes, reason = [*line.split("|", 3), "", "", ""][:4]
            job = self.jobs.setdefault(job_id, {"first": snap.t, "nodes": set(), "state": ""})
            if nodes:
                job["nodes"].update(_expand(self.fleet.env, nodes))
            if state == job["state"]:
                continue
            job["state"] = state
            if state in BAD_JOB_STATES:
                causes = self.marks.injected_between(job["nodes"], job["first"] - 5, snap.t + 1)
                if causes:
                    self.jobs_lost[state] += 1
                    self.timeline.write("job_lost", job=job_id, state=state, causes=causes)
                else:
                    self.violate(
                        "I2", (job_id,), what=f"job ended {state} with no injected cause",
                        nodes=sorted(job["nodes"]), reason=reason,
                        audit=[a for a in self.audit_recent if a.get("node") in job["nodes"]][-5:],
                    )  # fmt: skip
            elif state in {"COMPLETED", "RUNNING", "PENDING", "REQUEUED", "COMPLETING"}:
                self.jobs_done[state] += state == "COMPLETED"

    def _tail_audit(self) -> None:
        for slot in self.fleet.coordinators:
            path = slot.audit
            if not path.exists():
                continue
            offset = self.audit_offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            self.audit_offsets[path] = offset + end
            for raw in data[:end].splitlines():
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                self._check_token(rec)
                self.audit_recent.append(rec)
        del self.audit_recent[:-500]

    def _check_token(self, rec: dict[str, Any]) -> None:
        if rec.get("dry_run"):
            return
        self.actions += 1
        ts, token = float(rec.get("ts", 0)), int(rec.get("fencing_token", -1))
        # judged when the write was allowed (the lease found valid), not when it returned: a
        # leader stopped mid-write records it after its successor took over
        allowed = float(rec.get("lease_checked_at", ts))
        newer = [tok for t, tok in self.lease_tokens if t + 0.01 < allowed and tok > token]
        if newer:
            self.violate(
                "I3", (str(ts), str(rec.get("node"))), what="audit record with an old token",
                record=rec, newest_token_before=max(newer),
            )  # fmt: skip

    def _check_budget(self, snap: Snapshot) -> None:
        if snap.slurm is None or snap.knodes is None or snap.pods is None:
            return
        policy = BudgetPolicy(
            max_out=int(COORDINATOR_CONFIG["max_out"]),
            max_out_percent=float(COORDINATOR_CONFIG["max_out_percent"]),
            mass_percent=float(COORDINATOR_CONFIG["mass_percent"]),
        )
        pools: dict[str, list[str]] = defaultdict(list)
        for name in self.fleet.names:
            pools[name.rsplit("-", 1)[0]].append(name)
        held = self.rollout_holds(snap.slurm)
        for pool, names in pools.items():
            why: dict[str, list[str]] = {}  # node -> what made it count, for the time-line
            for name in names:
                state, reason, _ = snap.slurm.get(name, ("", "", ""))
                pod = snap.pods.get(name)
                knode = snap.knodes.get(pod["spec"].get("nodeName", "")) if pod else None
                causes = []
                if (
                    knode
                    and knode["spec"].get("unschedulable")
                    and CORDONED_BY_ANNOTATION in (knode["metadata"].get("annotations") or {})
                ):
                    causes.append(f"K8s node {knode['metadata'].get('name')} cordoned by slonkd")
                if reason.startswith("slonkd:health"):
                    causes.append(f"{state}: {reason}")
                if name in held:
                    causes.append(f"{state}: {reason} (held by slonkd's rollout)")
                if causes:
                    why[name] = causes
            limit = policy.limit(len(names))
            if len(why) > limit:
                out = sorted(why)
                kube = {str(c.split()[2]) for cs in why.values() for c in cs if c.startswith("K8s")}
                audit = [  # the leaders' records on these nodes and K8s nodes: who admitted what
                    a for a in self.audit_recent
                    if a.get("node") in why or a.get("kube_node") in kube
                ][-12:]  # fmt: skip
                self.violate(
                    "I4", (pool, ",".join(out)), what="automated outages past the budget",
                    limit=limit, out=out, why=why, audit=audit,
                )  # fmt: skip

    def rollout_holds(self, slurm: SlurmView) -> set[str]:
        """The nodes slonkd's rollout holds now: drained for it, and out ever since.

        sinfo shows one reason, the highest cause of slonkd's set: ``slonkd:rollout`` from
        the rollout's drain until the pod's eviction, then ``slonkd:pod-terminating`` (the
        preStop hook's, a tie the name wins) while the rollout still holds the node. So a
        node is the rollout's from the read that shows its drain until one shows it back in
        service or held by someone else (a reason that is not slonkd's).
        """
        for name, (state, reason, _) in slurm.items():
            out = any(w in state for w in SLURM_OUT_WORDS)
            if out and reason.startswith(ROLLOUT_REASON):
                self.rollout_held.add(name)
            elif not out or not reason.startswith("slonkd:"):
                self.rollout_held.discard(name)
        return self.rollout_held & set(slurm)

    # -- convergence -----------------------------------------------------------------------

    def fault_ended(self, fault: str) -> None:
        """Start the recovery clock of a fault that just ended."""
        status = self.last_status or self.leader_status() or {}
        passes = int((status.get("passes") or {}).get("count", 0))
        with self._lock:
            self.pending_faults.append((fault, time.time(), passes))

    def _check_recovery(self) -> None:
        """A fault has recovered once a leader answers and has finished a pass since it ended."""
        with self._lock:
            pending = list(self.pending_faults)
        if not pending:
            return
        status = self.leader_status()
        now = time.time()
        if status is not None:
            self.last_status = status
        passes = int(((status or {}).get("passes") or {}).get("count", 0))
        keep = []
        for fault, ended, then in pending:
            if status is not None and passes != then:
                self.recovery.setdefault(fault, []).append(now - ended)
                self.timeline.write("recovered", fault=fault, seconds=round(now - ended, 3))
            elif now - ended > RECOVERY_CAP_S:
                self.violate("I5", (fault, str(ended)), what="no leader pass after the fault",
                             seconds=round(now - ended, 1))  # fmt: skip
            else:
                keep.append((fault, ended, then))
        with self._lock:
            self.pending_faults = keep

    def node_converged(self, node: str, row: dict[str, Any] | None, snap: Snapshot) -> bool:
        """Whether ``node`` converged (every cause of an outage being gone).

        The leader has nothing left to do for it, its pod is Ready, and no mark of slonkd's is
        left on it in SLURM or on its K8s node.
        """
        if row is None or (row["drift"] and "budget" not in row):
            return False
        if snap.pods is None or snap.slurm is None or snap.knodes is None:
            return False
        pod = snap.pods.get(node)
        if not _ready(pod) or snap.slurm.get(node, ("", "", ""))[1].startswith("slonkd:"):
            return False
        knode = snap.knodes.get(pod["spec"].get("nodeName", "")) if pod else None
        return knode is not None and not _marked(knode)

    def wait_converged(self, timeout_s: float) -> dict[str, float | None]:
        """Seconds from now until each node has converged (None: not within ``timeout_s``).

        See :meth:`node_converged`; the leader must have finished a pass since now.
        """
        began = time.time()
        start = self.leader_status() or {}
        first = int((start.get("passes") or {}).get("count", 0))
        done: dict[str, float | None] = dict.fromkeys(self.fleet.names)
        while time.time() - began < timeout_s and any(v is None for v in done.values()):
            status = self.leader_status()
            snap = self.read()
            if status is not None and int((status.get("passes") or {}).get("count", 0)) > first:
                rows = {r["node"]: r for r in status.get("nodes") or []}
                for node in self.fleet.names:
                    if done[node] is None and self.node_converged(node, rows.get(node), snap):
                        done[node] = time.time() - began
            time.sleep(0.5)
        return done

    # -- resources -------------------------------------------------------------------------

    def sample_processes(self) -> None:
        """RSS (MB) and open fds of every live slonkd process."""
        now = time.time()
        for pid, role in self.fleet.slonkd_pids().items():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                rss = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS"))
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, StopIteration):
                continue
            self.proc_samples.setdefault((pid, role), []).append((now, rss / 1024, float(fds)))
        if now - self.last_resources >= 30:
            self.last_resources = now
            latest = {
                f"{role}:{pid}": [round(got[-1][1], 1), int(got[-1][2])]
                for (pid, role), got in self.proc_samples.items()
                if got[-1][0] == now
            }
            self.timeline.write("resources", rss_mb_fds=latest)

    def sample_tasks(self) -> None:
        """Live asyncio tasks of every slonkd process, from its ``slonkd_asyncio_tasks``."""
        now = time.time()
        for key, url in self.fleet.metrics_urls().items():
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 - loopback
                    text = resp.read().decode()
            except OSError:
                continue  # stopped, restarting or busy: the next round counts it
            for line in text.splitlines():
                if line.startswith("slonkd_asyncio_tasks "):
                    self.task_samples.setdefault(key, []).append((now, float(line.split()[1])))

    def task_figures(self) -> tuple[dict[str, float], dict[str, float | None]]:
        """Most live tasks seen, and the largest trend (tasks/h, :func:`_trend`), per role."""
        most: dict[str, float] = {"coordinator": 0.0, "agent": 0.0}
        slope: dict[str, float | None] = {"coordinator": None, "agent": None}
        for (_, role), samples in self.task_samples.items():
            most[role] = max(most[role], max(v for _, v in samples))
            slope[role] = _larger(slope[role], _trend(samples))
        return most, slope

    def slopes(self) -> tuple[dict[str, float | None], float | None]:
        """Largest RSS trend (MB/h) per role and largest fd trend (per h), see :func:`_trend`.

        None where no process of the role lived long enough to show one.
        """
        rss: dict[str, float | None] = {"coordinator": None, "agent": None}
        fds: float | None = None
        for (_, role), samples in self.proc_samples.items():
            rss[role] = _larger(rss[role], _trend([(t, r) for t, r, _ in samples]))
            fds = _larger(fds, _trend([(t, f) for t, _, f in samples]))
        return rss, fds

    def longest_lives_min(self) -> dict[str, float]:
        """Per role, the longest any one process was sampled (minutes)."""
        out = {"coordinator": 0.0, "agent": 0.0}
        for (_, role), samples in self.proc_samples.items():
            out[role] = max(out[role], (samples[-1][0] - samples[0][0]) / 60)
        return {k: round(v, 1) for k, v in out.items()}

    def log_lines(self) -> dict[str, int]:
        """Lines each slonkd log has gained since the previous call."""
        out = {}
        for path in sorted(self.fleet.logs.glob("*.log")):
            if path.name == "agent-keeper.log":
                continue
            offset, _ = self.log_offsets.get(path, (0, 0))
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            self.log_offsets[path] = (offset + len(data), 0)
            out[path.name] = data.count(b"\n")
        return out


KUBE_ONLY = frozenset(
    k.value
    for k in (Kind.CORDON, Kind.UNCORDON, Kind.TAINT, Kind.UNTAINT, Kind.SET_CONDITION, Kind.EVENT)
)
"""Audit actions that write only to Kubernetes: they cannot change a SLURM reason (I1)."""


def _agent_wrote_after(entry: dict[str, Any], mark: Mark) -> bool:
    """Whether an agent's logged write may have changed ``mark``: it ended after the mark began.

    A line without ``written_at`` (older agents) counts when it was logged after the mark.
    """
    written = entry.get("written_at")
    if isinstance(written, int | float) and mark.began:
        return float(written) >= mark.began
    return _epoch(entry.get("timestamp")) >= mark.since


def _raced(write: dict[str, Any], mark: Mark) -> bool:
    """Whether an agent's write overwrote ``mark`` inside its compare-and-set window.

    SLURM has no conditional update: the agent reads the node (``read_at``), then writes
    (done by ``written_at``). An operator's write that reached slurmctld in between is
    overwritten, and nothing slonkd can read tells it happened. That is possible only when
    the operator's write (``mark.began`` to ``mark.since``) overlaps the agent's window; a
    write read after the operator's had returned (``read_at > mark.since``) saw the mark,
    and changing it anyway is slonkd's fault (I1). Coordinator and preStop writes carry no
    window: they never count as raced.
    """
    if write.get("event") != "agent.mirror_applied" or write.get("changed") is not True:
        return False  # a skipped write (it read the mark and left it) explains nothing
    if not mark.began:
        return False
    read_at, written_at = write.get("read_at"), write.get("written_at")
    if not isinstance(read_at, int | float) or not isinstance(written_at, int | float):
        return False
    return float(read_at) <= mark.since and float(written_at) >= mark.began


def _epoch(stamp: object) -> float:
    """Epoch seconds of a structlog ISO timestamp (0 when absent or unreadable)."""
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return 0.0


def _ready(pod: dict[str, Any] | None) -> bool:
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return False
    conds = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _marked(knode: dict[str, Any]) -> bool:
    """A cordon, or a ``slonk.dev/`` taint."""
    spec = knode["spec"]
    return bool(spec.get("unschedulable")) or any(
        t["key"].startswith("slonk.dev/") for t in spec.get("taints", [])
    )


_EXPANDED: dict[str, list[str]] = {}


def _expand(env: dict[str, str], hostlist: str) -> list[str]:
    """``scontrol show hostnames`` of a hostlist (cached)."""
    if hostlist not in _EXPANDED:
        out = _client(env, "scontrol", "show", "hostnames", hostlist)
        if out is None:
            return [hostlist]
        _EXPANDED[hostlist] = out.split()
    return _EXPANDED[hostlist]


__all__ = ["INVARIANTS", "Checker", "Mark", "Marks", "Snapshot", "Timeline"]

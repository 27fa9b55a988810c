"""Soak and chaos (issue 18): hours of churn and faults with invariants checked every second.

``python -m bench.soak [--minutes M] [--seed S] [--real R] [--declared D] [--out DIR]``

A fleet on the real services (:mod:`bench.soak_fleet`: R pods bound to real slurmd, D pods
whose SLURM nodes are declared without one, an agent per pod, the coordinator pair), jobs
submitted continuously (a share of them ``--no-requeue``), and a seeded random schedule
(:func:`schedule`: the same seed, sizes and minutes give the same schedule, printed first and
written to the time-line) of workload events and faults, while :mod:`bench.soak_check`
checks the invariants every second from outside slonkd. After ``--minutes`` the workload
and the faults stop, the operator undoes what it did, and the run measures how long slonkd
takes to converge. Output: ``DIR/timeline.jsonl``, a table, and as the last line one JSON
object (issue 18's keys).

Workload kinds: pod deletion, operator drain/undrain, cordon/uncordon, taint/untaint, SLURM
failure (realistic reasons) and resume, health verdict failing/recovering (the agent's mount
check), pause/unpause, budget reset. Faults: SIGKILL of the leader, SIGKILL of the leader
during a bulk cordon, SIGSTOP of the leader past its lease, apiserver restart with an etcd
compaction in between, slurmctld stopped, mosquitto restarted, an agent SIGKILLed, an agent
cut from the broker for 60 s while its pod lives (:mod:`bench.soak_relay`: its connection
black-holed, as a partition looks from both ends). Workload also includes rollouts: a new
template revision of a pool's StatefulSet, which slonkd's job-safe rollout then rolls; besides
the few the workload's weights draw, a share of the failures (:data:`ROLLOUT_OVERLAP`) is
followed within seconds, while it stands, by a rollout of the failing node's pool, so the
rollout's drains race the passes and fast paths that handle the failure for the pool's room.
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.soak_check import Checker, Mark, Marks, Timeline, carries, parse_sinfo
from bench.soak_fleet import COORDINATOR_CONFIG, GRACE_S, NAMESPACE, SoakFleet

WORKLOAD: dict[str, float] = {
    "pod_delete": 3, "op_drain": 2, "op_cordon": 1, "op_taint": 1, "slurm_fail": 2,
    "health_fail": 2, "pause": 0.5, "budget_reset": 0.5, "rollout": 0.15,
}  # fmt: skip
UNDO = {
    "op_drain": "op_undrain", "op_cordon": "op_uncordon", "op_taint": "op_untaint",
    "slurm_fail": "slurm_resume", "health_fail": "health_recover", "pause": "unpause",
}  # fmt: skip
FAULTS = ("leader_sigkill", "leader_sigkill_midbulk", "leader_sigstop", "apiserver_restart",
          "slurmctld_stop", "mosquitto_restart", "agent_sigkill", "agent_cut")  # fmt: skip
LEADER_FAULTS = frozenset({"leader_sigkill", "leader_sigkill_midbulk", "leader_sigstop",
                           "apiserver_restart"})  # fmt: skip
"""Faults that end the leading coordinator's term (its process, or its Lease renewals)."""
CALM_FROM_S = 45 * 60.0
"""Runs this long keep their middle half free of LEADER_FAULTS, so one coordinator lives half
the run and its memory trend is measured (issue 18: the 60-minute run killed every leader
within 7.5 minutes, and a trend needs one process past 15 minutes)."""
AGENT_CUT_S = 60.0
"""How long an agent stays cut from the broker while its pod lives (issue 18)."""
FAIL_REASONS = ("Kill task failed", "Not responding", "Prolog error",
                "batch job complete failure", "NHC: nvidia-smi ECC errors")  # fmt: skip
ROLLOUT_OVERLAP = 0.3
"""The share of SLURM failures and failing health checks followed by a rollout of the failing
node's pool, :data:`ROLLOUT_LAG_S` later (before the failure's undo, 10 s or more after it).
On its weight alone a rollout came about once in five minutes, seldom beside a failure, and
the budget's race between the rollout and the pass went unseen (issue 37 item 3). Drawn from
an RNG of its own, after the rest: a seed's other steps stay as they were (same ids, times,
targets), so a run of an older seed is replayed with these rollouts added."""
ROLLOUT_LAG_S = (0.0, 8.0)
TAINT_KEY = "ops.example.com/maintenance"
READ_BACK_S = 30.0
"""How long an operator's write whose answer was lost waits for a read that judges it."""
MAX_OUTAGE_LINES_PER_MIN = 60.0
MAX_RSS_SLOPE_MB_PER_H = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One scheduled event: at ``at`` seconds after the start, do ``kind`` to ``target``."""

    id: int
    at: float
    kind: str
    target: str = ""
    arg: float = 0.0
    undo_of: int = -1


def schedule(seed: int, *, seconds: float, names: list[str], kube_nodes: list[str],
             outage_s: tuple[float, float] = (30, 90),
             relayed: list[str] | None = None) -> list[Step]:  # fmt: skip
    """The run's events, a pure function of its arguments (the replay guarantee).

    ``relayed``: the pods whose agents can be cut from the broker (default: the first 3).
    """
    cuttable = relayed if relayed is not None else names[:3]
    rng = random.Random(seed)  # noqa: S311 - a replayable schedule, not a secret
    steps: list[Step] = []
    t = 5.0
    kinds, weights = list(WORKLOAD), list(WORKLOAD.values())
    while True:
        t += rng.expovariate(1 / 4.0)
        if t >= seconds:
            break
        kind = rng.choices(kinds, weights)[0]
        target = rng.choice(kube_nodes if kind in {"op_cordon", "op_taint"} else names)
        step = Step(id=len(steps), at=round(t, 2), kind=kind, target=target)
        steps.append(step)
        if kind in UNDO:
            undo_at = round(t + rng.uniform(10, 20 if kind == "pause" else 40), 2)
            steps.append(Step(id=len(steps), at=undo_at, kind=UNDO[kind], target=target,
                              undo_of=step.id))  # fmt: skip
    t = 15.0
    order: list[str] = []
    calm = (seconds / 4, seconds * 3 / 4) if seconds >= CALM_FROM_S else (0.0, 0.0)
    while t < seconds - 10:
        if not order:
            order = rng.sample(FAULTS, len(FAULTS))
        kind = order.pop(0)
        if calm[0] <= t < calm[1] and kind in LEADER_FAULTS:
            continue  # dropped, not postponed: the next kind of the order takes its place
        arg = {
            "slurmctld_stop": rng.uniform(*outage_s),
            "leader_sigkill_midbulk": rng.uniform(0.05, 0.8),
            "leader_sigstop": float(COORDINATOR_CONFIG["lease_duration_s"]) + 4,
            "agent_cut": AGENT_CUT_S,
        }.get(kind, 0.0)
        pick = {"agent_sigkill": names, "agent_cut": cuttable}.get(kind)
        target = rng.choice(pick) if pick else ""
        steps.append(
            Step(id=len(steps), at=round(t, 2), kind=kind, target=target, arg=round(arg, 2))
        )
        # an agent cut runs beside the next faults (overlapping faults are the point)
        t += (0.0 if kind == "agent_cut" else arg) + rng.uniform(12, 25)
    steps += _overlapping_rollouts(seed, steps, seconds=seconds)
    return sorted(steps, key=lambda s: (s.at, s.id))


def _overlapping_rollouts(seed: int, steps: list[Step], *, seconds: float) -> list[Step]:
    """Rollouts of the failing node's pool right after a share of the failures (see above)."""
    rng = random.Random(f"{seed}/rollouts")  # noqa: S311 - replayable, and apart from the rest
    added: list[Step] = []
    for step in [s for s in steps if s.kind in {"slurm_fail", "health_fail"}]:
        if rng.random() >= ROLLOUT_OVERLAP:
            continue
        at = round(step.at + rng.uniform(*ROLLOUT_LAG_S), 2)
        if at < seconds:
            added.append(
                Step(id=len(steps) + len(added), at=at, kind="rollout", target=step.target)
            )
    return added


class Soak:
    """The run: fleet, checker, the schedule's executors and the job submitter."""

    def __init__(self, fleet: SoakFleet, timeline: Timeline, seed: int, steps: list[Step]) -> None:
        self.fleet = fleet
        self.timeline = timeline
        self.seed = seed
        self.steps = steps
        self.marks = Marks()
        self.checker = Checker(fleet=fleet, marks=self.marks, timeline=timeline)
        self.t0 = time.time()
        self.stop = threading.Event()
        self.faults = 0
        self.workload = 0
        self.jobs_submitted = 0
        self.outage_lines: list[float] = []
        self.outage_per_process: list[dict[str, float]] = []
        self.cuts: list[threading.Thread] = []
        """Agent cuts in progress (each heals itself after its time)."""
        self.ops: queue.Queue[tuple[Step, list[str]] | None] = queue.Queue()
        self.ended = threading.Event()
        """Set when the fleet stops (``stop`` ends the churn earlier, before the settling)."""
        self.control_plane_restarts = 0
        """kube-scheduler/kcm exits the harness restarted, as a kubelet restarts static pods."""

    # -- helpers ---------------------------------------------------------------------------

    def sleep_until(self, at: float) -> bool:
        """Wait until ``at`` seconds after the start; False when told to stop."""
        return not self.stop.wait(max(0.0, self.t0 + at - time.time()))

    def scontrol(self, *args: str) -> bool:
        """``scontrol update ...`` as an operator; False when SLURM refused or is away."""
        return self.fleet.slurm.run("scontrol", "update", *args, check=False).returncode == 0

    def slurm_node(self, node: str) -> tuple[str, str] | None:
        """``node``'s state and reason as sinfo shows an operator (None: no answer)."""
        try:
            got = self.fleet.slurm.run(
                "sinfo", "-h", "-N", "-n", node, "-o", "%N|%T|%E|%u", check=False
            )
        except subprocess.TimeoutExpired:
            return None
        row = parse_sinfo(got.stdout).get(node) if got.returncode == 0 else None
        return None if row is None else (row[0], row[1])

    def patch_node(self, knode: str, body: Any, *, json_patch: bool = False) -> None:
        """PATCH a K8s node (merge patch, or a JSON patch)."""
        kind = "application/json-patch+json" if json_patch else "application/merge-patch+json"
        self.fleet.kube.api.request("PATCH", f"/api/v1/nodes/{knode}", body, content_type=kind,
                                    timeout_s=10)  # fmt: skip

    def slonkd_cli(self, *args: str) -> int:
        """An operator's ``slonkd`` command (pause, budget reset ...)."""
        return subprocess.run(
            [sys.executable, "-m", "slonkd.cli.main", *args], env=self.fleet.env,
            capture_output=True, timeout=60, check=False,
        ).returncode  # fmt: skip

    # -- workload --------------------------------------------------------------------------

    def run_workload(self) -> None:
        """Execute the schedule's workload steps in time order."""
        for step in self.steps:
            if step.kind in FAULTS:
                continue
            if not self.sleep_until(step.at):
                return
            try:
                outcome = self.do_workload(step)
            except Exception as exc:  # noqa: BLE001 - a refused step is recorded, the run goes on
                outcome = f"failed: {exc!r}"[:300]
            self.workload += outcome == "done"
            self.timeline.write("event", step=asdict(step), outcome=outcome)

    def do_workload(self, step: Step) -> str:
        """One workload step; returns ``done`` or why it was skipped."""
        m, kind, target = self.marks, step.kind, step.target
        last = self.checker.last
        if kind == "pod_delete":
            self.marks.touched(target, kind)
            self.fleet.kube.api.request(
                "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{target}",
                {"gracePeriodSeconds": GRACE_S}, ok=(200, 202), timeout_s=10,
            )  # fmt: skip
            return "done"
        if kind in {"op_drain", "slurm_fail"}:
            reason = (f"ops: maintenance ticket {step.id}" if kind == "op_drain"
                      else self.rng_reason(step))  # fmt: skip
            with m.lock:
                if target in m.slurm:
                    return "skipped: marked already"
                current = (last.slurm or {}).get(target) if last else None
                if current is None or current[1]:
                    return "skipped: node has a reason"
                m.in_flight.add(target)
            try:
                if kind == "slurm_fail":
                    self.marks.touched(target, kind)
                state = "drain" if kind == "op_drain" else "fail"
                began = time.time()
                if not self.scontrol(f"nodename={target}", f"state={state}", f"reason={reason}"):
                    return "skipped: scontrol failed"
                with m.lock:
                    m.slurm[target] = Mark(
                        event=step.id, since=time.time(), reason=reason, began=began
                    )
            finally:
                m.settle(target)
            return "done"
        if kind in {"op_undrain", "slurm_resume"}:
            mark = m.take(m.slurm, target, step.undo_of)
            if mark is None:
                return "skipped: nothing to undo"
            try:
                # SLURM's own answer just before the resume, not the checker's last read: that
                # one can predate the drain (seed 2026: a drain queued through a slurmctld outage
                # was applied 0.23 s before its undo, and a refused-yet-applied resume read
                # as slonkd taking an operator's drain away, a false I1)
                before = self.slurm_node(target)
                if self.scontrol(f"nodename={target}", "state=resume"):
                    return "done"
                # SLURM can refuse a resume and apply it: a node not registered again since
                # slurmctld restarted (UNKNOWN+DRAIN) loses DRAIN (on 22.05 its reason too),
                # then the answer is "Invalid node state specified" (22.05 and 24.11, see
                # tests/contract/test_slurm_restart_drain.py). The operator's own undo took
                # the mark away: it is neither lost to the fault nor slonkd's change.
                after = self.slurm_node(target)
                if (
                    after is not None
                    and not carries(mark, *after)
                    and (before is None or carries(mark, *before))
                ):
                    self.timeline.write("resume_refused_but_applied", node=target,
                                        before=before, after=after)  # fmt: skip
                    return "done"
                m.give_back(m.slurm, target, mark)
                return "failed: scontrol failed, kept"
            finally:
                m.settle(target)
        if kind == "op_cordon":
            with m.lock:
                knode = (last.knodes or {}).get(target) if last else None
                if target in m.cordons or knode is None or knode["spec"].get("unschedulable"):
                    return "skipped: cordoned already"
                m.in_flight.add(target)
            try:
                why = self.set_cordon(target, cordoned=True)
                if why is not None:
                    return why
                with m.lock:
                    m.cordons[target] = Mark(event=step.id, since=time.time())
            finally:
                m.settle(target)
            return "done"
        if kind == "op_uncordon":
            return self.uncordon(target, step.undo_of)
        if kind == "op_taint":
            return self.taint(target, step.id)
        if kind == "op_untaint":
            return self.untaint(target, step.undo_of)
        if kind in {"health_fail", "health_recover"}:
            if kind == "health_fail":
                self.marks.touched(target, kind)
            self.fleet.point_mount(target, healthy=kind == "health_recover")
            return "done"
        if kind == "rollout":  # a new template revision: slonkd's job-safe rollout takes over
            pool = target.rsplit("-", 1)[0]
            template = {"metadata": {"annotations": {"soak/rev": str(step.id)}}}
            patch = {"spec": {"template": template}}
            self.fleet.kube.api.request(
                "PATCH", f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/{pool}", patch,
                content_type="application/merge-patch+json", timeout_s=10,
            )  # fmt: skip
            return "done"
        if kind in {"pause", "unpause", "budget_reset"}:
            argv = {"pause": ["pause", "--reason", f"soak-{step.id}"], "unpause": ["unpause"],
                    "budget_reset": ["budget", "reset"]}[kind]  # fmt: skip
            self.ops.put((step, argv))  # the CLI takes seconds to start: in order, off this thread
            return "queued"
        return f"unknown kind {kind}"

    def run_ops(self) -> None:
        """Run the operator's ``slonkd`` commands in the order the schedule queued them."""
        while True:
            item = self.ops.get()
            if item is None:
                return
            step, argv = item
            try:
                rc = self.slonkd_cli(*argv)
            except subprocess.TimeoutExpired as exc:  # a slow CLI is an outcome, not the end
                self.timeline.write("event", step=asdict(step), outcome=f"timed out: {exc}"[:200])
                continue
            self.workload += rc == 0
            self.timeline.write(
                "event", step=asdict(step), outcome="done" if rc == 0 else f"rc {rc}"
            )

    def rng_reason(self, step: Step) -> str:
        """A SLURM-style failure reason, chosen by the step (replayable)."""
        return FAIL_REASONS[step.id % len(FAIL_REASONS)]

    def uncordon(self, knode: str, event: int) -> str:
        """Undo the soak's own cordon of ``knode`` made by ``event``."""
        m = self.marks
        mark = m.take(m.cordons, knode, event)
        if mark is None:
            return "skipped: nothing to undo"
        try:
            why = self.set_cordon(knode, cordoned=False)
            if why is not None:
                m.give_back(m.cordons, knode, mark)
                return f"{why}, kept"
        finally:
            m.settle(knode)
        return "done"

    def set_cordon(self, knode: str, *, cordoned: bool) -> str | None:
        """Cordon or uncordon ``knode`` as an operator; None once it holds, else why not."""
        return self.write_node(
            knode,
            {"spec": {"unschedulable": cordoned}},
            holds=lambda node: bool(node["spec"].get("unschedulable")) is cordoned,
        )

    def write_node(
        self, knode: str, body: Any, *, holds: Callable[[dict[str, Any]], bool],
        json_patch: bool = False,
    ) -> str | None:  # fmt: skip
        """PATCH ``knode`` as an operator; None once the node ``holds`` it, else why not.

        A PATCH whose answer is lost (the apiserver killed while it took it) may have landed:
        the node is read again, for up to :data:`READ_BACK_S` while the apiserver is away,
        and the outcome judged on that read, never assumed.
        """
        try:
            self.patch_node(knode, body, json_patch=json_patch)
            return None
        except Exception as exc:  # noqa: BLE001 - judged on a read below
            error = f"{type(exc).__name__}: {exc}"[:200]
        deadline = time.monotonic() + READ_BACK_S
        while True:
            try:
                node = self.fleet.kube.api.request("GET", f"/api/v1/nodes/{knode}", timeout_s=10)
            except Exception:  # noqa: BLE001 - the apiserver is away: read again
                if time.monotonic() >= deadline:
                    return f"failed: {error}; no read in {READ_BACK_S:.0f} s"
                time.sleep(1)
                continue
            if holds(node):
                self.timeline.write("outcome_read", node=knode, body=body, error=error)
                return None
            return f"failed: {error}"

    def taint(self, knode: str, event: int) -> str:
        """Add the operator's taint (a JSON patch with a resourceVersion test: nothing lost)."""
        m = self.marks
        with m.lock:
            if knode in m.taints:
                return "skipped: tainted already"
            m.in_flight.add(knode)
        try:
            node = self.fleet.kube.api.request("GET", f"/api/v1/nodes/{knode}", timeout_s=10)
            taints = node["spec"].get("taints") or []
            taint = {"key": TAINT_KEY, "value": f"t{event}", "effect": "NoSchedule"}
            ops: list[dict[str, Any]] = [
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": node["metadata"]["resourceVersion"]},
                {"op": "add", "path": "/spec/taints/-" if taints else "/spec/taints",
                 "value": taint if taints else [taint]},
            ]  # fmt: skip
            why = self.write_node(knode, ops, json_patch=True, holds=lambda body: taint in (
                body["spec"].get("taints") or []))  # fmt: skip
            if why is not None:
                return why
            with m.lock:
                m.taints[knode] = Mark(event=event, since=time.time(), key=TAINT_KEY)
        finally:
            m.settle(knode)
        return "done"

    def untaint(self, knode: str, event: int) -> str:
        """Remove the soak's own taint (JSON patch, resourceVersion tested)."""
        m = self.marks
        mark = m.take(m.taints, knode, event)
        if mark is None:
            return "skipped: nothing to undo"
        try:
            for _ in range(5):
                try:
                    node = self.fleet.kube.api.request(
                        "GET", f"/api/v1/nodes/{knode}", timeout_s=10
                    )
                except Exception:  # noqa: BLE001 - the apiserver is away: try again
                    time.sleep(1)
                    continue
                taints = node["spec"].get("taints") or []
                index = next((i for i, t in enumerate(taints) if t["key"] == TAINT_KEY), None)
                if index is None:
                    return "done: gone already"
                ops = [
                    {"op": "test", "path": "/metadata/resourceVersion",
                     "value": node["metadata"]["resourceVersion"]},
                    {"op": "remove", "path": f"/spec/taints/{index}"},
                ]  # fmt: skip
                try:
                    self.patch_node(knode, ops, json_patch=True)
                    return "done"
                except Exception:  # noqa: BLE001 - a conflict: read again
                    time.sleep(0.2)
            m.give_back(m.taints, knode, mark)
            return "failed: conflicts, kept"
        finally:
            m.settle(knode)

    # -- faults ----------------------------------------------------------------------------

    def run_faults(self) -> None:
        """Execute the schedule's faults in time order.

        On the main thread: a coordinator started again by a thread dies with that thread.
        """
        for step in self.steps:
            if step.kind not in FAULTS:
                continue
            if not self.sleep_until(step.at):
                return
            self.timeline.write("fault_start", step=asdict(step))
            try:
                outcome = self.do_fault(step)
            except Exception as exc:  # noqa: BLE001 - recorded; the run goes on
                outcome = f"failed: {exc!r}"[:300]
            self.faults += outcome == "done"
            self.timeline.write("fault_end", step=asdict(step), outcome=outcome)
            self.checker.fault_ended(step.kind)

    def do_fault(self, step: Step) -> str:
        """One fault; returns when it is over (``done``) or why it was skipped."""
        f = self.fleet
        if step.kind in {"leader_sigkill", "leader_sigkill_midbulk", "leader_sigstop"}:
            slot = f.leader()
            if slot is None or slot.pid is None:
                return "skipped: no live leader"
            bulk: list[str] = []
            if step.kind == "leader_sigkill_midbulk":
                bulk = self.bulk_cordon(step)
                time.sleep(step.arg)
            if step.kind == "leader_sigstop":
                f.signal_coordinator(slot, signal.SIGSTOP)
                time.sleep(step.arg)
                f.signal_coordinator(slot, signal.SIGCONT)
                return "done"
            f.signal_coordinator(slot, signal.SIGKILL)
            self.timeline.write("leader_killed", slot=slot.identity, bulk=bulk)
            time.sleep(2)
            f.respawn(slot)
            if bulk:  # the operator uncordons the rack later, off this thread
                timer = threading.Timer(12, lambda: [self.uncordon(k, step.id) for k in bulk])
                timer.daemon = True
                timer.start()
            return "done"
        if step.kind == "apiserver_restart":
            f.kube.kill_apiserver()
            revision = f.kube.compact_etcd()
            f.kube.start_apiserver()
            self.timeline.write("etcd_compacted", revision=revision)
            return "done"
        if step.kind == "slurmctld_stop":
            self.checker.log_lines()
            began = time.time()
            self.marks.touched("slurmctld", step.kind)
            f.slurm.stop_slurmctld()
            time.sleep(step.arg)
            lines = self.checker.log_lines()
            minutes = (time.time() - began) / 60
            per_min = {k: round(v / minutes, 1) for k, v in lines.items()}
            self.outage_lines.append(max(per_min.values(), default=0.0))
            self.outage_per_process.append(per_min)
            self.timeline.write("outage_log_lines_per_min", per_process=per_min)
            f.slurm.start_slurmctld()
            self.checker.after_slurmctld_restart()
            return "done"
        if step.kind == "mosquitto_restart":
            f.mqtt.restart()
            return "done"
        if step.kind == "agent_cut":  # the next faults overlap it
            cut = threading.Thread(target=self.cut_agent, args=(step,), name="soak-cut")
            cut.daemon = True
            cut.start()
            self.cuts.append(cut)
            return "done"
        if step.kind == "agent_sigkill":
            with f.keeper._lock:  # the keeper's own lock
                agent = f.keeper.agents.get(step.target)
                if agent is None or agent.proc.poll() is not None:
                    return "skipped: no live agent"
                agent.proc.send_signal(signal.SIGKILL)
            return "done"
        return f"unknown fault {step.kind}"

    def cut_agent(self, step: Step) -> str:
        """Black-hole one agent's broker connection for ``step.arg`` s while its pod lives.

        Then the agent must be back on the bus (a new ``bus.connected`` in its log) within
        60 s of the heal, or that is an I5 violation (it never recovers by itself).
        """
        relays, pod = self.fleet.relays, step.target
        if pod not in relays.names:
            self.timeline.write("agent_cut_over", pod=pod, skipped="no relay")
            return f"skipped: {pod} has no relay"
        log = self.fleet.logs / f"agent-{pod}.log"
        relays.cut(pod)
        began = log.stat().st_size if log.exists() else 0
        time.sleep(step.arg)
        during = log.read_bytes()[began:] if log.exists() else b""
        relays.heal(pod)
        healed = log.stat().st_size if log.exists() else 0
        back = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.stop.is_set():
            if b'"bus.connected"' in log.read_bytes()[healed:]:
                back = round(60 - (deadline - time.monotonic()), 1)
                break
            time.sleep(0.5)
        noticed = b'"bus.reconnecting"' in during
        self.timeline.write("agent_cut_over", pod=pod, noticed_during_cut=noticed, back_s=back)
        if back is None and not self.stop.is_set():
            self.checker.violate("I5", ("agent_cut", pod, str(step.id)),
                                 what="agent not back on the bus 60 s after the heal")  # fmt: skip
        return "done"

    def bulk_cordon(self, step: Step) -> list[str]:
        """Cordon three uncordoned K8s nodes at once (the leader mirrors them in bulk)."""
        last = self.checker.last
        free = sorted(
            n for n, body in ((last.knodes or {}) if last else {}).items()
            if n in self.fleet.kube_nodes and not body["spec"].get("unschedulable")
            and n not in self.marks.cordons
        )  # fmt: skip
        chosen = random.Random(step.id).sample(free, min(3, len(free)))  # noqa: S311 - replayable
        done = []
        for knode in chosen:
            with self.marks.lock:
                self.marks.in_flight.add(knode)
            try:
                if self.set_cordon(knode, cordoned=True) is None:
                    with self.marks.lock:
                        self.marks.cordons[knode] = Mark(event=step.id, since=time.time())
                    done.append(knode)
            finally:
                self.marks.settle(knode)
        return done

    # -- jobs ------------------------------------------------------------------------------

    def run_jobs(self) -> None:
        """Keep the real nodes busy: a job every ~2 s while few are pending (30 % no-requeue)."""
        rng = random.Random(self.seed + 1)  # noqa: S311 - replayable
        declared = self.fleet.declared_names  # no slurmd there: a job would only wait and die
        exclude = [f"--exclude={','.join(declared)}"] if declared else []
        while not self.stop.wait(rng.uniform(1, 3)):
            requeue = rng.random() >= 0.3
            length = rng.randint(15, 60)
            pending = self.fleet.slurm.run("squeue", "-h", "-t", "PD", "-o", "%i", check=False)
            if pending.returncode != 0 or len(pending.stdout.split()) >= self.fleet.real:
                continue
            got = self.fleet.slurm.run(
                "sbatch", "--parsable", "-N1", "-o", "/dev/null", *exclude,
                "--requeue" if requeue else "--no-requeue", f"--wrap=sleep {length}",
                check=False,
            )  # fmt: skip
            if got.returncode == 0:
                self.jobs_submitted += 1
                self.timeline.write("job", id=got.stdout.strip(), requeue=requeue, sleep=length)

    def supervise(self) -> None:
        """Restart an exited kube-scheduler or kcm every 2 s, as a kubelet does its static pods.

        kube-scheduler exits by design when a relist shows a pod on another node than its
        cache had (after the apiserver restart with an etcd compaction): on a real control
        plane its kubelet starts it again; without that every new pod would stay Pending.
        """
        while not self.ended.wait(2.0):
            try:
                names = self.fleet.kube.revive(timeout_s=30.0)
            except Exception as exc:  # noqa: BLE001 - the apiserver is away: next round
                self.timeline.write("control_plane_restart_failed", error=repr(exc)[:300])
                continue
            if names:
                self.control_plane_restarts += len(names)
                self.timeline.write("control_plane_restarted", components=names)

    # -- the end ---------------------------------------------------------------------------

    def undo_everything(self) -> None:
        """The operator puts back what it changed: resumes, uncordons, untaints, heals."""
        for cut in self.cuts:  # a cut agent is healed by its own thread
            cut.join(timeout=AGENT_CUT_S + 70)
        m = self.marks
        with m.lock:
            slurm, cordons, taints = dict(m.slurm), dict(m.cordons), dict(m.taints)
        for node, mark in slurm.items():
            self.do_workload(Step(id=-1, at=0, kind="op_undrain", target=node, undo_of=mark.event))
        for knode, mark in cordons.items():
            self.uncordon(knode, mark.event)
        for knode, mark in taints.items():
            self.untaint(knode, mark.event)
        for pod in self.fleet.names:
            self.fleet.point_mount(pod, healthy=True)
        self.slonkd_cli("unpause")
        self.slonkd_cli("budget", "reset")
        self.timeline.write("undone", slurm=sorted(slurm), cordons=sorted(cordons),
                            taints=sorted(taints))  # fmt: skip


def judge_resources(soak: Soak, *, minutes: float) -> None:
    """I6 against issue 18's bounds.

    Log lines per minute of each process during a slurmctld outage (any run), and the RSS
    trend per role (runs of 30 minutes or more; a role none of whose processes lived 15
    minutes past its warm-up has no trend, None in the result: not measured, not passed).
    """
    for per_process in soak.outage_per_process:
        for name, per_min in per_process.items():
            if per_min > MAX_OUTAGE_LINES_PER_MIN:
                soak.checker.violate("I6", ("log", name), what="log volume during the outage",
                                     lines_per_min=per_min)  # fmt: skip
    if minutes >= 30:
        rss, _ = soak.checker.slopes()
        for role, slope in rss.items():
            if slope is not None and slope > MAX_RSS_SLOPE_MB_PER_H:
                soak.checker.violate("I6", ("rss", role), what="RSS grows", mb_per_h=slope)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _pct(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    """Run the soak; print the table and the JSON line."""
    p = argparse.ArgumentParser(prog="bench.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--real", type=int, default=20, help="pods bound to a real slurmd")
    p.add_argument("--declared", type=int, default=80, help="pods of declared SLURM nodes")
    p.add_argument("--outage", default="30,90", help="slurmctld outage seconds: min,max")
    p.add_argument("--settle-s", type=float, default=180.0, help="the final convergence bound")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    out = args.out or Path(tempfile.mkdtemp(prefix="slonkd-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"soak: seed {seed}, {args.minutes} min, {args.real} real + {args.declared} declared,"
          f" in {out}", flush=True)  # fmt: skip
    fleet = SoakFleet(root=out / "fleet", real=args.real, declared=args.declared)
    started = time.time()
    fleet.start()
    print(f"soak: fleet up in {time.time() - started:.0f} s", flush=True)
    low, high = (float(x) for x in args.outage.split(","))
    steps = schedule(seed, seconds=args.minutes * 60, names=fleet.names,
                     kube_nodes=fleet.kube_nodes, outage_s=(low, high),
                     relayed=fleet.relayed_names)  # fmt: skip
    timeline = Timeline(out / "timeline.jsonl", time.time())
    timeline.write("schedule", seed=seed, real=args.real, declared=args.declared,
                   minutes=args.minutes, steps=[asdict(s) for s in steps])  # fmt: skip
    soak = Soak(fleet, timeline, seed, steps)
    soak.t0 = timeline.t0
    final: dict[str, float | None] = {}
    try:
        soak.checker.start()
        threads = [threading.Thread(target=soak.run_workload, name="workload", daemon=True),
                   threading.Thread(target=soak.run_jobs, name="jobs", daemon=True),
                   threading.Thread(target=soak.run_ops, name="ops", daemon=True)]  # fmt: skip
        threading.Thread(target=soak.supervise, name="supervise", daemon=True).start()
        for t in threads:
            t.start()
        soak.run_faults()
        soak.sleep_until(args.minutes * 60)
        soak.stop.set()
        soak.ops.put(None)
        for t in threads:
            t.join(timeout=120)
        timeline.write("churn_over")
        soak.undo_everything()
        final = soak.checker.wait_converged(args.settle_s)
        timeline.write("final_convergence", per_node=final)
        late = [node for node, seconds in final.items() if seconds is None]
        if late:
            rows = {r["node"]: r for r in (soak.checker.leader_status() or {}).get("nodes") or []}
            snap = soak.checker.read()
            for node in late:
                soak.checker.violate(
                    "I5", ("final", node), what=f"not converged in {args.settle_s} s",
                    row=rows.get(node), slurm=(snap.slurm or {}).get(node),
                )  # fmt: skip
        soak.checker.sample_processes()
    finally:
        soak.stop.set()
        soak.ended.set()
        soak.checker.stop()
        fleet.stop()
    checker = soak.checker
    judge_resources(soak, minutes=args.minutes)
    convergence = [v for v in final.values() if v is not None]
    recovery = [v for samples in checker.recovery.values() for v in samples]
    rss, fds = checker.slopes()
    tasks_max, tasks_slope = checker.task_figures()
    violations = dict(checker.violations)
    result: dict[str, Any] = {
        "seed": seed,
        "soak_minutes": round(args.minutes, 2),
        "real_nodes": args.real,
        "declared_nodes": args.declared,
        "faults_injected": soak.faults,
        "workload_events": soak.workload,
        "jobs_submitted": soak.jobs_submitted,
        "jobs_completed": checker.jobs_done.get("COMPLETED", 0),
        "jobs_lost_to_injected_faults": sum(checker.jobs_lost.values()),
        "foreign_marks_lost_to_injected_faults": checker.foreign_lost,
        "foreign_marks_lost_to_slurm_race": checker.foreign_raced,
        "actions_taken": checker.actions,
        "control_plane_restarts": soak.control_plane_restarts,
        "checks": checker.checks,
        "check_gap_p50_s": round(statistics.median(checker.gaps), 3) if checker.gaps else None,
        "check_gap_max_s": round(max(checker.gaps), 3) if checker.gaps else None,
        "violations": {"total": sum(violations.values()), **violations},
        "convergence_p50_s": round(statistics.median(convergence), 3) if convergence else None,
        "convergence_p99_s": round(_pct(convergence, 0.99), 3) if convergence else None,
        "convergence_max_s": round(max(convergence), 3) if convergence else None,
        "nodes_not_converged": sum(v is None for v in final.values()),
        "recovery_max_s": {k: round(max(v), 3) for k, v in sorted(checker.recovery.items())},
        "recovery_p50_s": round(statistics.median(recovery), 3) if recovery else None,
        "rss_slope_mb_per_h": {k: _round(v) for k, v in rss.items()},
        "rss_longest_process_min": checker.longest_lives_min(),
        "fd_slope_per_h": _round(fds),
        "asyncio_tasks_max": {k: int(v) for k, v in tasks_max.items()},
        "asyncio_tasks_slope_per_h": {k: _round(v) for k, v in tasks_slope.items()},
        "log_lines_per_min_outage_max": max(soak.outage_lines, default=None),
    }
    timeline.write("result", **result)
    timeline.close()
    width = max(len(k) for k in result)
    for key, value in result.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        print(f"{key:<{width}}  {value}")
    print(f"{'timeline':<{width}}  {out / 'timeline.jsonl'}")
    print(json.dumps(result))
    return 0


__all__ = ["Soak", "Step", "main", "schedule"]

if __name__ == "__main__":
    raise SystemExit(main())

"""Pod deletion -> slonkd's drain in SLURM through a real kubelet, next to the stand-in's figure.

Not part of CI: ``python -m bench.real_node [options]``. Needs root and the real node's tools
(``scripts/bootstrap``); about 15 minutes with the images cached on a quiet machine.

1. The chart on a real node (:func:`slonkd_sandbox.chart.release.install`: control plane,
   containerd + kubelet + CoreDNS, the images of ``container/build.sh``, ``helm install``),
   ``--workers`` worker pods (slurmd + the agent sidecar, preStop ``slonkd prestop``). The
   workers are deleted in turn, ``--deletions`` times in all; each is reused only once its
   replacement is Ready and its SLURM node idle again, so deletions alternate while replaced
   pods come back. Per deletion: the time from the return of the API DELETE (the kubelet then
   runs the preStop; the agent sees the deletionTimestamp) to slurmctld's log line ``node X
   reason set to: slonkd:pod-terminating``.

   The probe: that log line's CRI stamp (:func:`slonkd_sandbox.chart.logs.drain_logged_at`).
   slurmctld writes it while it applies the update, containerd stamps each line when it reads
   it from the container's pipe (microseconds, the machine's clock, the same as
   ``time.time()`` here). Polling ``scontrol`` through ``kubectl exec`` costs 100+ ms a
   read: too coarse for a figure of a few hundred ms. The stamp is checked against a direct
   poll on the first ``--validate`` deletions: a shell loop inside the slurmctld container
   runs ``scontrol -o show node`` back to back (one exec for all reads) and prints the
   wall time it first sees DRAIN; the table shows both figures and the time per read (the
   poll's resolution). The stamp cannot precede the line's write; a poll that saw DRAIN
   before the stamp would show the stamp late (``poll_minus_stamp_max_ms`` negative).

   Where the time goes, per deletion, from the deleted pod's agent log (streamed with CRI
   stamps from before the DELETE): ``agent.mirror_applied`` (drain) and its ``duration_ms``
   give when the agent's drain call began (``agent_began``: the watch, the queue and the
   agent's first read of the node) and when it logged it (after one more read); began ->
   slurmctld's line is the compare-and-set read plus the ``scontrol update``. When the
   agent's drain changed nothing, the preStop (which drains with the same reason) was first.
   ``restarting`` counts the other workers not Ready at the DELETE: their replacements start
   (Python, slurmd, munged) on the same CPUs meanwhile. ``--isolated`` waits for every
   worker Ready and idle before each deletion, so none is; ``real_drain_alone_*`` are the
   deletions with none either way.

2. The stand-in's figure in the same run (``bench/agent.py``'s fleet: 10 slurmd bound by
   the kubelet stand-in, one agent each, a gated preStop so the drain is the agent's own;
   DRAIN seen by polling ``scontrol`` on the host): ``--standin-deletions`` rounded up to
   whole rounds of 10.

3. Times of the node's tools and images, warm: the toolchain's check of the cached tools,
   image build-or-cache (which includes waiting for the image cache's lock while another
   checkout builds its images), import into the fresh node's containerd (and the second import,
   which must import nothing), control plane + RealNode start (``real_node_ready_s``),
   ``helm install`` -> every pod Ready (``chart_install_ready_s``). Cold figures need an
   empty ``~/.cache/slonkd``, which others share: they are not measured here but read from
   the logs of a cold build (``--cold-log FILE``, repeatable: the ``[toolchain] X built in
   N s`` and ``[chart-images] built/exported ... in N s`` lines).

Load averages are recorded at the start and end of each phase: the targets
(``real_drain_p99_ms`` <= 500 on a quiet machine, ``chart_install_ready_s`` <= 120 warm)
mean little on a busy one, and less for the real node than for the stand-in: every pod
of the node lives in one cgroup (the kubelet's cgroupRoot) that competes for the CPUs
with the weight of ONE host process (``cpu.shares`` 1024), while each stand-in agent and
slurmd is a host process of its own. ``--node-cpu-shares N`` sets that weight
(``node_cpu_shares`` in the JSON line) to see how much of the drain is that contention.

Options: --deletions N (real-node deletions, default 30), --workers N (worker pods, default
4), --isolated (no deletion while another worker is being replaced), --standin-deletions N
(default 30), --validate N (deletions checked by the direct poll, default 3),
--node-cpu-shares N, --cold-log FILE. Prints a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.agent import PODS, drain_round, standin_fleet
from slonkd_sandbox.chart.logs import LogStream, cri_time, drain_logged_at, json_lines
from slonkd_sandbox.chart.release import CONTROLLER, Release, install, ready
from slonkd_sandbox.procs import HarnessError, wait_for
from slonkd_sandbox.toolchain import ensure_node_tools, ensure_tools

DELETIONS = 30
WORKERS = 4
STANDIN_DELETIONS = 30
VALIDATE = 3
CAUSE = "pod-terminating"
DRAIN_TIMEOUT_S = 30.0
REUSE_TIMEOUT_S = 240.0
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
"""cgroup v1's cpu hierarchy: the node's cgroupRoot below it holds every pod."""
POLL_READS = 5000
"""The direct poll gives up after this many reads (20-200 ms each on a busy 2-core machine)."""

KEYS = (
    "real_drain_p50_ms",
    "real_drain_p99_ms",
    "standin_drain_p99_ms",
    "real_node_ready_s",
    "chart_install_ready_s",
)
"""The JSON line's keys that issue 14 names (more follow them)."""

_TOOL_BUILT = re.compile(r"\[toolchain\] (\S+)(?: [\d.]+)? built in ([\d.]+) s")
_IMAGES_BUILT = re.compile(r"\[chart-images\] built (.+?) in ([\d.]+) s")
_IMAGE_EXPORTED = re.compile(
    r"\[chart-images\] exported localhost/slonk/([\w.-]+):\S+ in ([\d.]+) s"
)


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 1): the smallest sample with q of them <= it.

    p99 of fewer than 100 samples is their maximum.
    """
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def cold_figures(text: str) -> dict[str, float]:
    """Cold build times from toolchain and chart-images logs, as ``cold_*_s`` keys.

    A tool's cold build is its ``built in`` line; the images' is the longest
    ``build.sh`` run (a full build of all five beats a partial rebuild) and each image's
    last export. A log of a warm run has no ``built in`` lines but ``built base in 0 s``.
    """
    out: dict[str, float] = {}
    for name, secs in _TOOL_BUILT.findall(text):
        out[f"cold_tool_{name.lower()}_s"] = float(secs)
    builds = [float(s) for what, s in _IMAGES_BUILT.findall(text) if what != "base"]
    if builds:
        out["cold_images_build_s"] = max(builds)
    exports: dict[str, float] = {}
    for image, secs in _IMAGE_EXPORTED.findall(text):
        exports[image] = float(secs)
    for image, secs in exports.items():
        out[f"cold_export_{image.replace('-', '_')}_s"] = secs
    if exports:
        out["cold_images_export_s"] = sum(exports.values())
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One real-node deletion: the drain's latency and where its time went (ms)."""

    worker: str
    drain_ms: float
    """DELETE returned -> slurmctld's CRI-stamped drain line."""
    poll_ms: float | None = None
    """DELETE returned -> the direct poll saw DRAIN (validated deletions only)."""
    poll_read_ms: float | None = None
    """The direct poll's time per read: its resolution."""
    agent_began_ms: float | None = None
    """DELETE returned -> the agent's drain call began (watch, queue, read of the node)."""
    agent_applied_ms: float | None = None
    """DELETE returned -> the agent logged its drain (after its read of the node after it)."""
    agent_changed: bool | None = None
    """The agent's drain changed the node (False: the preStop drained first)."""
    restarting: int = 0
    """Other workers not Ready at the DELETE (their replacements starting meanwhile)."""


def summary(
    real: Sequence[Sample],
    standin: Sequence[float],
    timings: dict[str, float],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The JSON line: issue 14's keys first, then the details."""
    drains = [s.drain_ms for s in real]
    out: dict[str, Any] = {
        "real_drain_p50_ms": round(percentile(drains, 0.5), 1),
        "real_drain_p99_ms": round(percentile(drains, 0.99), 1),
        "standin_drain_p99_ms": round(percentile(standin, 0.99), 1),
        "real_node_ready_s": round(timings["node_ready_s"], 1),
        "chart_install_ready_s": round(timings["install_to_ready_s"], 1),
        "real_drain_max_ms": round(max(drains), 1),
        "real_samples": len(drains),
        "standin_drain_p50_ms": round(percentile(standin, 0.5), 1),
        "standin_drain_max_ms": round(max(standin), 1),
        "standin_samples": len(standin),
    }
    began = [s.agent_began_ms for s in real if s.agent_began_ms is not None]
    if began:
        out["agent_began_p50_ms"] = round(percentile(began, 0.5), 1)
        out["agent_began_p99_ms"] = round(percentile(began, 0.99), 1)
    calls = [s.drain_ms - s.agent_began_ms for s in real if s.agent_began_ms is not None]
    if calls:
        out["agent_call_to_drain_p50_ms"] = round(percentile(calls, 0.5), 1)
        out["agent_call_to_drain_p99_ms"] = round(percentile(calls, 0.99), 1)
    out["drains_by_agent"] = sum(1 for s in real if s.agent_changed)
    alone = [s.drain_ms for s in real if s.restarting == 0]
    out["real_alone_samples"] = len(alone)
    if alone:
        out["real_drain_alone_p50_ms"] = round(percentile(alone, 0.5), 1)
        out["real_drain_alone_p99_ms"] = round(percentile(alone, 0.99), 1)
    offsets = [s.poll_ms - s.drain_ms for s in real if s.poll_ms is not None]
    if offsets:
        out["validated"] = len(offsets)
        worst: float = max(offsets, key=abs)
        out["poll_minus_stamp_max_ms"] = round(worst, 1)
        reads = [s.poll_read_ms for s in real if s.poll_read_ms is not None]
        out["poll_read_ms"] = round(max(reads), 1) if reads else None
    out.update({k: round(v, 1) for k, v in timings.items() if k.endswith("_s")})
    out.update(extra)
    return out


def _say(message: str) -> None:
    print(f"[real-node] {message}", file=sys.stderr, flush=True)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _pod(release: Release, name: str) -> dict[str, Any] | None:
    return next((p for p in release.pods() if p["metadata"]["name"] == name), None)


def _reusable(release: Release, worker: str) -> bool:
    """The worker pod is Ready and its SLURM node idle (no drain, no DOWN left)."""
    pod = _pod(release, worker)
    return (
        pod is not None
        and pod["metadata"].get("deletionTimestamp") is None
        and ready(pod)
        and release.node_line(worker).split("|")[0] == "idle"
    )


class _DirectPoll:
    """``scontrol -o show node`` back to back inside the slurmctld container, via one exec.

    Prints its start time, then the wall time at which it first saw DRAIN and how many
    reads it made.
    """

    def __init__(self, release: Release, node: str) -> None:
        script = (
            'echo "ready $(date +%s.%N)"; n=0; '
            f"while [ $n -lt {POLL_READS} ] && "
            f"! scontrol -o show node {node} | grep -q 'State=[^ ]*DRAIN'; "
            "do n=$((n+1)); done; "
            'echo "seen $(date +%s.%N) $n"'
        )
        self.proc = subprocess.Popen(
            [
                str(release.kube.kubectl_path),
                f"--kubeconfig={release.kube.kubeconfig}",
                f"--namespace={release.ns}",
                "exec",
                CONTROLLER,
                "-c",
                "slurmctld",
                "--",
                "sh",
                "-c",
                script,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        first = self.proc.stdout.readline().split() if self.proc.stdout else []
        if not first or first[0] != "ready":
            self.proc.kill()
            raise HarnessError(f"direct poll did not start: {first}")
        self.started = float(first[1])

    def seen(self, timeout_s: float = DRAIN_TIMEOUT_S) -> tuple[float, float] | None:
        """(wall time DRAIN was first seen, ms per read), or None if it never was."""
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return None
        fields = out.split()
        if len(fields) < 3 or fields[0] != "seen" or int(fields[2]) >= POLL_READS:
            return None
        at, reads = float(fields[1]), int(fields[2])
        return at, (at - self.started) * 1000 / max(1, reads)


def _agent_drain(path: Path) -> dict[str, Any] | None:
    """The streamed agent log's drain line (JSON) with its CRI stamp as ``_at``."""
    for line in path.read_text().splitlines():
        stamp, _, rest = line.partition(" ")
        for doc in json_lines(rest):
            if doc.get("event") == "agent.mirror_applied" and doc.get("action") == "drain":
                return {**doc, "_at": cri_time(stamp)}
    return None


def _restarting(release: Release, worker: str) -> int:
    """How many other workers are not Ready now (being replaced: their start costs CPU)."""
    pods = {p["metadata"]["name"]: p for p in release.pods()}
    return sum(1 for w in release.workers if w != worker and not (w in pods and ready(pods[w])))


def _delete_once(
    release: Release, worker: str, *, validate: bool, isolated: bool, tmp: Path
) -> Sample:
    waiting = release.workers if isolated else (worker,)
    wait_for(
        f"{', '.join(waiting)} Ready and idle",
        lambda: all(_reusable(release, w) for w in waiting),
        timeout_s=REUSE_TIMEOUT_S,
    )
    restarting = _restarting(release, worker)
    stream = LogStream(release, worker, "slonkd-agent", tmp / f"agent-{time.time_ns()}.log")
    poll = _DirectPoll(release, worker) if validate else None
    time.sleep(0.5)  # the log stream is open before the DELETE
    before = time.time()
    release.delete_pod(worker)
    returned = time.time()
    drained: float | None = None
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while drained is None and time.monotonic() < deadline:
        drained = drain_logged_at(release, worker, before, CAUSE)
        if drained is None:
            time.sleep(0.25)
    if drained is None:
        stream.close()
        if poll is not None:
            poll.proc.kill()
        raise HarnessError(f"{worker}: no slonkd drain logged within {DRAIN_TIMEOUT_S} s")
    seen = poll.seen() if poll is not None else None
    agent: dict[str, Any] | None = None
    deadline = time.monotonic() + 20
    while agent is None and time.monotonic() < deadline:
        agent = _agent_drain(stream.path)
        if agent is None:
            if stream.ended():
                break
            time.sleep(0.2)
    stream.close()
    agent_began = agent_applied = None
    if agent is not None:
        agent_applied = (agent["_at"] - returned) * 1000
        agent_began = agent_applied - float(agent.get("duration_ms", 0))
    return Sample(
        worker=worker,
        drain_ms=(drained - returned) * 1000,
        poll_ms=None if seen is None else (seen[0] - returned) * 1000,
        poll_read_ms=None if seen is None else seen[1],
        agent_began_ms=agent_began,
        agent_applied_ms=agent_applied,
        agent_changed=None if agent is None else bool(agent.get("changed")),
        restarting=restarting,
    )


def _node_cpu_shares(release: Release, shares: int | None) -> int:
    """Set (when given) and return the CPU weight of the node's cgroup (every pod below it)."""
    knob = CPU_CGROUP / release.node.cgroup_root.lstrip("/") / "cpu.shares"
    if shares is not None:
        knob.write_text(f"{shares}\n")
    return int(knob.read_text())


def _real(
    root: Path,
    *,
    deletions: int,
    workers: int,
    validate: int,
    isolated: bool,
    cpu_shares: int | None,
) -> tuple[list[Sample], dict[str, float], dict[str, Any]]:
    samples: list[Sample] = []
    extra: dict[str, Any] = {"load_real_start": _load()}
    with install(root, replicas=workers, say=_say) as release:
        timings = dict(release.timings)
        _say(f"installed: { {k: round(v, 1) for k, v in timings.items()} }")
        extra["node_cpu_shares"] = _node_cpu_shares(release, cpu_shares)
        for i in range(deletions):
            worker = release.workers[i % workers]
            sample = _delete_once(
                release, worker, validate=i < validate, isolated=isolated, tmp=root
            )
            samples.append(sample)
            _say(
                f"{i + 1}/{deletions} {worker}: drain {sample.drain_ms:.0f} ms"
                + (f" (poll {sample.poll_ms:.0f} ms)" if sample.poll_ms is not None else "")
                + (
                    f", agent began {sample.agent_began_ms:.0f} ms, changed {sample.agent_changed}"
                    if sample.agent_began_ms is not None
                    else ""
                )
            )
    extra["load_real_end"] = _load()
    return samples, timings, extra


def _standin(root: Path, deletions: int) -> tuple[list[float], dict[str, Any]]:
    extra: dict[str, Any] = {"load_standin_start": _load()}
    latencies: list[float] = []
    with standin_fleet(root) as fleet:
        for _ in range(math.ceil(deletions / PODS)):
            latencies += drain_round(fleet)
    extra["load_standin_end"] = _load()
    return latencies, extra


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _table(real: Sequence[Sample], result: dict[str, Any]) -> None:
    """Per deletion (ms after the DELETE returned), then the summary."""
    print(
        f"{'#':>3} {'worker':<11}{'agent_began':>12}{'drain':>9}{'agent_logged':>13}"
        f"{'poll':>9}{'poll_read':>10}{'restarting':>11} agent_changed"
    )
    for i, s in enumerate(real, 1):
        print(
            f"{i:>3} {s.worker:<11}{_ms(s.agent_began_ms):>12}{s.drain_ms:>9.1f}"
            f"{_ms(s.agent_applied_ms):>13}{_ms(s.poll_ms):>9}{_ms(s.poll_read_ms):>10}"
            f"{s.restarting:>11}"
            f" {s.agent_changed}"
        )
    for key, value in result.items():
        print(f"{key:<34}{value!s:>24}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurement; print the table and the JSON line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deletions", type=int, default=DELETIONS)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--standin-deletions", type=int, default=STANDIN_DELETIONS)
    parser.add_argument("--validate", type=int, default=VALIDATE)
    parser.add_argument("--isolated", action="store_true")
    parser.add_argument("--node-cpu-shares", type=int, default=None)
    parser.add_argument("--cold-log", type=Path, action="append", default=[])
    args = parser.parse_args(argv)
    if args.workers < 2 or args.deletions < 1:
        parser.error("--workers >= 2 and --deletions >= 1")
    t0 = time.monotonic()
    ensure_tools()
    ensure_node_tools()
    tools_warm_s = time.monotonic() - t0
    root = Path(tempfile.mkdtemp(prefix="slonkd-bench-real-"))
    try:
        real, timings, extra = _real(
            root / "real",
            deletions=args.deletions,
            workers=args.workers,
            validate=args.validate,
            isolated=args.isolated,
            cpu_shares=args.node_cpu_shares,
        )
        standin, standin_extra = _standin(root / "standin", args.standin_deletions)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    timings["tools_warm_check_s"] = tools_warm_s
    extra.update(standin_extra)
    cold: dict[str, float] = {}
    for path in args.cold_log:
        cold.update(cold_figures(path.read_text(errors="replace")))
    if cold:
        extra.update(cold)
    else:
        extra["cold"] = "not measured here (it needs an empty ~/.cache/slonkd); see --cold-log"
    result = summary(real, standin, timings, extra)
    _table(real, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

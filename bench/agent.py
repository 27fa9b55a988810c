"""How fast the agent mirrors a pod deletion into SLURM, and what the agent costs at rest.

Real services: a SLURM cluster with 10 slurmd, a control plane with one kwok node and a
10-pod worker StatefulSet bound by the kubelet stand-in, one ``slonkd agent`` per pod. The
preStop waits for a gate, so the drain measured is the agent's own. Each round deletes the
10 pods one after the other and records the time from the return of the API delete call to
DRAIN visible in ``scontrol -o show node`` (polled in a tight loop, a few ms a read); 5
rounds give 50 events. Next to it: what a 30 s polling loop would give (uniform delay: median 15 s,
p99 29.7 s). Then one agent's RSS with its /healthz, /readyz, /metrics server running and
scraped (its drain counter must equal the drains measured), its CPU over 60 s at rest while
probed and scraped every 15 s as a kubelet and Prometheus would, and the RSS of the imports.

The same deletions again with every agent on the pyslurm backend (``SLONKD_SLURM_BACKEND=
pyslurm``, the bootstrap's 22.05 build: issue 39), on a fleet of its own started the same way:
``pyslurm_drain_latency_*`` beside ``drain_latency_*``; without a build those keys are absent
and a line says why.

Prints a table, then one JSON object as the last line. Not part of CI. Options: --rounds N
(default 5), --idle-s S (default 60).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.report import print_result
from slonkd_sandbox.daemon import Daemon
from slonkd_sandbox.fleet import FleetBuilder, FleetShape
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kubelet import KubeletStandIn
from slonkd_sandbox.procs import free_ports, wait_for
from slonkd_sandbox.pyslurm_build import pyslurm_site, pyslurm_status
from slonkd_sandbox.slurm.cluster import SlurmCluster
from slonkd_sandbox.workloads import GATED_PRESTOP

PODS = 10
ROUNDS = 5
IDLE_S = 60.0
SCRAPE_EVERY_S = 15.0
SHAPE = FleetShape(slurmds=PODS, autostart=False)
"""10 worker pods on one kwok node, each bound to its slurmd by the kubelet stand-in."""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - http://127.0.0.1
        return str(response.read().decode())


def _drains_counted(metrics_text: str) -> float:
    for line in metrics_text.splitlines():
        if line.startswith('slonkd_transitions_total{action="drain",cause="pod-terminating"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def main() -> int:
    """Run the measurement."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="deletions of all pods")
    parser.add_argument("--idle-s", type=float, default=IDLE_S, help="idle CPU window")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="slonkd-bench-agent-"))
    try:
        return _measure(root, args.rounds, args.idle_s)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fleet:
    """The stand-in fleet: 10 slurmd, their pods bound by the kubelet stand-in, one agent each."""

    root: Path
    kube: KubeCluster
    slurm: SlurmCluster
    standin: KubeletStandIn
    names: tuple[str, ...]
    ports: dict[str, int]
    agents: list[Daemon]


@contextmanager
def standin_fleet(root: Path, agent_env: dict[str, str] | None = None) -> Iterator[Fleet]:
    """The fleet started under ``root``, every agent synced; leaving stops it all.

    ``agent_env``: more environment for every agent (e.g. its SLURM backend).
    """
    names = SHAPE.names
    agents: list[Daemon] = []
    with (
        KubeCluster(root / "kube") as kube,
        SlurmCluster(root / "slurm", SHAPE.layout()) as slurm,
    ):
        kube.create_namespace("bench")
        build = FleetBuilder(kube=kube, namespace="bench", shape=SHAPE, labelled=False)
        (knode,) = kube.add_fake_nodes(
            ["bench-node"], capacity={"cpu": "64", "memory": "256Gi", "pods": "110"}
        )
        with KubeletStandIn(
            kube=kube, slurm=slurm, namespace="bench", root=root / "kubelet"
        ) as standin:
            build.create(
                build.statefulset(prestop=GATED_PRESTOP, grace_s=60, env={"GATE_DIR": str(root)})
            )
            slurm.wait_idle(names, timeout_s=120)
            ports = dict(zip(names, free_ports(len(names)), strict=True))
            try:
                for name in names:
                    env = {
                        **os.environ,
                        "POD_NAME": name,
                        "POD_NAMESPACE": "bench",
                        "NODE_NAME": knode,
                        "KUBECONFIG": str(kube.kubeconfig),
                        "SLURM_CONF": str(slurm.conf),
                        "SLONKD_READY_FILE": str(root / f"ready-{name}"),
                        "SLONKD_METRICS_ADDRESS": "127.0.0.1",
                        "SLONKD_METRICS_PORT": str(ports[name]),
                        **(agent_env or {}),
                    }
                    agent = Daemon(role="agent", env=env, log=root / f"agent-{name}.log")
                    agents.append(agent.start())
                wait_for(
                    "agents synced",
                    lambda: all((root / f"ready-{n}").exists() for n in names),
                    timeout_s=60,
                )
                yield Fleet(
                    root=root,
                    kube=kube,
                    slurm=slurm,
                    standin=standin,
                    names=names,
                    ports=ports,
                    agents=agents,
                )
            finally:
                for agent in agents:  # all at once, then each within its grace
                    agent.signal(signal.SIGTERM)
                for agent in agents:
                    agent.stop()


def drain_round(fleet: Fleet) -> list[float]:
    """Delete every pod once, one at a time; ms from each DELETE's return to DRAIN in scontrol.

    The preStop's gate then opens; returns once every pod is back and its node idle.
    """
    kube, slurm, names = fleet.kube, fleet.slurm, fleet.names
    gate = fleet.root / "open"
    gate.unlink(missing_ok=True)
    latencies: list[float] = []
    uids = {}
    for name in names:  # one event at a time: latency, not queueing
        uids[name] = kube.api.request("GET", f"/api/v1/namespaces/bench/pods/{name}")["metadata"][
            "uid"
        ]
        kube.api.request(
            "DELETE", f"/api/v1/namespaces/bench/pods/{name}", {"gracePeriodSeconds": 60}
        )
        started = time.monotonic()
        deadline = started + 30
        while time.monotonic() < deadline:
            line = slurm.run("scontrol", "-o", "show", "node", name).stdout
            if "DRAIN" in line.split("State=", 1)[1].split()[0]:
                latencies.append((time.monotonic() - started) * 1000)
                break
    gate.write_text("")

    def back() -> bool:
        seen = {
            (e.get("pod"), e.get("uid"))
            for e in fleet.standin.events()
            if e["event"] == "slurmd.started"
        }
        return all(any(p == n and u != uids[n] for p, u in seen) for n in names)

    wait_for("pods back", back, timeout_s=120)
    slurm.wait_idle(names, timeout_s=120)
    return latencies


def _pyslurm_latencies(root: Path, rounds: int) -> list[float]:
    """The rounds again on a fleet whose agents use the pyslurm backend ([] without a build)."""
    site = pyslurm_site("22.05")
    if site is None:
        print(f"pyslurm: not measured: {pyslurm_status('22.05')}", file=sys.stderr)
        return []
    env = {"SLONKD_SLURM_BACKEND": "pyslurm", "SLONKD_PYSLURM_PATH": str(site)}
    latencies: list[float] = []
    with standin_fleet(root, env) as fleet:
        for _ in range(rounds):
            latencies += drain_round(fleet)
    return latencies


def _measure(root: Path, rounds: int, idle_s: float) -> int:
    latencies: list[float] = []
    with standin_fleet(root) as fleet:
        for _ in range(rounds):
            latencies += drain_round(fleet)
        pid = fleet.agents[0].pid
        base = f"http://127.0.0.1:{fleet.ports[fleet.names[0]]}"
        drains_counted = _drains_counted(_get(f"{base}/metrics"))
        rss = _rss_mb(pid)
        cpu0, t0 = _cpu_s(pid), time.monotonic()
        while (left := t0 + idle_s - time.monotonic()) > 0:
            _get(f"{base}/healthz")
            _get(f"{base}/readyz")
            _get(f"{base}/metrics")
            time.sleep(min(SCRAPE_EVERY_S, left))
        idle_cpu_pct = (_cpu_s(pid) - cpu0) / (time.monotonic() - t0) * 100
        rss_after_idle = _rss_mb(pid)
    py_latencies = _pyslurm_latencies(root / "pyslurm", rounds)
    imports = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, slonkd.runtime.agent.sidecar;"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    import_rss = int(imports.stdout.strip()) / 1024
    result = {
        "events": len(latencies),
        "drain_latency_p50_ms": round(statistics.median(latencies), 1),
        "drain_latency_p90_ms": round(_pct(latencies, 0.90), 1),
        "drain_latency_p99_ms": round(_pct(latencies, 0.99), 1),
        "drain_latency_max_ms": round(max(latencies), 1),
        "poll30s_p50_ms": 15000.0,
        "poll30s_p99_ms": 29700.0,
        "agent_rss_mb": round(rss, 1),
        "agent_rss_after_idle_mb": round(rss_after_idle, 1),
        "agent_drains_counted": drains_counted,
        "agent_drains_expected": rounds,
        "agent_idle_cpu_pct": round(idle_cpu_pct, 3),
        "agent_import_rss_mb": round(import_rss, 1),
    }
    if py_latencies:
        result |= {
            "pyslurm_events": len(py_latencies),
            "pyslurm_drain_latency_p50_ms": round(statistics.median(py_latencies), 1),
            "pyslurm_drain_latency_p90_ms": round(_pct(py_latencies, 0.90), 1),
            "pyslurm_drain_latency_p99_ms": round(_pct(py_latencies, 0.99), 1),
            "pyslurm_drain_latency_max_ms": round(max(py_latencies), 1),
        }
    print_result(result, 26, 12)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The coordinator's speed and cost (not in CI): ``python -m bench.coordinator [EVENTS [SIZES]]``.

1. SLURM failure -> K8s cordon + taint latency: 10 worker pods on 10 kwok nodes, bound to 10
   real slurmd; for each event one node is set FAIL with a SLURM-style reason (the clock
   starts when that ``scontrol update`` returns) and stops when the apiserver shows the K8s
   node cordoned and tainted ``slonk.dev/unhealthy``; then the node is resumed and slonkd
   lifts its marks before the next event. Remediation (eviction) is off so the pods stay.
   The same events twice: with the scontrol poll (``change_poll: false``, every 0.7 s, the
   default until 2026-12: cordon_latency_*) and with the libslurm change poll (the default,
   5 Hz, scontrol only on a change: change_poll_cordon_latency_*). Side by side: one raw
   ``scontrol update``, the floor.
2. slurmctld RPCs per second caused by the coordinator at rest (``sdiag`` over 20 s, no
   other client): every RPC (a ``sinfo`` read is two: node table and partitions), and the
   node-table reads (``REQUEST_NODE_INFO``), which the coordinator's read limit counts; side
   by side with the fleet metrics off (``fleet_metrics: false``), whose only RPC is ``sdiag``
   (``REQUEST_STATS_INFO``, counted, as is the measurement's own ``sdiag --reset``).
3. For 1,000 and 5,000 nodes (kwok nodes, pods created with nodeName: :meth:`FleetBuilder.bound
   <slonkd_sandbox.fleet.FleetBuilder.bound>`, SLURM nodes declared
   without slurmd, on the quiet harness's SlurmdTimeout:
   :data:`~slonkd_sandbox.slurm.cluster.QUIET_SLURMD_TIMEOUT_S`; measured once the node
   lifecycle controller has labelled and untainted every node, :func:`_settled`): the
   duration of a full resync pass and its phases (resync_{size}_*: the median over the
   passes of 26 s at rest, their count resync_{size}_samples; one pass alone moves by up to
   2x; the SLURM phase's mean too, resync_{size}_slurm_read_mean_ms, for it is bimodal),
   the slurmctld reads it took, and
   the coordinator's RSS; the time to its first pass (first_pass_{size}_s, from its API up:
   a failover's time to first action) and the way there: process start, its CPU seconds, the
   Lease, the informers' lists and the first pass's phases (first_pass_{size}_*). Over the
   rest that follows (24 s, four resyncs; before the passes' window): the
   CPU of the SLURM harness (slurmctld, slurmd, munged below its supervisor:
   harness_cpu_pct_{size}), of the Kubernetes control plane (kube_cpu_pct_{size}) and of the
   coordinator (coordinator_cpu_pct_{size}), each in % of one core; the 1-minute load average
   (loadavg_during_{size}); slurmctld's time spent on client requests other than the
   measurement's own ``sdiag`` (slurmctld_busy_ms_per_s_{size}, ms per second, from sdiag's
   total_time), the node table's share of it (node_info_*), and the node registrations
   slurmctld took meanwhile (registrations_during_{size}: a ping round of the harness, 0
   expected). Then the same with a second coordinator that uses the libslurm change poll
   (change_poll_*; its passes' own reads a pass: change_poll_resync_{size}_slurm_reads).
   The issue's unsuffixed keys (harness_cpu_pct, slurmctld_busy_ms_per_s)
   are the 5,000-node ones.

``EVENTS`` 0 runs part 3 alone, an empty ``SIZES`` (``''``) parts 1 and 2 alone;
``SLONKD_BENCH_PROFILE_DIR=DIR`` runs each coordinator under
cProfile (``DIR/<name>.prof``). Parts 1 and 2 (10 real slurmd, no declared nodes) run on
SLURM's default SlurmdTimeout of 300 s (``latency_slurmd_timeout_s``);
``SLONKD_BENCH_SLURMD_TIMEOUT_S=N`` gives them another, e.g. the test harness's 10 s (slurmctld
pings every node each third of it, and each ping round moves the node table's time: a change
the poll reads, whole seconds at a time, so events share their second with a ping round's).

``SLONKD_BENCH_SLURM=24.11`` runs every cluster in the cached 24.11 root, the coordinators
calling its clients, those with the change poll on its loader with its libslurm
(:meth:`~slonkd_sandbox.slurm.chroot.ChrootSlurmCluster.libslurm_argv`); the poll alone
(``--change-poll``, in this interpreter) runs on 22.05 only.

Prints a table, then one JSON object as the last line.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.kube import create_all
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.log_events import COORDINATOR_API_LISTENING
from slonkd_sandbox.daemon import Daemon, coordinator_env
from slonkd_sandbox.fleet import FleetBuilder, FleetShape
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.slurm.cluster import (
    QUIET_SLURMD_TIMEOUT_S,
    SCALE_SLURMD_TIMEOUT_S,
    SlurmCluster,
    SlurmLayout,
)

NS = "bench"
_SDIAG = re.compile(r"^\s*(REQUEST_\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)", re.M)
_SDIAG_TIMES = re.compile(
    r"^\s*(REQUEST_\w+)\s+\(\s*\d+\)\s+count:\d+\s+ave_time:\d+\s+total_time:(\d+)", re.M
)
_CLIENT_RPCS = ("REQUEST_NODE_INFO", "REQUEST_PARTITION_INFO", "REQUEST_UPDATE_NODE",
                "REQUEST_JOB_INFO", "REQUEST_NODE_INFO_SINGLE", "REQUEST_BUILD_INFO",
                "REQUEST_JOB_REQUEUE", "REQUEST_RECONFIGURE", "REQUEST_TOPO_INFO",
                "REQUEST_STATS_INFO")  # fmt: skip


RELEASE = os.environ.get("SLONKD_BENCH_SLURM", "22.05")
"""The SLURM release of every cluster here: the host's 22.05, or a cached root's (24.11)."""
REST_S = 24.0
"""The window at rest of each size's CPU and slurmctld keys: four resyncs (resync_s 5)."""
RESYNC_WINDOW_S = 26.0
"""The window whose passes give each size's resync keys (their median): five or six passes."""


def cluster_of(root: Path, layout: SlurmLayout, release: str = RELEASE) -> SlurmCluster:
    """A (not yet started) cluster of ``release`` (:data:`RELEASE`) with ``layout``."""
    if release == "22.05":
        return SlurmCluster(root, layout)
    return ChrootSlurmCluster.create(release, layout)


def _slurm_env(slurm: SlurmCluster, root: Path) -> dict[str, str]:
    """What a coordinator needs in its environment to reach ``slurm``'s release.

    Another release's clients are shims first on PATH (as in the e2e tests); a coordinator
    with the change poll also runs on that release's loader, its libslurm loaded
    (:class:`Coordinator`; ``change_poll_backend_is_libslurm_*`` says which poll ran).
    """
    if not isinstance(slurm, ChrootSlurmCluster):
        return {}
    shims = slurm.client_shims(root / "slurm-bin")
    return {"PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds so far of the processes ``roots`` and every process below them.

    The children they reaped (an scontrol, a fork) count too, each CPU second once: a reaped
    child's time is in its parent's.
    """
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    total, todo = 0.0, list(roots)
    while todo:
        pid = todo.pop()
        try:  # its own time and that of its children it reaped (an scontrol, a fork)
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        todo += children.get(pid, [])
    return total


def client_busy_us(sdiag: str) -> int:
    """slurmctld's total time (µs) on client requests in ``sdiag``'s output, its own excepted."""
    return sum(int(t) for name, t in _SDIAG_TIMES.findall(sdiag) if name != "REQUEST_STATS_INFO")


_REGISTRATIONS = re.compile(
    r"^\s*MESSAGE_NODE_REGISTRATION_STATUS\s+\(\s*\d+\)\s+count:(\d+)", re.M
)


def registrations(sdiag: str) -> int:
    """Node registrations slurmctld took since the last reset (a ping round's, on this harness)."""
    found = _REGISTRATIONS.search(sdiag)
    return int(found.group(1)) if found else 0


def wait_registered(slurm: SlurmCluster, declared: int) -> None:
    """Wait until the start's ping round registered every declared node.

    sdiag counts since slurmctld started; no measured window then holds that round.
    """
    if declared:
        wait_for(
            "the start's registrations",
            lambda: registrations(slurm.run("sdiag").stdout) >= declared,
            timeout_s=120,
            interval_s=1,
        )


def _log_gap_s(log: Path, first: str, then: str) -> float:
    """Seconds between the first log lines of events ``first`` and ``then`` (-1: absent)."""
    at: dict[str, float] = {}
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        event = entry.get("event")
        if event in (first, then) and event not in at and "timestamp" in entry:
            stamp = entry["timestamp"].replace("Z", "+00:00")
            at[event] = datetime.fromisoformat(stamp).timestamp()
    return at[then] - at[first] if first in at and then in at else -1.0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _create(kube: KubeCluster, build: FleetBuilder, prefix: str, pods: list[str]) -> float:
    """The kwok nodes ``<prefix><pod>`` and each pod bound to its own; seconds it took."""
    began = time.monotonic()
    nodes, bound = build.bound(prefix, pods)
    transport = await KubeTransport.from_kubeconfig(kube.kubeconfig, timeout_s=60)
    try:
        await create_all(transport, "/api/v1/nodes", nodes)
        await create_all(transport, f"/api/v1/namespaces/{NS}/pods", bound)
    finally:
        await transport.close()
    return time.monotonic() - began


def _settled(kube: KubeCluster) -> bool:
    """Every node labelled and untainted by the node lifecycle controller (nothing pending).

    Until then each node it changes starts a coordinator pass: a window "at rest" is not.
    """
    items = kube.api.request("GET", "/api/v1/nodes")["items"]
    return all(
        "beta.kubernetes.io/os" in n["metadata"].get("labels", {})
        and not any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints", []))
        for n in items
    )


def _running(kube: KubeCluster, want: int) -> bool:
    items = kube.api.request("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
    ready = sum(
        any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
        for p in items
    )
    return bool(ready >= want)


class Coordinator:
    """A ``slonkd coordinator`` process (:class:`~slonkd_sandbox.daemon.Daemon`) and its config."""

    def __init__(self, root: Path, kube: KubeCluster, slurm: SlurmCluster, **config: Any) -> None:
        root.mkdir(parents=True, exist_ok=True)
        conf = root / "coordinator.json"
        conf.write_text(  # the scontrol poll unless asked: the keys without change_poll_ are its
            json.dumps({"api_host": "127.0.0.1", "api_port": 0, "change_poll": False, **config})
        )
        env = coordinator_env(
            namespace=NS,
            kubeconfig=kube.kubeconfig,
            slurm_conf=slurm.conf,
            POD_NAME=f"bench-coordinator-{root.name}",
            SLONKD_CONFIG=str(conf),
            **_slurm_env(slurm, root),
        )
        profile = os.environ.get("SLONKD_BENCH_PROFILE_DIR")  # cProfile of the process
        prefix: list[str] = []
        module = "slonkd.cli.main"
        if isinstance(slurm, ChrootSlurmCluster) and config.get("change_poll"):
            # the release's libslurm in this process, as the release's own image would have it
            prefix, env = slurm.libslurm_argv([], env)
            module = "slonkd_sandbox.slurm.libslurm_launch"
        self.daemon = Daemon(
            role="coordinator",
            env=env,
            prefix=prefix,
            module=module,
            log=root / "coordinator.log",
            python_args=["-m", "cProfile", "-o", f"{profile}/{root.name}.prof"] if profile else [],
        )
        self.log = self.daemon.log
        began = time.monotonic()
        self.daemon.start(until=COORDINATOR_API_LISTENING, timeout_s=60)
        self.start_s = time.monotonic() - began
        """Process start, imports and the API up (as seen from here, polling its log)."""
        self.port = int(self.daemon.events(COORDINATOR_API_LISTENING)[-1]["port"])

    @property
    def pid(self) -> int:
        """The coordinator's process id."""
        return self.daemon.pid

    def status(self) -> dict[str, Any]:
        """The leader's ``/v1/status``."""
        url = f"http://127.0.0.1:{self.port}/v1/status"
        with urllib.request.urlopen(url, timeout=30) as response:
            body: dict[str, Any] = json.loads(response.read())
        return body

    def passes(self) -> int:
        """Passes done so far (0 before the first)."""
        try:
            return int(self.status()["passes"]["count"])
        except OSError:
            return 0

    def stop(self) -> None:
        """SIGTERM; one that outlives 30 s dumps its tasks to its log and is killed."""
        self.daemon.stop(grace_s=30)


def _sdiag_client_rpcs(slurm: SlurmCluster) -> tuple[int, int]:
    """(every client RPC, the node-table reads among them) since the last ``sdiag --reset``."""
    found = [(name, int(c)) for name, c, _ in _SDIAG.findall(slurm.run("sdiag").stdout)]
    total = sum(c for name, c in found if name in _CLIENT_RPCS)
    node_reads = sum(c for name, c in found if name == "REQUEST_NODE_INFO")
    return total, node_reads


_SDIAG_TOTAL = re.compile(
    r"^\s*REQUEST_NODE_INFO\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)", re.M
)


def _sdiag_node_info(slurm: SlurmCluster) -> tuple[int, int]:
    """(REQUEST_NODE_INFO count, slurmctld's total time on them in µs) since the last reset."""
    return node_info_of(slurm.run("sdiag").stdout)


def node_info_of(sdiag: str) -> tuple[int, int]:
    """(REQUEST_NODE_INFO count, slurmctld's total time on them in µs) in ``sdiag``'s output."""
    found = _SDIAG_TOTAL.search(sdiag)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def change_poll_cost(
    root: Path,
    seconds: float = 30.0,
    slurmd_timeout_s: int = SCALE_SLURMD_TIMEOUT_S,
    declared: int = 0,
) -> dict[str, float]:
    """slurmctld's node-table RPCs and time over ``seconds`` at rest: scontrol poll vs change poll.

    The coordinator's poll (:class:`SlurmWatch`) alone against a 22.05 cluster, nothing else
    talking: today's poll (scontrol every 0.7 s) and the change poll (libslurm every 0.2 s,
    scontrol only on change). Once per process: libslurm reads its configuration once
    (``--change-poll [SLURMD_TIMEOUT_S [DECLARED]]`` for another timeout or table size).
    SlurmdTimeout is SLURM's default (300 s) unless given: slurmctld's pings of the nodes
    (every third of it) move the node table's time, and each move is a change to read.
    ``declared``: slurmd-less nodes added to the 4 real ones (the table's size). Keys carry
    ``_t<SlurmdTimeout>`` and, with declared nodes, ``_n<declared>``.
    """
    from slonkd.adapters.slurm import libslurm_child
    from slonkd.adapters.slurm.runner import SlurmSettings
    from slonkd.adapters.slurm.scontrol import ScontrolBackend
    from slonkd.runtime.coordinating.slurm_watch import ReadLimiter, SlurmWatch

    layout = SlurmLayout(slurmd_timeout_s=slurmd_timeout_s, extra_nodes=declared)
    slurm = cluster_of(root / f"slurm-change-{slurmd_timeout_s}", layout)
    slurm.start()
    out: dict[str, float] = {}
    try:
        wait_registered(slurm, declared)
        backend = ScontrolBackend(SlurmSettings(env={"SLURM_CONF": str(slurm.conf)}))
        lib = libslurm_child.load(conf=str(slurm.conf))
        if lib is None:
            raise SystemExit("libslurm did not load")
        for key, probe in (("scontrol_poll", None), ("change_poll", lib)):
            watch = SlurmWatch(
                backend, ReadLimiter(2.0), asyncio.Queue(), poll_s=0.7, change_probe=probe
            )

            async def run(watch: SlurmWatch = watch, key: str = key) -> None:
                task = asyncio.create_task(watch.run())
                await asyncio.sleep(2.0)
                slurm.run("sdiag", "--reset")
                await asyncio.sleep(seconds)
                count, total_us = _sdiag_node_info(slurm)
                task.cancel()
                tag = f"{key}_t{slurmd_timeout_s}" + (f"_n{declared}" if declared else "")
                out[f"{tag}_node_info_rpcs_per_s"] = count / seconds
                out[f"{tag}_node_info_busy_ms_per_s"] = total_us / 1000 / seconds
                out[f"{tag}_scontrol_reads_per_s"] = watch.polls / (seconds + 2.0)
                out[f"{tag}_registrations"] = float(registrations(slurm.run("sdiag").stdout))

            asyncio.run(run())
    finally:
        slurm.stop()
    return out


def _at_rest(slurm: SlurmCluster) -> tuple[int, int]:
    """Client RPCs and node-table reads over 20 s, nothing but the coordinator talking."""
    slurm.run("sdiag", "--reset")
    time.sleep(20)
    return _sdiag_client_rpcs(slurm)


def latency(root: Path, kube: KubeCluster, events: int) -> dict[str, float]:
    """SLURM failure -> cordon + taint, and the coordinator's RPC rate at rest (fleet off/on)."""
    timeout_s = int(os.environ.get("SLONKD_BENCH_SLURMD_TIMEOUT_S", SCALE_SLURMD_TIMEOUT_S))
    shape = FleetShape(slurmds=10, kube_nodes=10, slurmd_timeout_s=timeout_s)
    names = list(shape.names)
    slurm = cluster_of(root / "slurm", shape.layout())
    slurm.start()
    try:
        build = FleetBuilder(kube=kube, namespace=NS, shape=shape, labelled=False)
        asyncio.run(_create(kube, build, "lat-", names))
        wait_for("pods ready", lambda: _running(kube, len(names)), timeout_s=120)
        time.sleep(2)  # the pods must be Ready for longer than failure_grace_s
        config: dict[str, Any] = {
            "resync_s": 30, "failure_grace_s": 1, "unready_grace_s": 3600, "remediate": False,
            "max_out": 100, "max_out_percent": 100, "mass_percent": 100,
        }  # fmt: skip
        off = Coordinator(root / "lat-off", kube, slurm, fleet_metrics=False, **config)
        try:
            wait_for("first pass, fleet metrics off", lambda: off.passes() > 0, timeout_s=60)
            rpcs_off, node_reads_off = _at_rest(slurm)
        finally:
            off.stop()
        co = Coordinator(root / "lat", kube, slurm, **config)
        try:
            wait_for("first pass", lambda: co.passes() > 0, timeout_s=60)
            # RPC rate at rest, nothing else talking to slurmctld
            rpcs, node_reads = _at_rest(slurm)
            samples = _cordon_samples(kube, slurm, names, events)
        finally:
            co.stop()
        out = {
            "cordon_latency_p50_ms": statistics.median(samples) * 1000,
            "cordon_latency_p99_ms": _pct(samples, 0.99) * 1000,
            "cordon_latency_max_ms": max(samples) * 1000,
        }
        # the same events through the libslurm change poll (5 Hz, scontrol only on a change)
        fast = Coordinator(root / "lat-change", kube, slurm, change_poll=True, **config)
        try:
            wait_for(  # libslurm's child starts beside the scontrol poll
                "change poll in use",
                lambda: (
                    fast.passes() > 0
                    and fast.status()["passes"]["slurm_poll_backend"] == "libslurm"
                ),
                timeout_s=60,
            )
            change_samples = _cordon_samples(kube, slurm, names, events)
        finally:
            fast.stop()
        raw_update = []
        for _ in range(10):
            began = time.monotonic()
            slurm.run("scontrol", "update", "nodename=w-0", "comment=bench")
            raw_update.append(time.monotonic() - began)
        return {
            **out,
            "change_poll_cordon_latency_p50_ms": statistics.median(change_samples) * 1000,
            "change_poll_cordon_latency_p99_ms": _pct(change_samples, 0.99) * 1000,
            "change_poll_cordon_latency_max_ms": max(change_samples) * 1000,
            "raw_scontrol_update_ms": statistics.median(raw_update) * 1000,
            **_rates(timeout_s, rpcs, node_reads, rpcs_off, node_reads_off),
            "events": float(len(samples)),
        }
    finally:
        slurm.stop()


def _rates(
    timeout_s: int, rpcs: int, node_reads: int, rpcs_off: int, node_reads_off: int
) -> dict[str, float]:
    """The latency part's SlurmdTimeout and its 20 s RPC counts at rest, per second."""
    return {
        "latency_slurmd_timeout_s": float(timeout_s),
        "slurmctld_rpc_per_s": rpcs / 20,
        "slurmctld_node_reads_per_s": node_reads / 20,
        "slurmctld_rpc_per_s_fleet_off": rpcs_off / 20,
        "slurmctld_node_reads_per_s_fleet_off": node_reads_off / 20,
    }


def _cordon_samples(
    kube: KubeCluster, slurm: SlurmCluster, names: list[str], events: int
) -> list[float]:
    """Seconds from a SLURM failure (its ``scontrol update`` returned) to cordon + taint."""
    samples = []
    for i in range(events):
        name = names[i % len(names)]
        knode = f"lat-{name}"

        def marked(knode: str = knode) -> bool:
            spec = kube.api.request("GET", f"/api/v1/nodes/{knode}")["spec"]
            taints = {t["key"] for t in spec.get("taints", [])}
            return bool(spec.get("unschedulable")) and "slonk.dev/unhealthy" in taints

        slurm.run(
            "scontrol", "update", f"nodename={name}", "state=fail",
            f"reason=Kill task failed {i}",
        )  # fmt: skip
        recorded, wall = time.monotonic(), time.time()
        wait_for("cordon+taint", marked, timeout_s=30, interval_s=0.01)
        samples.append(time.monotonic() - recorded)
        print(f"event {i} {name} at {wall:.3f}: {samples[-1] * 1000:.0f} ms", file=sys.stderr)
        slurm.run("scontrol", "update", f"nodename={name}", "state=resume")

        def lifted(knode: str = knode) -> bool:
            return not _marked_any(kube, knode)

        wait_for("marks lifted", lifted, timeout_s=30)
        # independent failures: the next one does not arrive in the same second as the
        # passes that lifted this one (those used the second's read budget)
        time.sleep(1.5 + (i % 7) / 7)
    return samples


def _marked_any(kube: KubeCluster, knode: str) -> bool:
    spec = kube.api.request("GET", f"/api/v1/nodes/{knode}")["spec"]
    taints = {t["key"] for t in spec.get("taints", [])}
    return bool(spec.get("unschedulable")) or "slonk.dev/unhealthy" in taints


def _rest(
    slurm: SlurmCluster, kube: KubeCluster, co: Coordinator, size: int, prefix: str
) -> dict[str, float]:
    """Four resyncs at rest (:data:`REST_S`): the processes' CPU, the load, slurmctld's time."""
    slurm.run("sdiag", "--reset")
    harness = (slurm.pids(), list(kube.pids().values()), [co.pid])
    cpu0 = [tree_cpu_s(pids) for pids in harness]
    rest0 = time.monotonic()
    time.sleep(REST_S)
    rest_s = time.monotonic() - rest0
    cpu1 = [tree_cpu_s(pids) for pids in harness]
    sdiag = slurm.run("sdiag").stdout
    node_info = node_info_of(sdiag)
    return {
        f"{prefix}harness_cpu_pct_{size}": 100 * (cpu1[0] - cpu0[0]) / rest_s,
        f"{prefix}kube_cpu_pct_{size}": 100 * (cpu1[1] - cpu0[1]) / rest_s,
        f"{prefix}coordinator_cpu_pct_{size}": 100 * (cpu1[2] - cpu0[2]) / rest_s,
        f"{prefix}loadavg_during_{size}": os.getloadavg()[0],
        f"{prefix}slurmctld_busy_ms_per_s_{size}": client_busy_us(sdiag) / 1000 / rest_s,
        # of which the node table (polls, "changed?" asks and full reads)
        f"{prefix}node_info_per_s_{size}": node_info[0] / rest_s,
        f"{prefix}node_info_busy_ms_per_s_{size}": node_info[1] / 1000 / rest_s,
        # a ping round's registrations in the window: the harness, not slonkd (0 expected)
        f"{prefix}registrations_during_{size}": float(registrations(sdiag)),
    }


def _resync_median(co: Coordinator, window_s: float = RESYNC_WINDOW_S) -> dict[str, Any]:
    """The median pass at rest over ``window_s`` (after :func:`_rest`, whose CPU it spares).

    One pass's time moves by up to 2x from one pass to the next (the collector, the host), so
    every pass in the window counts: the status is read each second and each new pass's
    duration and phases kept; the median of each, and how many passes it had.
    """
    seen: dict[int, dict[str, Any]] = {}
    ends = time.monotonic() + window_s
    while time.monotonic() < ends:
        passes = co.status()["passes"]
        if passes["last_ms"] is not None:
            seen.setdefault(int(passes["count"]), passes)
        time.sleep(1.0)
    samples = list(seen.values())
    phases = {k for p in samples for k in p["last_phases_ms"]}
    return {
        "ms": statistics.median(float(p["last_ms"]) for p in samples),
        "phases_ms": {
            k: statistics.median(float(p["last_phases_ms"].get(k, 0.0)) for p in samples)
            for k in sorted(phases)
        },
        # the SLURM phase is bimodal (the poll's table at once, or a read: a pass's own, or the
        # rest of the poll's on its way), so its median hides which: its mean does not
        "slurm_read_mean_ms": statistics.fmean(
            float(p["last_phases_ms"].get("slurm_read", 0.0)) for p in samples
        ),
        "passes": float(len(samples)),
    }


def scale(
    root: Path, kube: KubeCluster, size: int, have: int, other_pods: int = 10
) -> dict[str, float]:
    """Resync time, reads and RSS at ``size`` nodes (the pods and nodes so far: ``have``).

    ``other_pods``: the latency part's pods, also running (0 when it was skipped). Then a
    second coordinator with the change poll: its first pass and its cost at rest
    (``change_poll_*``).
    """
    # w-0 with a slurmd (the latency part's pod, when it ran), x-0 ... declared without one
    shape = FleetShape(
        slurmds=1, declared=size, declared_pool="x", slurmd_timeout_s=QUIET_SLURMD_TIMEOUT_S
    )
    slurm = cluster_of(root / f"slurm-{size}", shape.layout())
    slurm.start()
    try:
        build = FleetBuilder(kube=kube, namespace=NS, shape=shape, labelled=False)
        new = list(shape.declared_names[have:size])
        create_s = asyncio.run(_create(kube, build, "k", new))
        wait_for(
            f"{size} pods ready",
            lambda: _running(kube, size + other_pods),
            timeout_s=600,
            interval_s=2,
        )
        wait_for("K8s nodes settled", lambda: _settled(kube), timeout_s=600, interval_s=2)
        config: dict[str, Any] = {
            "resync_s": 5, "failure_grace_s": 10**6, "unready_grace_s": 10**6,
            "max_out": 100, "max_out_percent": 100, "mass_percent": 100,
        }  # fmt: skip
        co = Coordinator(root / f"co-{size}", kube, slurm, **config)
        try:
            began = time.monotonic()
            wait_for("first pass", lambda: co.passes() > 0, timeout_s=300, interval_s=0.2)
            first_s = time.monotonic() - began
            first_cpu_s = _cpu_s(co.pid)
            rest = _rest(slurm, kube, co, size, "")
            resync = _resync_median(co)
            status = co.status()
            passes = status["passes"]
            nodes = len(status["nodes"])
            out = {
                f"create_{size}_s": create_s,
                f"first_pass_{size}_s": first_s,
                # the way to it: process start + imports + API (before first_pass_s), the
                # Lease, then the term's lists and the first pass's phases (its status)
                f"first_pass_{size}_start_s": co.start_s,
                f"first_pass_{size}_cpu_s": first_cpu_s,
                f"first_pass_{size}_lease_s": _log_gap_s(
                    co.log, COORDINATOR_API_LISTENING, "kube.lease_acquired"
                ),
                **{
                    f"first_pass_{size}_{k.removesuffix('_ms')}_ms": float(v)
                    for k, v in passes["first_ms"].items()
                },
                f"resync_{size}_s": resync["ms"] / 1000,
                f"resync_{size}_slurm_reads": (passes["slurm_reads"] - passes["slurm_polls"])
                / max(1, passes["count"]),
                f"reads_per_s_{size}": passes["slurm_reads"] / max(1.0, time.monotonic() - began),
                f"coordinator_rss_{size}_mb": _rss_mb(co.pid),
                f"nodes_seen_{size}": float(nodes),
                **rest,
                **{f"resync_{size}_{k}_ms": v for k, v in resync["phases_ms"].items()},
                f"resync_{size}_slurm_read_mean_ms": resync["slurm_read_mean_ms"],
                f"resync_{size}_samples": resync["passes"],
            }
        finally:
            co.stop()
        fast = Coordinator(root / f"co-{size}-change", kube, slurm, change_poll=True, **config)
        try:
            began = time.monotonic()
            wait_for("first pass", lambda: fast.passes() > 0, timeout_s=300, interval_s=0.2)
            out[f"change_poll_first_pass_{size}_s"] = time.monotonic() - began
            out.update(_rest(slurm, kube, fast, size, "change_poll_"))
            fast_resync = _resync_median(fast)
            out[f"change_poll_resync_{size}_s"] = fast_resync["ms"] / 1000
            out[f"change_poll_resync_{size}_slurm_read_mean_ms"] = fast_resync["slurm_read_mean_ms"]
            passes = fast.status()["passes"]
            # the passes' own whole reads (not the poll's), per pass: with "no change" confirming
            # the poll's table, a pass should read none at rest
            out[f"change_poll_resync_{size}_slurm_reads"] = (
                passes["slurm_reads"] - passes["slurm_polls"]
            ) / max(1, passes["count"])
            out[f"change_poll_backend_is_libslurm_{size}"] = float(
                passes["slurm_poll_backend"] == "libslurm"
            )
        finally:
            fast.stop()
        return out
    finally:
        slurm.stop()


def main() -> int:
    """Run every measurement; print the table and the JSON line."""
    if sys.argv[1:2] == ["--change-poll"]:
        base = Path(tempfile.mkdtemp(prefix="slonkd-bench-change-"))
        timeout = int(sys.argv[2]) if len(sys.argv) > 2 else SCALE_SLURMD_TIMEOUT_S
        declared = int(sys.argv[3]) if len(sys.argv) > 3 else 0
        _print(change_poll_cost(base, slurmd_timeout_s=timeout, declared=declared))
        return 0
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    sizes = [int(x) for x in sys.argv[2].split(",") if x] if len(sys.argv) > 2 else [1000, 5000]
    root = Path(tempfile.mkdtemp(prefix="slonkd-bench-coordinator-"))
    results: dict[str, float] = {}
    with KubeCluster(root / "kube", node_monitor_grace_period="1h") as kube:
        kube.create_namespace(NS)
        if events > 0:  # 0: the scale part alone (first pass, resync)
            results.update(latency(root, kube, events))
        have = 0
        for size in sizes:
            results.update(scale(root, kube, size, have, 10 if events > 0 else 0))
            have = size
    for key in ("harness_cpu_pct", "slurmctld_busy_ms_per_s"):  # the names: 5,000 nodes
        for prefix in ("", "change_poll_"):
            if f"{prefix}{key}_5000" in results:
                results[f"{prefix}{key}"] = results[f"{prefix}{key}_5000"]
    if RELEASE == "22.05":  # in this interpreter: the host's libslurm
        results.update(change_poll_cost(root))
    results["slurm_release"] = float(RELEASE)
    _print(results)
    return 0


def _print(results: dict[str, float]) -> None:
    """The table, then one JSON line."""
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"{key:<{width}}  {value:12.3f}")
    print(json.dumps({k: round(v, 3) for k, v in results.items()}))


if __name__ == "__main__":
    raise SystemExit(main())

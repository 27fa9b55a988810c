"""The local sandbox: every real service at once, with slonkd's agents and coordinator.

``slonkd sandbox run`` (and plain ``slonkd sandbox``, in the foreground) does this; ``slonkd
sandbox up`` starts it detached (:mod:`slonkd_sandbox.sandbox.ctl`). Under one directory it
starts SLURM (one slurmd per worker pod), mosquitto (a password per user, the agents' ACL
pattern) and a Kubernetes control plane with ``workers + 1`` kwok nodes; creates namespace
``slonk`` with an OnDelete ``worker`` StatefulSet whose pods ``worker-<i>`` are SLURM nodes
``worker-<i>`` (preStop: ``slonkd prestop``), and the kubelet stand-in that binds them; then
runs ``slonkd coordinator`` (with the bus) and one ``slonkd agent`` per worker pod as local
processes. It writes ``env.sh`` and ``state.json`` (paths, API access, every process with
its start time, so that ``down`` stops exactly these) and holds until SIGTERM/SIGINT or
``hold_s``; then it stops everything it started, in reverse order.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from slonkd.core.kube_objects import WORKER_SELECTOR
from slonkd.core.log_events import COORDINATOR_SYNCED
from slonkd_sandbox import procs
from slonkd_sandbox.daemon import Daemon
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kubelet import KubeletStandIn
from slonkd_sandbox.mosquitto import AGENT_PATTERNS, Mosquitto, MqttUser
from slonkd_sandbox.sandbox.agents import AgentKeeper
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from slonkd_sandbox.workloads import prestop_command, spread_over_nodes, worker_statefulset

NAMESPACE = "slonk"
POOL = "worker"
SELECTOR = WORKER_SELECTOR
MARKER = ".slonkd-sandbox"
"""A directory holding this file was made by a sandbox: only such a directory is ever wiped."""
GRACE_S = 15
MARGIN_S = 5
COORDINATOR_CONFIG: dict[str, Any] = {
    "resync_s": 2,
    "failure_grace_s": 10,
    "unready_grace_s": 60,
    "max_out": 2,
    "rollout": {"max_parallel": 1, "job_wait_s": 5, "poll_s": 1, "settle_s": 60},
    "sdiag_s": 10,  # slurmctld's statistics on the dashboard within seconds (default 60)
}
AGENT_RESYNC_S = 2


def _say(message: str) -> None:
    print(f"[sandbox] {message}", flush=True)


def proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None when it does not exist)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has exited; only its parent's wait is missing
        return None
    return int(fields[19])


def descendants(root_pid: int) -> list[dict[str, Any]]:
    """Every live process below ``root_pid``, with its start time and command line."""
    children: dict[int, list[int]] = {}
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
        parent[int(entry.name)] = ppid
    out: list[dict[str, Any]] = []
    todo = list(children.get(root_pid, []))
    while todo:
        pid = todo.pop()
        start = proc_start_time(pid)
        if start is None:
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
        except OSError:
            continue
        out.append({"pid": pid, "ppid": parent.get(pid, 0), "start": start, "cmd": cmd.strip()})
        todo.extend(children.get(pid, []))
    return sorted(out, key=lambda p: int(p["pid"]))


def commands(procs_: list[dict[str, Any]]) -> list[str]:
    """The command lines of ``descendants``' processes, forks not yet exec'd left out.

    Between fork and exec a child shows its parent's command line: a coordinator starting
    scontrol would count as a second coordinator for that instant.
    """
    cmd_of = {p["pid"]: p["cmd"] for p in procs_}
    return [p["cmd"] for p in procs_ if cmd_of.get(p.get("ppid")) != p["cmd"]]


def prepare_dir(root: Path) -> None:
    """Make ``root`` empty for a new sandbox; refuse a directory a sandbox did not make."""
    if root.exists() and any(root.iterdir()):
        if not (root / MARKER).exists():
            raise SystemExit(
                f"slonkd sandbox: {root} exists and was not made by a sandbox; choose another --dir"
            )
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text("made by slonkd sandbox\n")


def write_state(root: Path, state: dict[str, Any]) -> None:
    """Write ``state.json`` atomically, readable by the owner only (it holds the API token)."""
    tmp = root / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.chmod(0o600)
    tmp.replace(root / "state.json")


def _prestop_argv() -> list[str]:
    return prestop_command(GRACE_S, MARGIN_S)


def run_sandbox(
    root: Path,
    *,
    workers: int = 4,
    hold_s: float = 0.0,
    fresh_dir: bool = True,
    accounting: bool = False,
) -> int:
    """Bring everything up under ``root``, print how to reach it, hold, stop everything.

    ``accounting``: SLURM also runs slurmdbd with a MariaDB of its own, so ``sacct`` lists
    jobs (an opt-in: it adds about 10 s to the start, see :mod:`slonkd_sandbox.accounting`).
    """
    if fresh_dir:
        prepare_dir(root)
    names = tuple(f"{POOL}-{i}" for i in range(workers))
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    state: dict[str, Any] = {
        "dir": str(root),
        "ready": False,
        "supervisor": {"pid": os.getpid(), "start": proc_start_time(os.getpid())},
        "namespace": NAMESPACE,
        "workers": list(names),
        "statefulset": POOL,
        "coordinator_config": COORDINATOR_CONFIG,
        "agent_resync_s": AGENT_RESYNC_S,
        "grace_s": GRACE_S,
        "accounting": accounting,
    }
    write_state(root, state)
    with ExitStack() as stack:
        t0 = time.monotonic()
        _say("starting Kubernetes (etcd, apiserver, controller-manager, scheduler, kwok)")
        kube = stack.enter_context(KubeCluster(root / "kube"))
        _say(f"Kubernetes ready in {kube.timings['control_plane_ready_s']:.1f} s")
        slurm = stack.enter_context(
            SlurmCluster(
                root / "slurm", SlurmLayout(nodes=names, autostart=False, accounting=accounting)
            )
        )
        with_dbd = " (with slurmdbd and MariaDB)" if accounting else ""
        _say(f"slurmctld ready in {slurm.started_s:.1f} s{with_dbd}")
        passwords = {user: secrets.token_hex(12) for user in ("coordinator", *names)}
        users = {
            "coordinator": MqttUser(
                password=passwords["coordinator"], acl=("topic readwrite slonk/#",)
            )
        }
        users.update({n: MqttUser(password=passwords[n]) for n in names})
        mqtt = stack.enter_context(
            Mosquitto(
                root / "mqtt",
                users=users,
                patterns=AGENT_PATTERNS,
            )
        )
        _say(f"mosquitto ready on 127.0.0.1:{mqtt.port}")
        kube_nodes = kube.add_fake_nodes([f"kwok-node-{i}" for i in range(workers + 1)])
        kube.wait_untainted(kube_nodes, timeout_s=90, interval_s=0.5)
        kube.create_namespace(NAMESPACE)
        stack.enter_context(
            KubeletStandIn(kube=kube, slurm=slurm, namespace=NAMESPACE, root=root / "kubelet")
        )
        sts = worker_statefulset(POOL, replicas=workers, grace_s=GRACE_S, prestop=_prestop_argv())
        sts["spec"]["updateStrategy"] = {"type": "OnDelete"}  # as the chart: slonkd rolls
        spread_over_nodes(sts, honor_taints=True)
        kube.api.request("POST", f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets", sts)
        slurm.wait_idle(names, timeout_s=120)
        _say(f"{workers} worker pods Running, their slurmd idle")
        base_env = {
            **os.environ,
            "KUBECONFIG": str(kube.kubeconfig),
            "SLURM_CONF": str(slurm.conf),
            "SLONKD_MQTT_HOST": mqtt.host,
            "SLONKD_MQTT_PORT": str(mqtt.port),
        }
        api_port = procs.free_ports(1)[0]
        coordinator_url = f"http://127.0.0.1:{api_port}"
        config = {**COORDINATOR_CONFIG, "api_host": "127.0.0.1", "api_port": api_port}
        coordinator_json = root / "coordinator.json"
        coordinator_json.write_text(json.dumps(config, indent=2))
        coordinator_log = logs / "coordinator.log"
        coordinator = Daemon(
            role="coordinator",
            env={
                **base_env,
                "POD_NAMESPACE": NAMESPACE,
                "POD_NAME": "coordinator-0",
                "SLONKD_CONFIG": str(coordinator_json),
                "SLONKD_MQTT_USER": "coordinator",
                "SLONKD_MQTT_PASSWORD": passwords["coordinator"],
            },
            log=coordinator_log,
        )
        stack.callback(coordinator.stop, grace_s=10.0)
        coordinator.start(until=COORDINATOR_SYNCED, timeout_s=60)
        state["coordinator_started_at"] = time.time()
        _say("coordinator leading and synced")
        ready_dir = root / "run"
        ready_dir.mkdir(exist_ok=True)
        metrics_ports = dict(zip(names, procs.free_ports(len(names)), strict=True))

        def agent_env(pod: str) -> dict[str, str]:
            config = root / "run" / f"agent-{pod}.json"
            if not config.exists():
                # one cheap check that passes, so verdicts show (status, metrics, dashboard)
                health = {"disk_paths": [], "mounts": ["/proc"]}
                config.write_text(json.dumps({"health": health}))
            return {
                "SLONKD_CONFIG": str(config),
                "SLONKD_MQTT_USER": pod,
                "SLONKD_MQTT_PASSWORD": passwords.get(pod, ""),
                "SLONKD_RESYNC_S": str(AGENT_RESYNC_S),
                "SLONKD_READY_FILE": str(ready_dir / f"ready-{pod}"),
                "SLONKD_METRICS_PORT": str(metrics_ports.get(pod, 0)),
                "SLONKD_METRICS_ADDRESS": "127.0.0.1",
            }

        keeper = stack.enter_context(
            AgentKeeper(
                api=kube.api,
                namespace=NAMESPACE,
                selector=SELECTOR,
                env=base_env,
                env_for=agent_env,
                logs=logs,
            )
        )
        procs.wait_for(
            "agents synced",
            lambda: all((ready_dir / f"ready-{n}").exists() for n in names),
            timeout_s=90,
            interval_s=0.2,
        )
        _say(f"{len(keeper.pids())} agents running, one per worker pod")
        env = root / "env.sh"
        env.write_text(
            f"# source this file to reach the sandbox in {root}\n"
            f"export SLONKD_SANDBOX_DIR={shlex.quote(str(root))}\n"
            f"export SLURM_CONF={shlex.quote(str(slurm.conf))}\n"
            f"export KUBECONFIG={shlex.quote(str(kube.kubeconfig))}\n"
            f"export SLONKD_MQTT_HOST={mqtt.host} SLONKD_MQTT_PORT={mqtt.port}\n"
            f"export SLONKD_MQTT_USER=coordinator"
            f" SLONKD_MQTT_PASSWORD={passwords['coordinator']}\n"
            f"export PATH={shlex.quote(str(kube.kubectl_path.parent))}:$PATH\n"
            f"export SLONKD_COORDINATOR_URL={coordinator_url} POD_NAMESPACE={NAMESPACE}\n"
        )
        env.chmod(0o600)
        state.update(
            {
                "ready": True,
                "up_s": round(time.monotonic() - t0, 1),
                "env": str(env),
                "kubeconfig": str(kube.kubeconfig),
                "slurm_conf": str(slurm.conf),
                "kubectl": str(kube.kubectl_path),
                "api": api_state(kube),
                "kube_nodes": kube_nodes,
                "coordinator_url": coordinator_url,
                "agent_metrics": {
                    n: f"http://127.0.0.1:{p}/metrics" for n, p in metrics_ports.items()
                },
                "logs": {
                    "sandbox": str(root / "sandbox.log"),
                    "coordinator": str(coordinator_log),
                    "agents": str(logs / "agent-<pod>.log"),
                    "kubelet": str(root / "kubelet" / "kubelet-journal.jsonl"),
                    "slurmctld": str(root / "slurm"),
                },
                "processes": descendants(os.getpid()),
            }
        )
        _say(f"ready in {state['up_s']} s")
        print_where_to_look(state)  # before the state says ready: `up` ends on that
        write_state(root, state)
        if hold_s > 0:
            stop.wait(hold_s)
        else:
            stop.wait()
        _say("stopping: agents, coordinator, kubelet stand-in, mosquitto, SLURM, Kubernetes")
    state["ready"] = False
    state["stopped"] = True
    write_state(root, state)
    _say("stopped")
    return 0


def api_state(kube: KubeCluster) -> dict[str, Any]:
    """How ``state.json`` (both modes) tells the demo and the tests to reach the apiserver."""
    return {
        "host": "127.0.0.1",
        "port": kube.ports["apiserver"],
        "ca_file": str(kube.ca_file),
        "token": kube.admin_token,
    }


def print_where_to_look(state: dict[str, Any]) -> None:
    """Tell a person how to look at the sandbox."""
    root = state["dir"]
    lines = [
        f"source {state['env']}",
        "slonkd status                                  # the coordinator's view, rollouts",
        "sinfo -R; sinfo -N; squeue                    # SLURM (SLURM_CONF in env.sh)",
        f"kubectl -n {state['namespace']} get pods -o wide; kubectl get nodes",
        f"coordinator log: {state['logs']['coordinator']}",
        f"agent logs:      {state['logs']['agents']}",
        f"kubelet journal: {state['logs']['kubelet']}",
        f"SLURM_CONF={state['slurm_conf']}",
        f"KUBECONFIG={state['kubeconfig']}",
    ]
    print_hints(lines, root)


def print_hints(lines: Sequence[str], root: str) -> None:
    """Print ``lines`` for a person, then how to watch the sandbox in ``root`` and stop it.

    Both modes end so (this module's and :mod:`slonkd_sandbox.sandbox.real`'s).
    """
    for line in (
        *lines,
        f"slonkd sandbox demo --dir {root}    # watch slonkd at work",
        f"slonkd sandbox down --dir {root}    # stop everything",
    ):
        print(f"    {line}", flush=True)


__all__ = [
    "COORDINATOR_CONFIG",
    "NAMESPACE",
    "POOL",
    "api_state",
    "descendants",
    "print_hints",
    "run_sandbox",
]

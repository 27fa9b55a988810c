"""``slonkd sandbox run --real`` (and ``up --real``): the chart as users deploy it, on a real node.

The foreground supervisor of the real mode. It enters :func:`slonkd_sandbox.chart.release.install`
under ``<dir>/node``: a control plane, a :class:`~slonkd_sandbox.realnode.node.RealNode`
(containerd, runc, kubelet, CoreDNS in a network namespace with no route out), the images
``container/build.sh`` makes (built on first use, cached by content in ``~/.cache/slonkd``),
``helm install`` of ``deploy/helm/slonk`` with every pod Ready, and one unprivileged user
with an SSH key in the shared home. Nothing of the release is replaced: slurmctld, slurmd,
the agent sidecars, the coordinators and mosquitto run in their containers.

It writes ``state.json`` (``mode: real``: kubeconfig, namespace, release, controller pod, the
user's key and how to reach the login pod, helm's arguments for an upgrade) and ``env.sh``
(``KUBECONFIG``, kubectl on ``PATH``, and two shell functions: ``slurm CMD`` runs a SLURM
command in the slurmctld container, ``login CMD`` runs it on the login pod over SSH as the
user), then holds until SIGTERM/SIGINT or ``hold_s``. Leaving stops the node and the
control plane; what survived (:meth:`RealNode.leftovers`: processes, mounts, cgroups,
netns, links, routes) goes into ``state.json`` and the log. Needs root (network
namespaces, mounts, containerd).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

from slonkd_sandbox.chart.helm import CHART_DIR
from slonkd_sandbox.chart.release import (
    CONTROLLER,
    LOGIN,
    RELEASE,
    SSH_OPTIONS,
    USER,
    Release,
    install,
)
from slonkd_sandbox.procs import HarnessError
from slonkd_sandbox.realnode.node import RealNode
from slonkd_sandbox.sandbox.run import (
    api_state,
    descendants,
    prepare_dir,
    print_hints,
    proc_start_time,
    write_state,
)

GRACE_S = 24
MARGIN_S = 8
FAILURE_GRACE_S = 10
CHART_RESYNC_S = 30.0
"""The chart sets no resync: agent and coordinator run with slonkd's default (30 s)."""
NEEDED = ("containerd", "runc", "ctr", "socat", "nsenter", "ssh", "ssh-keygen", "ip")


class _Stopped(Exception):
    """SIGTERM/SIGINT before the release was ready: unwind through the install's tear-down."""


def _say(message: str) -> None:
    print(f"[sandbox] {message}", flush=True)


def missing_programs() -> list[str]:
    """The host programs the real node needs that are not installed."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [p for p in NEEDED if shutil.which(p, path=path) is None]


def ssh_argv(state: dict[str, Any], login_ip: str) -> list[str]:
    """argv of ``ssh`` as the sandbox's user to the login pod, from the node's namespace."""
    login = state["login"]
    return [
        "nsenter",
        f"--net=/run/netns/{login['netns']}",
        "--",
        "ssh",
        "-i",
        login["ssh_key"],
        *SSH_OPTIONS,
        f"{login['user']}@{login_ip}",
    ]


def _state_for(release: Release, root: Path) -> dict[str, Any]:
    """What ``demo``, ``down`` and a person need to reach the release."""
    kube, node = release.kube, release.node
    if kube.tools is None:
        raise HarnessError("the control plane has no tools")
    return {
        "namespace": release.ns,
        "release": RELEASE,
        "workers": list(release.workers),
        "statefulset": f"{RELEASE}-cpu",
        "kube_nodes": [node.name],
        "kubeconfig": str(kube.kubeconfig),
        "kubectl": str(kube.kubectl_path),
        "api": api_state(kube),
        "controller": {"pod": CONTROLLER, "container": "slurmctld"},
        "login": {
            "pod": LOGIN,
            "user": USER,
            "ssh_key": str(release.ssh_key),
            "netns": node.netns,
            "home": str(release.home / USER),
        },
        "helm": {
            "binary": str(release.helm.binary),
            "home": str(release.helm.home),
            "chart": str(CHART_DIR),
            "values": list(release.values),
        },
        "node": {"name": node.name, "netns": node.netns, "root": str(node.root)},
        "coordinator_config": {"failure_grace_s": FAILURE_GRACE_S, "resync_s": CHART_RESYNC_S},
        "agent_resync_s": CHART_RESYNC_S,
        # one full resync of agent and coordinator after the pod's restart (the process
        # mode's 2 s resync allows three passes; the chart's 30 s would make it 90 s)
        "quiet_s": CHART_RESYNC_S + 5,
        "grace_s": GRACE_S,
        "timings": {k: round(v, 1) for k, v in release.timings.items()},
        "env": str(root / "env.sh"),
        "logs": {
            "sandbox": str(root / "sandbox.log"),
            "node": str(node.root / "log"),
            "pods": str(node.root / "pod-logs"),
        },
    }


def _write_env(root: Path, state: dict[str, Any]) -> None:
    ns, ctl, login = state["namespace"], state["controller"], state["login"]
    argv = ssh_argv(state, "")
    ssh = shlex.join(argv[:-1]) + f' "{argv[-1]}$ip"'
    env = root / "env.sh"
    env.write_text(
        f"# source this file to reach the real-node sandbox in {root}\n"
        f"export SLONKD_SANDBOX_DIR={shlex.quote(str(root))}\n"
        f"export KUBECONFIG={shlex.quote(state['kubeconfig'])}\n"
        f"export PATH={shlex.quote(str(Path(state['kubectl']).parent))}:$PATH\n"
        f"export POD_NAMESPACE={ns}\n"
        "# slurm CMD...: a SLURM command in the slurmctld container (as root, the operator)\n"
        f'slurm() {{ kubectl -n {ns} exec {ctl["pod"]} -c {ctl["container"]} -- "$@"; }}\n'
        f"# login CMD...: CMD on the login pod over SSH as {login['user']} (root needed: nsenter)\n"
        "login() {\n"
        f"  ip=$(kubectl -n {ns} get pod {login['pod']} -o jsonpath='{{.status.podIP}}')\n"
        f'  {ssh} "$@"\n'
        "}\n"
    )
    env.chmod(0o600)


def print_where_to_look(state: dict[str, Any]) -> None:
    """Tell a person how to look at the real-node sandbox."""
    root, ns, node = state["dir"], state["namespace"], state["kube_nodes"][0]
    user = state["login"]["user"]
    lines = [
        f"source {state['env']}        # KUBECONFIG, kubectl, and the functions slurm and login",
        f"kubectl -n {ns} get pods -o wide; kubectl get node {node} -o wide",
        "slurm sinfo -R; slurm squeue                 # kubectl exec into the slurmctld pod",
        f"login                                        # ssh as {user} to the login pod",
        "login sbatch --requeue --wrap 'sleep 600'; login squeue",
        f"login sbatch hb.sh    # a heartbeat job: {state['login']['home']}/hb-<job>",
        f"kubectl -n {ns} logs {state['workers'][0]} -c slonkd-agent      # the agent's JSON lines",
        f"kubectl -n {ns} exec $(kubectl -n {ns} get lease {state['release']}-coordinator"
        " -o jsonpath='{.spec.holderIdentity}') -c coordinator -- slonkd status",
        f"ssh by hand: nsenter --net=/run/netns/{state['login']['netns']} ssh -i"
        f" {state['login']['ssh_key']} {user}@<login pod IP>",
        f"node logs: {state['logs']['node']}",
    ]
    print_hints(lines, root)


def run_real(root: Path, *, workers: int, hold_s: float = 0.0, fresh_dir: bool = True) -> int:
    """Install the chart on a real node under ``root``, hold, tear it all down; 0 when clean."""
    if os.geteuid() != 0:
        _say("the real mode needs root (network namespace, mounts, containerd)")
        return 1
    missing = missing_programs()
    if missing:
        _say(f"missing programs: {', '.join(missing)}: run scripts/bootstrap")
        return 1
    if fresh_dir:
        prepare_dir(root)
    stop = threading.Event()
    phase = {"ready": False, "stopping": False}

    def on_signal(*_: object) -> None:
        if phase["stopping"]:
            return
        if not phase["ready"]:
            phase["stopping"] = True
            raise _Stopped
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    state: dict[str, Any] = {
        "mode": "real",
        "dir": str(root),
        "ready": False,
        "supervisor": {"pid": os.getpid(), "start": proc_start_time(os.getpid())},
        "workers": [],
    }
    write_state(root, state)
    nodes: list[RealNode] = []
    rc = 0
    t0 = time.monotonic()
    try:
        with install(
            root / "node",
            replicas=workers,
            grace_s=GRACE_S,
            margin_s=MARGIN_S,
            failure_grace_s=FAILURE_GRACE_S,
            say=_say,
            on_node=nodes.append,
        ) as release:
            state.update(_state_for(release, root))
            _write_env(root, state)
            state.update(
                {
                    "ready": True,
                    "up_s": round(time.monotonic() - t0, 1),
                    "coordinator_started_at": time.time(),
                    "processes": descendants(os.getpid()),
                }
            )
            _say(f"ready in {state['up_s']} s; timings {state['timings']}")
            print_where_to_look(state)  # before the state says ready: `up` ends on that
            write_state(root, state)
            phase["ready"] = True
            stop.wait(hold_s if hold_s > 0 else None)
            phase["stopping"] = True
            _say("stopping: the real node (every container), then the control plane")
    except _Stopped:
        _say("stopped before it was ready")
    except HarnessError as exc:
        _say(f"failed: {exc}")
        rc = 1
    phase["stopping"] = True
    left = nodes[0].leftovers() if nodes else []
    for item in left:
        _say(f"left behind: {item}")
    state.update({"ready": False, "stopped": True, "leftovers": left})
    write_state(root, state)
    (root / "env.sh").unlink(missing_ok=True)
    _say("stopped, nothing left behind" if not left else "stopped; see what was left above")
    return 1 if left else rc


def _ancestors() -> set[int]:
    """The pids of the running process and of every process above it."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def host_leftovers(state: dict[str, Any]) -> list[str]:
    """What of a real-mode sandbox the host still holds: its netns, mounts, processes."""
    left: list[str] = []
    node = state.get("node") or {}
    netns = node.get("netns")
    if netns and Path(f"/run/netns/{netns}").exists():
        left.append(f"netns {netns}")
    prefix = str(state["dir"]) + "/"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            left.append(f"mount {point}")
    needle = str(state["dir"]).encode()
    mine = _ancestors()  # `sudo slonkd sandbox down --dir DIR` names DIR too
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
                left.append(f"process {entry.name}: {cmd}")
        except OSError:
            continue
    return left + list(state.get("leftovers") or [])


__all__ = ["host_leftovers", "missing_programs", "print_where_to_look", "run_real", "ssh_argv"]

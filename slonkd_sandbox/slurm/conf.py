"""The harness cluster's slurm.conf and the RebootProgram it names, rendered from its handle.

Every path lies under the cluster's directory and every port is the cluster's own, so
clusters run side by side: munge's socket, state, spool, pid and log files, the accounting
lines of :mod:`slonkd_sandbox.accounting` when the layout keeps accounting, one ``NodeName``
line per slurmd-backed node (each on its own port of 127.0.0.1) and one range line for the
declared nodes without a slurmd. :data:`REBOOT_PROGRAM` is what slurmd runs for ``scontrol
reboot``: it asks the supervisor to restart that node's slurmd.

:class:`SlurmLayout` (what a cluster declares) lives here, beside its rendering;
:mod:`slonkd_sandbox.slurm.cluster` re-exports it. Neighbours:
:mod:`slonkd_sandbox.slurm.cluster` (the cluster, a :class:`ConfSource`),
:mod:`slonkd_sandbox.slurm.chroot` (renders it for the paths seen inside a root),
:mod:`slonkd_sandbox.slurm.supervisor` (serves the reboot request).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from slonkd_sandbox import accounting


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmLayout:
    """What the cluster declares: slurmd-backed nodes and slurmd-less declared nodes."""

    nodes: tuple[str, ...] = ("n1", "n2", "n3", "n4")
    autostart: bool = True
    extra_prefix: str = "x"
    extra_nodes: int = 0
    extra_first: int = 1
    """Number of the first declared node (``extra_prefix="d-", extra_first=0``: ``d-0``, ``d-1``
    ..., the names of a StatefulSet's pods)."""
    cpus: int = 2
    real_memory_mb: int = 1000
    features: tuple[str, ...] = ("f_a", "f_b")
    slurmd_timeout_s: int = 10
    """SlurmdTimeout; slurmctld pings every node about every third of it. 10 s finds a dead
    slurmd fast in tests. Layouts of thousands of declared nodes use
    :data:`QUIET_SLURMD_TIMEOUT_S`: the declared nodes' pings all reach the one real slurmd."""
    cred_expire_s: int = 120
    """AuthInfo's cred_expire (SLURM's default): also how long a requeued job waits before
    it may start again (``Reason=BeginTime``)."""
    topology_plugin: str | None = None
    """e.g. ``topology/tree``: ``topology.conf`` starts with all nodes on one switch (or
    in one block for ``topology/block``, 24.11 only)."""
    accounting: bool = False
    """Run slurmdbd with a MariaDB of its own and send job records to it (``sacct`` works)."""


def short_hostname() -> str:
    """The machine's short hostname: slurmctld insists SlurmctldHost is exactly this."""
    return socket.gethostname().split(".")[0]


REBOOT_PROGRAM = """#!/bin/sh
# The harness's RebootProgram: slurmd runs it for ``scontrol reboot``. It logs the request and
# asks the supervisor to restart this node's slurmd (found as the ancestor started with -N):
# the node registers anew, as after a real reboot.
echo "reboot requested: $*" >> "$(dirname "$0")/../log/reboot.log"
pid=$PPID
while :; do  # slurmd is PID 1 of its own PID namespace
    node=$(tr '\\0' '\\n' < /proc/$pid/cmdline | sed -n '/^-N$/{{n;p;q}}')
    [ -n "$node" ] || [ "$pid" -le 1 ] && break
    pid=$(awk '{{print $4}}' /proc/$pid/stat)
done
[ -n "$node" ] || exit 0
exec python3 -c 'import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sys.argv[1])
s.sendall(json.dumps({{"op": "reboot_slurmd", "node": sys.argv[2]}}).encode() + b"\\n")
s.recv(4096)' "{socket}" "$node"
"""


class ConfSource(Protocol):
    """What slurm.conf is rendered from: a cluster's directory, layout and ports."""

    root: Path
    layout: SlurmLayout
    ctld_port: int
    slurmd_port: int
    accounting_ports: accounting.AccountingPorts | None


def render_slurm_conf(cluster: ConfSource) -> str:
    """slurm.conf for ``cluster``: every path under its root, every port its own."""
    d = cluster.root
    lay = cluster.layout
    host = short_hostname()
    lines = [
        "ClusterName=lab",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={cluster.ctld_port}",
        f"SlurmdPort={cluster.slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d}/munge/munge.sock,cred_expire={lay.cred_expire_s}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/run/slurmctld.pid",
        f"SlurmdPidFile={d}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log",
        f"SlurmdLogFile={d}/log/slurmd-%n.log",
        f"PlugStackConfig={d}/etc/plugstack.conf",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        *(
            accounting.slurm_conf_lines(d, cluster.accounting_ports)
            if cluster.accounting_ports is not None
            else ["AccountingStorageType=accounting_storage/none"]
        ),
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=1",
        f"SlurmdTimeout={lay.slurmd_timeout_s}",
        "MessageTimeout=10",
        "KillWait=5",
        "MailProg=/bin/true",
        f"RebootProgram={d}/bin/reboot",
        "ResumeTimeout=60",
    ]
    features = ",".join(lay.features)
    common = f"CPUs={lay.cpus} RealMemory={lay.real_memory_mb} Feature={features} State=UNKNOWN"
    for i, node in enumerate(lay.nodes):
        lines.append(
            f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 "
            f"Port={cluster.slurmd_port + i} {common}"
        )
    if lay.extra_nodes:
        last = lay.extra_first + lay.extra_nodes - 1
        lines.append(
            f"NodeName={lay.extra_prefix}[{lay.extra_first}-{last}]"
            f" NodeHostname={host} NodeAddr=127.0.0.1 {common}"
        )
    if lay.topology_plugin:
        lines.append(f"TopologyPlugin={lay.topology_plugin}")
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


__all__ = ["REBOOT_PROGRAM", "ConfSource", "SlurmLayout", "render_slurm_conf", "short_hostname"]

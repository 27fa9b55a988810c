"""The harness cluster's slurm.conf and the RebootProgram it names, rendered from its handle.

Every path lies under the cluster's directory and every port is the cluster's own, so
clusters run side by side: munge's socket, state, spool, pid and log files, the accounting
lines of :mod:`slonkd_sandbox.accounting` when the layout keeps accounting, one ``NodeName``
line per slurmd-backed node (each on its own port of 127.0.0.1) and one range line for the
declared nodes without a slurmd. :data:`REBOOT_PROGRAM` is what slurmd runs for ``scontrol
reboot``: it asks the supervisor to restart that node's slurmd.

Neighbours: :mod:`slonkd_sandbox.slurm` (the cluster and its
:class:`~slonkd_sandbox.slurm.SlurmLayout`, which this renders),
:mod:`slonkd_sandbox.slurm_chroot` (renders it for the paths seen inside a root),
:mod:`slonkd_sandbox.slurm_supervisor` (serves the reboot request).
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from slonkd_sandbox import accounting

if TYPE_CHECKING:
    from slonkd_sandbox.slurm import SlurmCluster


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


def render_slurm_conf(cluster: SlurmCluster) -> str:
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


__all__ = ["REBOOT_PROGRAM", "render_slurm_conf", "short_hostname"]

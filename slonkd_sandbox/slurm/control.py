"""Reaching a running harness SLURM cluster from any process: its supervisor, its slurmds.

:func:`control` sends one request to a cluster's supervisor (the protocol is
:mod:`slonkd_sandbox.slurm.supervisor`'s) and :func:`slurmd_host_pid` finds a node's slurmd
among the host's processes. Neither needs the cluster's handle: the kubelet stand-in and the
tests use them with a socket path or a slurm.conf path.

Neighbours: :mod:`slonkd_sandbox.slurm.cluster` (the handle, which sends its own requests through
:func:`control`), :mod:`slonkd_sandbox.slurm.supervisor` (the other end of the socket),
:mod:`slonkd_sandbox.kube.kubelet` (enters a slurmd's namespaces by its host PID).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from slonkd_sandbox.procs import HarnessError


def control(sock_path: Path, request: dict[str, Any], *, timeout_s: float = 60.0) -> dict[str, Any]:
    """One request/reply on a supervisor's control socket (usable from any process)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(str(sock_path))
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    reply: dict[str, Any] = json.loads(data)
    if not reply.get("ok"):
        raise HarnessError(f"supervisor refused {request}: {reply.get('error')}")
    return reply


def slurmd_host_pid(conf: str | Path, node: str) -> int | None:
    """The host PID of the slurmd of ``node`` started with ``conf``, None if none runs.

    What a container runtime knows of a container's init: the harness enters that slurmd's
    PID and mount namespaces to run a pod's preStop command "in the container", so the hook
    sees the job processes as in a real slurmd pod.
    """
    want_conf, want_node = str(conf).encode(), node.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"slurmd")
            and want_node in argv
            and any(want_conf in a for a in argv)
        ):
            return int(entry.name)
    return None


__all__ = ["control", "slurmd_host_pid"]

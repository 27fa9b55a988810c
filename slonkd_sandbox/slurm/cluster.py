"""A real SLURM 22.05 cluster on one host: munged + slurmctld + N slurmd, in a private dir.

Everything lives under one directory (config, state, spool, logs, munge key and socket) with
free high ports, so clusters can run side by side. The whole cluster runs in a PID
namespace whose init is :mod:`slonkd_sandbox.slurm.supervisor`; killing it (or the process
that started it) leaves no daemon or job step behind.

Optionally the cluster keeps accounting (``SlurmLayout(accounting=True)``): a private
MariaDB and a slurmdbd start in the same namespace before slurmctld (see
:mod:`slonkd_sandbox.accounting`); the default cluster has none and starts as fast as before.

Optionally thousands of extra nodes are declared without a slurmd (pings to them reach the
first slurmd, so they turn ``idle``; they accept ``scontrol update``): scale tests use them.

This module owns the layout and the handle: preparing the cluster's directory, starting the
supervisor, and the requests and clients tests use. Neighbours: :mod:`slonkd_sandbox.slurm.conf`
(slurm.conf and the RebootProgram), :mod:`slonkd_sandbox.slurm.control` (the supervisor's
socket and slurmd PIDs from any process), :mod:`slonkd_sandbox.slurm.supervisor` (the
namespace's init), :mod:`slonkd_sandbox.slurm.chroot` (the same cluster of another release,
run inside a root).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slonkd_sandbox import accounting, procs
from slonkd_sandbox.procs import HarnessError
from slonkd_sandbox.slurm.conf import REBOOT_PROGRAM, SlurmLayout, render_slurm_conf
from slonkd_sandbox.slurm.control import control, slurmd_host_pid

CLIENT_TIMEOUT_S = 30.0


SCALE_SLURMD_TIMEOUT_S = 300
"""SLURM's default SlurmdTimeout (slurmctld pings every node each third of it): for clusters of
real slurmd that must stay quiet (the test harness's 10 s pings every 3.3 s)."""

QUIET_SLURMD_TIMEOUT_S = 3600
"""SlurmdTimeout for layouts of thousands of declared nodes: a ping round every 20 minutes.

Every request slurmctld sends to a declared node reaches the one real slurmd at the same
address, and a declared node never registers as itself, so slurmctld asks each of them to
register again in every ping round. The real slurmd answers each request by registering
itself: at 5,000 declared nodes and SLURM's default of 300 s, a round every 100 s is 5,000
registrations of one node, about 10.7 ms each in slurmctld (sdiag) under the node table's
write lock, with slurmd at 140 % of a core for about 5 s (measured 2026-12-04). A real
cluster has nothing like it: its nodes registered once at boot, and a round pings each
slurmd on its own machine and re-registers 50 nodes. A measured window that caught a round
measured the harness (a 12 s window at 5,000 nodes: harness CPU 65 % against 12 %, slurmctld's
client time 129 against 23 ms/s). At this timeout slurmctld still holds, packs and updates
every declared node as a real cluster's controller would; only the artificial rounds are
gone (the first, at start, still runs; benches count registrations in their windows)."""


PORT_TRIES = 3
"""How many times :meth:`SlurmCluster.start` chooses its ports when slurmctld finds one taken."""


class PortTakenError(HarnessError):
    """slurmctld exited at start: another process bound its port first."""


@dataclass(slots=True)
class SlurmCluster(procs.StartStop):
    """Handle on a running cluster; use as a context manager or call start()/stop()."""

    root: Path
    layout: SlurmLayout = field(default_factory=SlurmLayout)
    ctld_port: int = 0
    slurmd_port: int = 0
    accounting_ports: accounting.AccountingPorts | None = None
    _supervisor: subprocess.Popen[bytes] | None = None
    started_s: float = 0.0

    @property
    def conf(self) -> Path:
        """Path of slurm.conf; clients need it as ``SLURM_CONF``."""
        return self.root / "etc" / "slurm.conf"

    @property
    def topology_conf(self) -> Path:
        """topology.conf, which SLURM reads from slurm.conf's directory."""
        return self.root / "etc" / "topology.conf"

    @property
    def env(self) -> dict[str, str]:
        """An environment for SLURM clients (``scontrol``, ``sbatch`` ...) of this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def socket_path(self) -> Path:
        """The supervisor's control socket."""
        return self.root / "run" / "supervisor.sock"

    @property
    def extra_node_names(self) -> list[str]:
        """Names of the declared nodes that have no slurmd."""
        first = self.layout.extra_first
        return [
            f"{self.layout.extra_prefix}{i}" for i in range(first, first + self.layout.extra_nodes)
        ]

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, *, timeout_s: float = 60.0) -> None:
        """Write the config, start every daemon and wait until all slurmd nodes are idle.

        Ports this call chose itself (none were set) are chosen again, up to
        :data:`PORT_TRIES` times, when slurmctld exits because its port was taken: a free
        port is probed, then bound by slurmctld later, and another process can bind it in
        between (the workers' port slices keep the harness's own services apart, not every
        program on the machine). A slurmctld that exits for another reason fails the start at
        once with its ``fatal:`` line, one that does not answer with the end of its log: a
        full run once lost a test to a bare "slurmctld: not ready after 60 s", its cause not
        kept.
        """
        chosen_here = not self.ctld_port
        for attempt in range(1, PORT_TRIES + 1):
            try:
                self._start_once(timeout_s=timeout_s)
                return
            except PortTakenError:
                self.stop()
                if not chosen_here or attempt == PORT_TRIES:
                    raise
                self.ctld_port = self.slurmd_port = 0

    def _start_once(self, *, timeout_s: float) -> None:
        self._check_programs()
        begun = time.monotonic()
        spec = self._prepare()
        self.socket_path.unlink(missing_ok=True)  # a try before this one left it
        log = self.root / "log" / "supervisor.log"
        self._supervisor = procs.spawn(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child=SIGKILL",
                sys.executable,
                "-m",
                *self._supervisor_args(spec),
            ],
            log=log,
            stdin=subprocess.PIPE,
        )
        alive = procs.exited(self._supervisor, log)
        procs.wait_for("slurm supervisor", self.socket_path.exists, timeout_s=20, alive=alive)

        def ctld_alive() -> str | None:
            return alive() or self._ctld_exited()

        try:
            procs.wait_for(
                "slurmctld", self._pings, timeout_s=timeout_s, interval_s=0.1, alive=ctld_alive
            )
        except PortTakenError:
            raise
        except HarnessError as exc:
            log_tail = procs.tail(self.root / "log" / "slurmctld.log", 1500)
            raise HarnessError(f"{exc}; slurmctld.log ends:\n{log_tail}") from exc
        if self.layout.autostart:
            # 20 slurmd of a 24.11 root once took more than 60 s on 2 cores
            idle_s = max(timeout_s, 5.0 * len(self.layout.nodes))
            self.wait_idle(self.layout.nodes, timeout_s=idle_s)
        self.started_s = time.monotonic() - begun

    def pids(self) -> list[int]:
        """The supervisor's pid (the daemons and jobs run below it), [] when stopped."""
        sup = self._supervisor
        return [sup.pid] if sup is not None and sup.poll() is None else []

    def stop(self) -> None:
        """Stop the whole cluster: the PID namespace takes every daemon and job with it."""
        sup = self._supervisor
        if sup is None:
            return
        self._supervisor = None
        if sup.poll() is None:
            with contextlib.suppress(OSError, HarnessError):
                self.control({"op": "shutdown"}, timeout_s=2)
            try:
                sup.wait(timeout=6)
            except subprocess.TimeoutExpired:
                sup.send_signal(signal.SIGKILL)
                sup.wait(timeout=10)
        if sup.stdin is not None:
            sup.stdin.close()

    @property
    def running(self) -> bool:
        """Whether the supervisor (and so the namespace) is alive."""
        return self._supervisor is not None and self._supervisor.poll() is None

    # -- control ---------------------------------------------------------------------------

    def control(self, request: dict[str, Any], *, timeout_s: float = 60.0) -> dict[str, Any]:
        """Send one request to the supervisor and return its reply (raises on ``ok: false``)."""
        return control(self.socket_path, request, timeout_s=timeout_s)

    def start_slurmd(self, node: str) -> None:
        """Start the slurmd of ``node`` (no-op when it runs)."""
        self.control({"op": "start_slurmd", "node": node})

    def stop_slurmd(self, node: str, *, grace_s: float = 5.0) -> str:
        """Stop ``node``'s slurmd like a kubelet: SIGTERM, SIGKILL after ``grace_s``."""
        return str(self.control({"op": "stop_slurmd", "node": node, "grace_s": grace_s})["how"])

    def slurmd_host_pid(self, node: str) -> int | None:
        """The host PID of ``node``'s slurmd (it runs in a PID namespace of its own)."""
        return slurmd_host_pid(self.conf, node)

    def slurmd_running(self, node: str) -> bool:
        """Whether the supervisor has a live slurmd for ``node``."""
        return f"slurmd-{node}" in self.control({"op": "status"})["running"]

    def kill_slurmctld(self) -> None:
        """SIGKILL slurmctld.

        slurmctld writes its state files in the background: what changed in the last moments
        before a SIGKILL can be lost (seen with a drain killed within milliseconds).
        """
        self.control({"op": "kill_slurmctld"})

    def stop_slurmctld(self, *, grace_s: float = 10.0) -> None:
        """SIGTERM slurmctld; it saves its state before exiting."""
        self.control({"op": "stop_slurmctld", "grace_s": grace_s})

    def start_slurmctld(self, *, timeout_s: float = 30.0) -> None:
        """Start slurmctld again and wait until it answers ``scontrol ping``."""
        self.control({"op": "start_slurmctld"})
        procs.wait_for("slurmctld restart", self._pings, timeout_s=timeout_s, interval_s=0.1)

    def stop_slurmdbd(self, *, grace_s: float = 5.0) -> str:
        """SIGTERM slurmdbd (accounting clusters): slurmctld queues its records meanwhile."""
        return str(self.control({"op": "stop_slurmdbd", "grace_s": grace_s})["how"])

    def start_slurmdbd(self, *, timeout_s: float = 30.0) -> None:
        """Start slurmdbd again and wait until ``sacctmgr`` reaches it."""
        self.control({"op": "start_slurmdbd"})

        def answers() -> bool:
            return self.run("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0

        procs.wait_for("slurmdbd restart", answers, timeout_s=timeout_s, interval_s=0.2)

    # -- clients ---------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a SLURM client (``scontrol``, ``sinfo``, ``sbatch`` ...) against this cluster."""
        proc = subprocess.run(
            [*self._client_wrapper, *argv],
            env=self._client_env,
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT_S,
            check=False,
        )
        if check and proc.returncode != 0:
            raise HarnessError(
                f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-1000:]}"
            )
        return proc

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` from ``sinfo -N``, e.g. ``idle``, ``drained``, ``down*``."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def job_state(self, job: str) -> tuple[str, int]:
        """A job's ``(JobState, Restarts)`` per ``scontrol show job`` (``"?"``, -1 if unread)."""
        text = self.run("scontrol", "-o", "show", "job", job).stdout
        state = re.search(r"JobState=(\S+)", text)
        restarts = re.search(r"Restarts=(\d+)", text)
        return (state.group(1) if state else "?", int(restarts.group(1)) if restarts else -1)

    def wait_idle(self, nodes: Sequence[str], *, timeout_s: float = 60.0) -> float:
        """Wait until every node in ``nodes`` reads ``idle``; return the seconds it took."""
        seen: dict[str, str] = {}

        def all_idle() -> bool:
            seen.clear()
            seen.update(self.node_states())
            return all(seen.get(n) == "idle" for n in nodes)

        try:
            return procs.wait_for(f"slurm nodes {list(nodes)} idle", all_idle, timeout_s=timeout_s)
        except HarnessError as exc:
            late = {n: seen.get(n, "?") for n in nodes if seen.get(n) != "idle"}
            raise HarnessError(f"{exc}; not idle: {late}") from exc

    def _pings(self) -> bool:
        return self.run("scontrol", "ping", check=False).returncode == 0

    def _ctld_exited(self) -> str | None:
        """Why slurmctld exited (its last ``fatal:`` line), None while the supervisor runs it.

        Raises :class:`PortTakenError` when that line says its port was taken.
        """
        try:
            running = self.control({"op": "status"}, timeout_s=5)["running"]
        except (OSError, HarnessError):
            return None  # the supervisor's own exit is the other check's
        if "slurmctld" in running:
            return None
        out = procs.tail(self.root / "log" / "slurmctld.out", 4000)
        fatal = [line for line in out.splitlines() if "fatal:" in line]
        why = fatal[-1] if fatal else "exited; its output ends:\n" + out[-1000:]
        if "Address already in use" in why:
            raise PortTakenError(f"slurmctld on port {self.ctld_port}: {why}")
        return why

    # -- config ----------------------------------------------------------------------------

    def _initial_topology(self) -> None:
        """With a topology plugin: all nodes on one switch (tree) or in one block."""
        if self.layout.topology_plugin and not self.topology_conf.exists():
            every = ",".join([*self.layout.nodes, *self.extra_node_names])
            kind = "BlockName" if self.layout.topology_plugin == "topology/block" else "SwitchName"
            self.topology_conf.write_text(f"{kind}=harness Nodes={every}\n")

    def _choose_ports(self) -> None:
        """Free ports for the database and slurmdbd (accounting clusters; kept on restart)."""
        if self.layout.accounting and self.accounting_ports is None:
            db, dbd = procs.free_ports(2)
            self.accounting_ports = accounting.AccountingPorts(mariadb=db, slurmdbd=dbd)

    def _accounting_spec(
        self, *, inner_root: Path, client_prefix: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """The database's datadir, slurmdbd.conf and the supervisor's accounting spec."""
        if self.accounting_ports is None:
            raise HarnessError("accounting ports not chosen (call _choose_ports first)")
        accounting.install_db(self.root)
        return accounting.supervisor_spec(
            root=self.root,
            inner_root=inner_root,
            ports=self.accounting_ports,
            client_prefix=client_prefix,
        )

    # -- what the chroot cluster (slurm.chroot) does differently ---------------------------

    def _check_programs(self) -> None:
        """Fail early when the host lacks a program the cluster runs."""
        for tool in ("slurmctld", "slurmd", "scontrol", "munged", "mungekey", "unshare"):
            if shutil.which(tool) is None:
                raise HarnessError(f"{tool} not found: install slurmctld slurmd slurm-client munge")
        if self.layout.accounting:
            for tool in ("slurmdbd", "sacctmgr", "mariadbd", "mariadb-install-db"):
                if shutil.which(tool) is None:
                    raise HarnessError(f"{tool} not found: install slurmdbd mariadb-server")

    def _supervisor_args(self, spec: Path) -> list[str]:
        """The supervisor's module and arguments (after ``python -m``)."""
        return ["slonkd_sandbox.slurm.supervisor", str(spec)]

    @property
    def _client_wrapper(self) -> tuple[str, ...]:
        """argv before a SLURM client's: none, the host's clients run as they are."""
        return ()

    @property
    def _client_env(self) -> dict[str, str] | None:
        """The clients' environment: :attr:`env` (``SLURM_CONF``)."""
        return self.env

    def _seen(self, path: Path) -> str:
        """``path`` as the daemons see it (the same path on the host)."""
        return str(path)

    def _daemon_prefix(self) -> list[str]:
        """argv before munged's, slurmctld's and slurmdbd's: none on the host."""
        return []

    def _slurmd_argv(self, conf: str) -> list[str]:
        """slurmd's argv with slurm.conf ``conf``."""
        return ["slurmd", "-D", "-f", conf]

    def _reboot_program(self) -> str:
        """The RebootProgram: it asks the supervisor to restart the node's slurmd."""
        return REBOOT_PROGRAM.format(socket=self.socket_path)

    def _render_conf(self) -> str:
        """The text of slurm.conf."""
        return render_slurm_conf(self)

    # -- the cluster's directory -------------------------------------------------------------

    def _prepare(self) -> Path:
        """Write the directory, munge key, config and RebootProgram; return the spec's path."""
        root = self.root
        for sub in ("etc", "state", "spool", "run", "log", "munge", "bin"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "munge").chmod(0o755)
        key = root / "munge" / "munge.key"
        if not key.exists():
            subprocess.run(
                ["mungekey", "--create", f"--keyfile={key}"],
                check=True,
                capture_output=True,
                timeout=30,
            )
            key.chmod(0o600)
        n = len(self.layout.nodes)
        self.ctld_port = self.ctld_port or procs.free_ports(1)[0]
        self.slurmd_port = self.slurmd_port or procs.free_port_range(max(n, 1))
        self._choose_ports()
        reboot = root / "bin" / "reboot"
        reboot.write_text(self._reboot_program())
        reboot.chmod(0o755)
        (root / "etc" / "plugstack.conf").write_text("")
        self.conf.write_text(self._render_conf())
        self._initial_topology()
        seen, prefix = self._seen, self._daemon_prefix()
        munge_socket = root / "munge" / "munge.sock"
        spec: dict[str, Any] = {
            "root": str(root),
            "slurm_conf": seen(self.conf),
            "socket": str(self.socket_path),
            "munge_socket": str(munge_socket),
            "nodes": list(self.layout.nodes),
            "autostart": list(self.layout.nodes) if self.layout.autostart else [],
            "munged_argv": [
                *prefix,
                "munged",
                "-F",
                "--force",
                f"--socket={seen(munge_socket)}",
                f"--key-file={seen(key)}",
                f"--pid-file={seen(root / 'run' / 'munged.pid')}",
                f"--log-file={seen(root / 'log' / 'munged.log')}",
                f"--seed-file={seen(root / 'munge' / 'munge.seed')}",
            ],
            "slurmctld_argv": [*prefix, "slurmctld", "-D", "-f", seen(self.conf)],
            "slurmd_argv": self._slurmd_argv(seen(self.conf)),
        }
        if self.layout.accounting:
            spec["accounting"] = self._accounting_spec(
                inner_root=Path(seen(root)), client_prefix=tuple(prefix)
            )
        path = root / "run" / "spec.json"
        path.write_text(json.dumps(spec, indent=2))
        return path


__all__ = ["QUIET_SLURMD_TIMEOUT_S", "SCALE_SLURMD_TIMEOUT_S", "SlurmCluster", "SlurmLayout"]

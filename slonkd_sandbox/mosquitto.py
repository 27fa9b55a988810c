"""A real mosquitto 2.0 broker on loopback, in a private directory with persistence on.

Two flavours:

- static auth: ``allow_anonymous false`` with a ``password_file`` (made with
  ``mosquitto_passwd -b``) and an ``acl_file`` with per-user rules;
- dynamic security: Debian's ``mosquitto_dynamic_security.so`` plugin with only an admin
  client at start; clients and roles are then created at run time through the
  ``$CONTROL/dynamic-security/v1`` topic (the bus issue's per-agent credentials).

Restarting keeps the persistence file, so retained messages and persistent sessions
survive, as in production. With ``tls`` (a :class:`~slonkd_sandbox.tls.ServerCert`) the
broker also listens with TLS on :attr:`Mosquitto.tls_port`, as the chart's ``tls.enabled``
makes it; the plain port stays for the tests' own checks.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slonkd_sandbox import procs
from slonkd_sandbox.procs import HarnessError
from slonkd_sandbox.tls import ServerCert

DYNSEC_PLUGIN = Path("/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so")


@dataclass(frozen=True, slots=True, kw_only=True)
class MqttUser:
    """A static user: password and the ACL lines that follow its ``user`` line."""

    password: str
    acl: Sequence[str] = ()


AGENT_PATTERNS = (
    "pattern write slonk/v1/+/nodes/%u/status",
    "pattern read slonk/v1/+/nodes/%u/commands",
    "pattern read slonk/v1/+/coordinator/status",
)
"""ACL of a password-file agent (user = its SLURM node): its own status, its commands (the
leader's recheck) and the leader's status (the commands' token floor)."""


@dataclass(slots=True)
class Mosquitto(procs.StartStop):
    """Handle on a running broker; use as a context manager or call start()/stop()."""

    root: Path
    users: Mapping[str, MqttUser] = field(default_factory=dict)
    patterns: Sequence[str] = ()
    """ACL ``pattern`` lines applied to every user (``%u`` = username, ``%c`` = client id)."""
    dynamic_security: bool = False
    admin_user: str = "admin"
    admin_password: str = "admin-password"  # noqa: S105 - a throwaway test broker's admin
    port: int = 0
    tls: ServerCert | None = None
    """Also listen with TLS (this certificate and key) on :attr:`tls_port`."""
    tls_port: int = 0
    tcp_nodelay: bool = True
    """``set_tcp_nodelay true``, as the chart's broker; False: a broker left at mosquitto's
    default (Nagle on), where a reply written after a PUBACK waits ~40 ms for a delayed ACK."""
    _proc: subprocess.Popen[bytes] | None = None
    started_s: float = 0.0

    @property
    def host(self) -> str:
        """Where clients connect."""
        return "127.0.0.1"

    @property
    def log(self) -> Path:
        """The broker's log file."""
        return self.root / "mosquitto.log"

    def start(self, *, timeout_s: float = 20.0) -> None:
        """Write the config (first start only) and start the broker; wait for its port."""
        if shutil.which("mosquitto") is None:
            raise HarnessError("mosquitto not found: install Debian's mosquitto package")
        begun = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = procs.free_ports(1)[0]
        if self.tls is not None and not self.tls_port:
            self.tls_port = next(p for p in procs.free_ports(2) if p != self.port)
        conf = self.root / "mosquitto.conf"
        conf.write_text(self._render())
        self._proc = procs.spawn(["mosquitto", "-c", str(conf)], log=self.log)
        procs.wait_for(
            "mosquitto",
            self._accepts,
            timeout_s=timeout_s,
            alive=procs.exited(self._proc, self.log),
        )
        self.started_s = time.monotonic() - begun

    def stop(self) -> None:
        """SIGTERM the broker (it writes its persistence file) and reap it."""
        if self._proc is not None:
            procs.stop(self._proc, grace_s=5)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL the broker: what persisted before stays, the rest is lost."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)
            self._proc = None

    def restart(self) -> None:
        """Stop and start on the same port and persistence file."""
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int:
        """The broker's pid (for a test that signals it); HarnessError when it is not running."""
        if self._proc is None:
            raise HarnessError("mosquitto is not running")
        return self._proc.pid

    def _accepts(self) -> bool:
        with socket.create_connection((self.host, self.port), timeout=0.5):
            return True

    def _render(self) -> str:
        d = self.root
        lines = [
            # Started as root (CI), mosquitto would switch to user "mosquitto", which cannot
            # read a private 0700 directory; as any other user this line is ignored.
            f"user {pwd.getpwuid(os.geteuid()).pw_name}",
            "per_listener_settings false",
            f"set_tcp_nodelay {'true' if self.tcp_nodelay else 'false'}",
            f"listener {self.port} 127.0.0.1",
            "allow_anonymous false",
            "persistence true",
            f"persistence_location {d}/",
            "autosave_interval 1",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            "log_timestamp_format %Y-%m-%dT%H:%M:%S",
        ]
        if self.tls is not None:
            lines += [
                f"listener {self.tls_port} 127.0.0.1",
                f"certfile {self.tls.cert}",
                f"keyfile {self.tls.key}",
                "tls_version tlsv1.2",
            ]
        if self.dynamic_security:
            dynsec = d / "dynamic-security.json"
            if not dynsec.exists():
                subprocess.run(
                    [
                        "mosquitto_ctrl",
                        "dynsec",
                        "init",
                        str(dynsec),
                        self.admin_user,
                        self.admin_password,
                    ],
                    check=True,
                    capture_output=True,
                    timeout=30,
                )
            lines += [f"plugin {DYNSEC_PLUGIN}", f"plugin_opt_config_file {dynsec}"]
            return "\n".join(lines) + "\n"
        passwd = d / "passwd"
        passwd.write_text("")
        for name, user in self.users.items():
            subprocess.run(
                ["mosquitto_passwd", "-b", str(passwd), name, user.password],
                check=True,
                capture_output=True,
                timeout=30,
            )
        acl: list[str] = list(self.patterns)
        for name, user in self.users.items():
            acl += ["", f"user {name}", *user.acl]
        (d / "acl").write_text("\n".join(acl) + "\n")
        lines += [f"password_file {passwd}", f"acl_file {d / 'acl'}"]
        return "\n".join(lines) + "\n"

"""SLURM accounting for the harness's clusters: a private MariaDB and a slurmdbd.

An opt-in of :class:`slonkd_sandbox.slurm.cluster.SlurmLayout` (``accounting=True``). Everything
lives under the cluster's directory: the database's datadir, socket and log under
``D/mariadb``, ``slurmdbd.conf`` (mode 0600, next to slurm.conf, where slurmdbd looks for
it) and slurmdbd's log and pid file. MariaDB listens on 127.0.0.1 only (a free port, name
resolution off) and slurmdbd on 127.0.0.1 (``DbdHost=localhost``, a free port). Both run
inside the cluster's PID namespace, started by its supervisor before slurmctld, so they die
with it and leave nothing behind.

The database runs as root (``--user=root``): the harness's private directories are
mode 0700 and owned by root, so the ``mysql`` account could not reach a datadir inside
them. The datadir is made small (8 MB redo log) so a cluster's database costs about 30 MB
of disk and a second to create.

The supervisor (see :mod:`slonkd_sandbox.slurm.supervisor`) starts mariadbd, runs
:data:`GRANT_SQL` through the socket, starts slurmdbd, waits for its port and runs
:func:`sacctmgr_setup` (cluster, account, user) before slurmctld starts.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slonkd_sandbox.procs import HarnessError

DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
DB_PASSWORD = "harness-only"  # noqa: S105 - a loopback database that lives for one test
ACCOUNT = "lab"
"""The account every job of the harness's users is charged to (their default account)."""

_MARIADB_TUNING = (
    "--innodb-log-file-size=8M",
    "--innodb-buffer-pool-size=16M",
)
GRANT_SQL = (
    f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}'; "
    f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1'; FLUSH PRIVILEGES;"
)
"""Run once as the database's root (socket authentication): slurmdbd's account."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountingPorts:
    """The two TCP ports of a cluster's accounting, both on 127.0.0.1."""

    mariadb: int
    slurmdbd: int


def mariadb_dir(root: Path) -> Path:
    """The database's directory (datadir, socket, pid file and log) under a cluster's root."""
    return root / "mariadb"


def install_db(root: Path) -> None:
    """Create the datadir with mariadb-install-db (once; a restarted cluster reuses it)."""
    base = mariadb_dir(root)
    data = base / "data"
    if (data / "mysql").is_dir():
        return
    base.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--user=root",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
            *_MARIADB_TUNING,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise HarnessError(f"mariadb-install-db failed: {(proc.stdout + proc.stderr)[-1500:]}")


def mariadbd_argv(root: Path, port: int) -> list[str]:
    """mariadbd on 127.0.0.1:``port`` with everything under ``mariadb_dir(root)``."""
    base = mariadb_dir(root)
    return [
        "mariadbd",
        "--no-defaults",
        f"--datadir={base / 'data'}",
        f"--socket={base / 'mysqld.sock'}",
        f"--pid-file={base / 'mysqld.pid'}",
        f"--log-error={base / 'mysqld.log'}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        "--skip-name-resolve",
        "--skip-log-bin",
        "--user=root",
        "--innodb-flush-log-at-trx-commit=0",
        *_MARIADB_TUNING,
    ]


def grant_argv(root: Path) -> list[str]:
    """The client call that creates slurmdbd's database account (as root, over the socket)."""
    sock = mariadb_dir(root) / "mysqld.sock"
    return ["mariadb", "--no-defaults", f"--socket={sock}", "-u", "root", "-e", GRANT_SQL]


def render_slurmdbd_conf(root: Path, ports: AccountingPorts) -> str:
    """slurmdbd.conf; ``root`` is the cluster's directory as slurmdbd sees it."""
    return (
        "\n".join(
            [
                "AuthType=auth/munge",
                f"AuthInfo=socket={root}/munge/munge.sock",
                "DbdHost=localhost",
                "DbdAddr=127.0.0.1",
                f"DbdPort={ports.slurmdbd}",
                "SlurmUser=root",
                f"PidFile={root}/run/slurmdbd.pid",
                f"LogFile={root}/log/slurmdbd.log",
                "DebugLevel=info",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={ports.mariadb}",
                f"StorageUser={DB_USER}",
                f"StoragePass={DB_PASSWORD}",
                f"StorageLoc={DB_NAME}",
            ]
        )
        + "\n"
    )


def slurm_conf_lines(root: Path, ports: AccountingPorts) -> list[str]:
    """What slurm.conf says to send job and node records to this slurmdbd.

    ``AccountingStoragePass`` names the munge socket that connections to slurmdbd use
    (slurmctld's and ``sacct``'s): ``AuthInfo`` covers only connections to slurmctld.
    """
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={ports.slurmdbd}",
        f"AccountingStoragePass={root}/munge/munge.sock",
    ]


def sacctmgr_setup(cluster_name: str, users: tuple[str, ...] = ("root",)) -> list[list[str]]:
    """``sacctmgr -i`` calls that register the cluster, its account and the users.

    Each user's default account becomes :data:`ACCOUNT`, so jobs are charged to it.
    """
    calls = [
        ["sacctmgr", "-i", "add", "cluster", cluster_name],
        ["sacctmgr", "-i", "add", "account", ACCOUNT, f"Cluster={cluster_name}"],
    ]
    for user in users:  # root exists from the start, with default account root
        calls.append(["sacctmgr", "-i", "add", "user", user, f"Account={ACCOUNT}"])
        calls.append(["sacctmgr", "-i", "modify", "user", user, "set", f"DefaultAccount={ACCOUNT}"])
    return calls


def supervisor_spec(
    *,
    root: Path,
    inner_root: Path,
    ports: AccountingPorts,
    client_prefix: tuple[str, ...] = (),
    cluster_name: str = "lab",
) -> dict[str, Any]:
    """The ``accounting`` part of the supervisor's spec.

    ``root`` is the cluster's directory on the host (the database runs on the host);
    ``inner_root`` is the same directory as slurmdbd and the clients see it, and
    ``client_prefix`` the argv that runs a program of the cluster's release (``chroot ROOT``
    for a release in a root of its own).
    """
    conf = root / "etc" / "slurmdbd.conf"
    conf.write_text(render_slurmdbd_conf(inner_root, ports))
    conf.chmod(0o600)
    return {
        "mariadbd_argv": mariadbd_argv(root, ports.mariadb),
        "mariadb_socket": str(mariadb_dir(root) / "mysqld.sock"),
        "grant_argv": grant_argv(root),
        "slurmdbd_argv": [*client_prefix, "slurmdbd", "-D"],
        "slurmdbd_port": ports.slurmdbd,
        "setup_argvs": [[*client_prefix, *c] for c in sacctmgr_setup(cluster_name)],
    }

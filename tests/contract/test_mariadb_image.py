"""slonk-mariadb, the entrypoint of container/mariadb, run here with Debian's MariaDB.

With the environment and the arguments the chart gives the accounting database's pod, it
makes the database and slurmdbd's user on an empty datadir (a password with quotes and
backslashes included), serves them over TCP, and on a restart keeps what it made.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slonkd_sandbox import procs
from slonkd_sandbox.chart.helm import Helm
from slonkd_sandbox.toolchain import ensure_tools
from tests.unit.test_chart_render import one, render

ENTRYPOINT = Path(__file__).resolve().parents[2] / "container" / "mariadb" / "slonk-mariadb"
PASSWORD = "it's a \\ test"

pytestmark = pytest.mark.skipif(
    shutil.which("mariadbd") is None, reason="mariadb-server is not installed"
)


@pytest.fixture
def root() -> Iterator[Path]:
    """A private directory for the datadir and the socket."""
    path = Path(tempfile.mkdtemp(prefix="slonk-mariadb-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _chart_container(tmp: Path) -> dict[str, object]:
    helm = Helm(binary=ensure_tools().helm, home=tmp / "helm")
    sts = one(render(helm, set_json=("accounting.enabled=true",)), "StatefulSet", "rel-mariadb")
    container: dict[str, object] = sts["spec"]["template"]["spec"]["containers"][0]
    return container


def _start(root: Path, args: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    return procs.spawn(
        ["sh", str(ENTRYPOINT), *args, f"--port={port}", "--bind-address=127.0.0.1"],
        log=root / "entrypoint.log",
        env={
            "PATH": os.environ["PATH"],
            "SLONK_MARIADB_DATADIR": str(root / "data"),
            "SLONK_MARIADB_RUN": str(root / "run"),
            "SLONK_MARIADB_USER": "root",  # the private dir is root's only
            **env,
        },
    )


def _query(port: int, user: str, password: str, sql: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "mariadb",
            "--no-defaults",
            "-h",
            "127.0.0.1",
            "-P",
            str(port),
            "-u",
            user,
            "-N",
            "-e",
            sql,
        ],
        env={**os.environ, "MYSQL_PWD": password},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_entrypoint_makes_the_database_and_user_the_chart_asks_for(root: Path) -> None:
    """The chart's env and args: slurmdbd's user logs in over TCP and owns its database."""
    container = _chart_container(root)
    env_list = container["env"]
    assert isinstance(env_list, list)
    env = {e["name"]: e["value"] for e in env_list if "value" in e}
    env["MARIADB_PASSWORD"] = PASSWORD  # from the Secret in the pod
    args = container["args"]
    assert isinstance(args, list)
    (port,) = procs.free_ports(1)
    db = _start(root, [a for a in args if not a.startswith("--port=")], env, port)
    try:
        alive = procs.exited(db, root / "entrypoint.log")
        procs.wait_for(
            "mariadb via TCP",
            lambda: _query(port, env["MARIADB_USER"], PASSWORD, "SELECT 1").returncode == 0,
            timeout_s=90,
            alive=alive,
        )
        name = env["MARIADB_DATABASE"]
        sql = f"CREATE TABLE {name}.t (i INT); SELECT @@innodb_lock_wait_timeout"
        made = _query(port, env["MARIADB_USER"], PASSWORD, sql)
        assert made.returncode == 0, made.stderr
        assert made.stdout.strip() == "900"  # the chart's arguments reached mariadbd
        wrong = _query(port, env["MARIADB_USER"], "not it", "SELECT 1")
        assert wrong.returncode != 0
        assert _query(port, "root", "", "SELECT 1").returncode != 0  # root: socket only
    finally:
        db.send_signal(signal.SIGTERM)
        assert db.wait(timeout=60) == 0

    again = _start(root, [], {}, port)  # no MARIADB_*: an initialised datadir needs none
    try:
        procs.wait_for(
            "mariadb restarted",
            lambda: _query(port, env["MARIADB_USER"], PASSWORD, "SELECT 1").returncode == 0,
            timeout_s=90,
            alive=procs.exited(again, root / "entrypoint.log"),
        )
        tables = _query(port, env["MARIADB_USER"], PASSWORD, f"SHOW TABLES IN {name}").stdout
        assert tables.split() == ["t"]
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(timeout=60)


def test_an_empty_datadir_without_the_environment_is_refused(root: Path) -> None:
    """No MARIADB_PASSWORD on an empty datadir: exit non-zero, saying what is missing."""
    proc = subprocess.run(
        ["sh", str(ENTRYPOINT)],
        env={
            "PATH": os.environ["PATH"],
            "SLONK_MARIADB_DATADIR": str(root / "data"),
            "SLONK_MARIADB_RUN": str(root / "run"),
            "SLONK_MARIADB_USER": "root",
            "MARIADB_DATABASE": "d",
            "MARIADB_USER": "u",
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode != 0
    assert "MARIADB_PASSWORD is required" in proc.stderr

"""The chart's SLURM accounting (``accounting.enabled``): slurmdbd, its database, slurm.conf.

Renders the chart with the pinned helm (no cluster) and reads the objects: off by default;
when on, slurm.conf sends records to the slurmdbd pod, slurmdbd.conf names the chart's
MariaDB (or an external database from the values) and gets its password from the Secret
the database uses; the init container's script, run here, writes the mode 0600 file owned
by SlurmUser that slurmdbd insists on.
"""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from slonkd_sandbox.chart.helm import CHART_DIR, Helm
from tests.unit.test_chart_render import Obj, helm, one, render, slurm_conf
from tests.unit.test_chart_secrets import made_once

__all__ = ["helm"]  # the module-scoped fixture, shared with test_chart_render

ON = ("accounting.enabled=true",)
EXTERNAL = (
    *ON,
    'accounting.database.host="db.example.org"',
    'accounting.database.existingSecret="acct-db"',
)


def _conf_lines(text: str) -> dict[str, str]:
    pairs = (ln.strip().split("=", 1) for ln in text.splitlines() if "=" in ln)
    return {k: v for k, v in pairs if not k.startswith("#")}


def _names(objs: list[Obj]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def _container(sts: Obj, name: str, *, init: bool = False) -> Obj:
    spec = sts["spec"]["template"]["spec"]
    found: list[Obj] = [
        c for c in spec["initContainers" if init else "containers"] if c["name"] == name
    ]
    assert len(found) == 1, f"{len(found)} containers named {name}"
    return found[0]


def _headless(objs: list[Obj], name: str, container: str) -> tuple[Obj, Obj, Obj]:
    """StatefulSet ``name``, the headless Service of that name it is served by, its container."""
    sts = one(objs, "StatefulSet", name)
    svc = one(objs, "Service", name)
    assert sts["spec"]["serviceName"] == name
    assert svc["spec"]["clusterIP"] == "None"
    return sts, svc, _container(sts, container)


def _pod_spec(objs: list[Obj], sts: str) -> Obj:
    spec: Obj = one(objs, "StatefulSet", sts)["spec"]["template"]["spec"]
    return spec


def _secret_ref(container: Obj, env: str) -> tuple[str, str]:
    (var,) = [e for e in container["env"] if e["name"] == env]
    ref = var["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def test_accounting_is_off_by_default(helm: Helm) -> None:
    """Default values: no slurmdbd, no database, slurm.conf keeps accounting_storage/none."""
    objs = render(helm)
    conf = _conf_lines(slurm_conf(objs))
    assert conf["AccountingStorageType"] == "accounting_storage/none"
    assert "AccountingStorageHost" not in conf
    assert not [n for n in _names(objs) if "slurmdbd" in n[1] or "mariadb" in n[1]]


def test_enabled_runs_slurmdbd_on_the_charts_mariadb(helm: Helm) -> None:
    """slurm.conf points at the slurmdbd pod; slurmdbd.conf at the MariaDB pod; one password.

    Every host name is the pod FQDN behind the headless Service the chart renders, every
    port the one the pod exposes, and the password Secret is the one MariaDB creates its
    user with.
    """
    objs = render(helm, set_json=ON)
    conf = _conf_lines(slurm_conf(objs))
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["AccountingStorageHost"] == "rel-slurmdbd-0.rel-slurmdbd.hpc.svc.cluster.local"
    assert conf["JobAcctGatherType"] == "jobacct_gather/linux"

    dbd, dbd_svc, main = _headless(objs, "rel-slurmdbd", "slurmdbd")
    assert main["args"][-2:] == ["slurmdbd", "-D"]
    port = main["ports"][0]["containerPort"]
    assert port == dbd_svc["spec"]["ports"][0]["port"] == int(conf["AccountingStoragePort"])
    assert (
        dbd_svc["spec"]["selector"].items() <= dbd["spec"]["template"]["metadata"]["labels"].items()
    )

    dbd_conf_text = one(objs, "ConfigMap", "rel-slurmdbd-config")["data"]["slurmdbd.conf"]
    dbd_conf = _conf_lines(dbd_conf_text)
    assert "StoragePass" not in dbd_conf  # never in a ConfigMap
    assert dbd_conf["DbdHost"] == "rel-slurmdbd-0"  # the pod's hostname: slurmdbd checks it
    assert int(dbd_conf["DbdPort"]) == port
    assert dbd_conf["StorageType"] == "accounting_storage/mysql"
    assert dbd_conf["StorageHost"] == "rel-mariadb-0.rel-mariadb.hpc.svc.cluster.local"

    db, _, mariadb = _headless(objs, "rel-mariadb", "mariadb")
    assert mariadb["ports"][0]["containerPort"] == int(dbd_conf["StoragePort"])
    env = {e["name"]: e.get("value") for e in mariadb["env"]}
    assert env["MARIADB_DATABASE"] == dbd_conf["StorageLoc"]
    assert env["MARIADB_USER"] == dbd_conf["StorageUser"]
    secret = _secret_ref(mariadb, "MARIADB_PASSWORD")
    assert secret == _secret_ref(_container(dbd, "slurmdbd-conf", init=True), "DB_PASSWORD")
    assert secret[1] in made_once(objs)[secret[0]]  # made once by the secrets Job
    assert db["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]

    policy = one(objs, "NetworkPolicy", "rel-mariadb")
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"][0]["podSelector"]["matchLabels"] == dbd_svc["spec"]["selector"]


def test_an_external_database_replaces_the_charts_mariadb(helm: Helm) -> None:
    """``database.host`` set: no MariaDB objects; slurmdbd uses that host and the given Secret."""
    objs = render(helm, set_json=EXTERNAL)
    names = _names(objs)
    assert not [n for n in names if "mariadb" in n[1]]
    assert "rel-accounting-db" not in made_once(objs)
    dbd_conf = _conf_lines(one(objs, "ConfigMap", "rel-slurmdbd-config")["data"]["slurmdbd.conf"])
    assert dbd_conf["StorageHost"] == "db.example.org"
    init = _container(one(objs, "StatefulSet", "rel-slurmdbd"), "slurmdbd-conf", init=True)
    assert _secret_ref(init, "DB_PASSWORD") == ("acct-db", "password")


def test_an_external_database_without_a_secret_is_refused(helm: Helm) -> None:
    """An external host without ``existingSecret`` fails, naming the value to set."""
    proc = helm.template(
        "rel", set_json=(*ON, 'accounting.database.host="db.example.org"'), check=False
    )
    assert proc.returncode != 0
    assert "accounting.database.existingSecret: an external" in proc.stderr


def test_lint_is_clean_with_accounting(helm: Helm) -> None:
    """``helm lint --strict`` passes with the chart's MariaDB and with an external one."""
    for values in (ON, EXTERNAL):
        proc = helm.run("lint", "--strict", str(CHART_DIR), *(f"--set-json={v}" for v in values))
        assert "0 chart(s) failed" in proc.stdout
        assert "[WARNING]" not in proc.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the script chowns to the slurm user")
def test_the_init_script_writes_slurmdbd_conf_as_slurmdbd_wants_it(
    helm: Helm, tmp_path: Path
) -> None:
    """The init container's script, run here: 0600, owned by slurm, the password appended."""
    try:
        slurm = pwd.getpwnam("slurm")
    except KeyError:
        pytest.skip("no slurm user (install slurmctld)")
    objs = render(helm, set_json=ON)
    init = _container(one(objs, "StatefulSet", "rel-slurmdbd"), "slurmdbd-conf", init=True)
    shell, flag, script = init["command"]
    dirs = {m["mountPath"]: tmp_path / m["name"] for m in init["volumeMounts"]}
    for path in dirs.values():
        path.mkdir()
    (dirs["/etc/slonk/slurmdbd"] / "slurmdbd.conf").write_text(
        one(objs, "ConfigMap", "rel-slurmdbd-config")["data"]["slurmdbd.conf"]
    )
    for mount in sorted(dirs, key=len, reverse=True):
        script = script.replace(mount, str(dirs[mount]))
    subprocess.run(
        [shell, flag, script], env={"DB_PASSWORD": "s3cret", "PATH": "/usr/bin:/bin"}, check=True
    )
    written = dirs["/etc/slurmdbd"] / "slurmdbd.conf"
    st = written.stat()
    assert (st.st_mode & 0o777, st.st_uid) == (0o600, slurm.pw_uid)
    assert _conf_lines(written.read_text())["StoragePass"] == "s3cret"
    assert dirs["/run/slurmdbd"].stat().st_uid == slurm.pw_uid


def test_slurmctld_waits_for_slurmdbd_only_on_its_first_start(helm: Helm, tmp_path: Path) -> None:
    """With accounting, the controller pod's init waits for slurmdbd until last_tres exists.

    slurmctld's first start (no state) exits without slurmdbd ("no TRES from it"); later
    starts read last_tres. The script runs here: it waits while nothing listens and there is
    no state, returns once slurmdbd's port answers, and at once when last_tres exists.
    """
    assert "initContainers" not in _pod_spec(render(helm), "rel-slurmctld")
    objs = render(helm, set_json=ON)
    conf = _conf_lines(slurm_conf(objs))
    (wait,) = _pod_spec(objs, "rel-slurmctld")["initContainers"]
    python, flag, script, host, port, state = wait["command"]
    assert python == "python3"  # the controller image has it (slonk-init is Python)
    assert (host, int(port)) == (conf["AccountingStorageHost"], int(conf["AccountingStoragePort"]))
    assert state == "/var/spool/slurmctld/last_tres"
    assert wait["volumeMounts"][0]["mountPath"] == str(Path(state).parent)

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        free = str(listener.getsockname()[1])
    last_tres = tmp_path / "last_tres"
    argv = [sys.executable, flag, script, "127.0.0.1", free, str(last_tres)]
    waiting = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=1.5)  # no slurmdbd, no state: it waits
        with socket.socket() as dbd:
            dbd.bind(("127.0.0.1", int(free)))
            dbd.listen()
            assert waiting.wait(timeout=10) == 0  # slurmdbd answers: slurmctld may start
    finally:
        waiting.kill()
        waiting.wait()
    assert "first start: waiting for slurmdbd" in (waiting.stdout.read() if waiting.stdout else "")
    last_tres.write_text("")
    assert subprocess.run(argv, timeout=10, check=False).returncode == 0  # state: no wait

"""Bad settings stop ``slonkd coordinator`` and ``slonkd agent`` at load: exit 2, one line.

Each case runs the real command in a child process with the bad value in its
``SLONKD_CONFIG`` file; the answer must be exit code 2 and one stderr line naming the key,
never a traceback, a tight loop or a start that fails later.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TIMEOUT_S = 60

COORDINATOR_CASES: list[tuple[dict[str, object], str]] = [
    ({"state_poll_s": 0}, "state_poll_s"),
    ({"retry_period_s": 0}, "retry_period_s"),
    ({"resync_s": 0}, "resync_s"),
    ({"max_batch_delay_s": -1}, "max_batch_delay_s"),
    ({"renew_deadline_s": 20}, "renew_deadline_s"),
    ({"retry_period_s": 12}, "retry_period_s"),
    ({"lease_duration_s": 2, "renew_deadline_s": 1.5, "retry_period_s": 1}, "lease_duration_s"),
    ({"lease_name": 7}, "lease_name"),
    ({"lease_name": ""}, "lease_name"),
    ({"state_name": ["x"]}, "state_name"),
    ({"api_port": 8081.5}, "api_port"),
    ({"max_out": 2.5}, "max_out"),
    ({"max_reads_per_s": True}, "max_reads_per_s"),
    ({"suspect_fraction": 3}, "suspect_fraction"),
    ({"suspect_min_nodes": 0.5}, "suspect_min_nodes"),
    ({"api_host": 0}, "api_host"),
    ({"poll_s": "fast"}, "poll_s"),
    ({"sdiag_s": 0.5}, "sdiag_s"),
    ({"sdiag_timeout_s": 0}, "sdiag_timeout_s"),
    ({"fleet_metrics": "yes"}, "fleet_metrics"),
    ({"job_blame": {"min_failures": 1}}, "min_failures"),
    ({"job_blame": {"infrastructure_exit_codes": [256]}}, "infrastructure_exit_codes"),
    ({"job_blame": {"exit_code_min_users": 0}}, "exit_code_min_users"),
    ({"job_blame": ["on"]}, "job_blame"),
    ({"change_poll": "yes"}, "change_poll"),
    ({"change_poll_s": 0}, "change_poll_s"),
    ({"revalidate": "yes"}, "revalidate"),
    ({"revalidate_timeout_s": 0}, "revalidate_timeout_s"),
    ({"revalidate_recheck_s": "soon"}, "revalidate_recheck_s"),
    ({"revalidate_checks": "dcgm-diag"}, "revalidate_checks"),
    (
        {"topology": {"slurmctld_copy": "/c", "min_reconfigure_interval_s": -1}},
        "min_reconfigure_interval_s",
    ),
]

AGENT_CASES: list[tuple[dict[str, object], str]] = [
    ({"health": {"mounts": "/home"}}, "mounts"),
    ({"health": {"disk_paths": "/"}}, "disk_paths"),
    ({"health": {"peers": [1, 2]}}, "peers"),
    ({"health": {"fast_period_s": 0}}, "fast_period_s"),
    ({"health": {"slow_period_s": -1}}, "slow_period_s"),
    ({"health": {"timeout_s": 0}}, "timeout_s"),
    ({"health": {"mount_timeout_s": "5"}}, "mount_timeout_s"),
    ({"health": {"expected_gpus": -1}}, "expected_gpus"),
    ({"health": {"ib_expected_ports": 1.5}}, "ib_expected_ports"),
    ({"health": {"slurmd_port": 70000}}, "slurmd_port"),
    ({"health": {"sysfs_root": 1}}, "sysfs_root"),
    ({"hysteresis": {"fail_n": 2.7}}, "fail_n"),
    ({"failure_grace_s": -5}, "failure_grace_s"),
    ({"resync_s": True}, "resync_s"),
]


def _run(
    tmp_path: Path, command: str, config: dict[str, object], env: dict[str, str]
) -> tuple[int, str]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLONKD_", "POD_", "NODE_")) and k != "KUBECONFIG"
    }
    proc = subprocess.run(
        [sys.executable, "-m", "slonkd.cli.main", command],
        env={**base, **env, "SLONKD_CONFIG": str(path), "KUBECONFIG": str(tmp_path / "none")},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return proc.returncode, proc.stderr


def _assert_refused(rc: int, stderr: str, key: str) -> None:
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr
    assert rc == 2, stderr
    assert len(lines) == 1, stderr
    assert key in lines[0], lines[0]


@pytest.mark.parametrize(("config", "key"), COORDINATOR_CASES)
def test_the_coordinator_refuses_a_bad_setting_at_load(
    tmp_path: Path, config: dict[str, object], key: str
) -> None:
    """``slonkd coordinator`` with a bad setting exits 2 with one line naming the key."""
    env = {"POD_NAMESPACE": "ns", "POD_NAME": "c-0"}
    _assert_refused(*_run(tmp_path, "coordinator", config, env), key)


@pytest.mark.parametrize(("config", "key"), AGENT_CASES)
def test_the_agent_refuses_a_bad_setting_at_load(
    tmp_path: Path, config: dict[str, object], key: str
) -> None:
    """``slonkd agent`` with a bad setting exits 2 with one line naming the key."""
    env = {"POD_NAME": "w-0", "POD_NAMESPACE": "ns", "NODE_NAME": "n1", "SLONKD_METRICS_PORT": "0"}
    _assert_refused(*_run(tmp_path, "agent", config, env), key)


def test_good_settings_still_load(tmp_path: Path) -> None:
    """The defaults and tight-but-sane test timings load (what the e2e tests configure)."""
    from slonkd.cli import agent, coordinator

    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "resync_s": 5,
                "poll_s": 0,
                "state_poll_s": 0.5,
                "debounce_s": 0,
                "max_batch_delay_s": 0.2,
                "lease_duration_s": 6,
                "renew_deadline_s": 4,
                "retry_period_s": 1,
                "api_port": 0,
                "fleet_metrics": False,
                "sdiag_s": 0,
            }
        )
    )
    s = coordinator.load_settings(
        {"POD_NAMESPACE": "ns", "POD_NAME": "c-0", "SLONKD_CONFIG": str(path)}
    )
    assert (s.lease_duration_s, s.poll_s) == (6, 0)
    assert (s.fleet_metrics, s.sdiag_s) == (False, 0)
    coordinator.load_settings({"POD_NAMESPACE": "ns", "POD_NAME": "c-0"})
    path.write_text(json.dumps({"health": {"mounts": ["/home"], "fast_period_s": 5}}))
    a = agent.load_settings(
        {"POD_NAME": "w-0", "POD_NAMESPACE": "ns", "NODE_NAME": "n1", "SLONKD_CONFIG": str(path)}
    )
    assert a.health is not None
    assert tuple(a.health.mounts) == ("/home",)


@pytest.mark.parametrize("uid", ["w-0", "0d7e1b2c-9f1a-4c3b-8e2d", "$(id)", "x" * 300])
def test_the_agent_refuses_a_pod_uid_that_is_no_kubernetes_uid(tmp_path: Path, uid: str) -> None:
    """``POD_UID`` (downward API ``metadata.uid``) binds the agent to its pod: a UUID or nothing."""
    env = {
        "POD_NAME": "w-0",
        "POD_NAMESPACE": "ns",
        "NODE_NAME": "n1",
        "POD_UID": uid,
        "SLONKD_METRICS_PORT": "0",
    }
    _assert_refused(*_run(tmp_path, "agent", {}, env), "POD_UID")


def test_the_agent_is_bound_to_its_pod_uid_only_when_given_one() -> None:
    """The chart gives ``POD_UID``; without it (a hand-run agent) any pod of the name is its own."""
    from slonkd.cli import agent

    env = {"POD_NAME": "w-0", "POD_NAMESPACE": "ns", "NODE_NAME": "n1"}
    uid = "0d7e1b2c-9f1a-4c3b-8e2d-5a6b7c8d9e0f"
    assert agent.load_settings({**env, "POD_UID": uid}).pod_uid == uid
    assert agent.load_settings(env).pod_uid == ""


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_the_agent_refuses_an_mqtt_port_out_of_range(tmp_path: Path, port: str) -> None:
    """``SLONKD_MQTT_PORT`` outside 1-65535 exits 2 naming it, not at the first connect."""
    env = {
        "POD_NAME": "w-0",
        "POD_NAMESPACE": "ns",
        "NODE_NAME": "n1",
        "SLONKD_METRICS_PORT": "0",
        "SLONKD_MQTT_HOST": "127.0.0.1",
        "SLONKD_MQTT_USER": "u",
        "SLONKD_MQTT_PASSWORD": "p",
        "SLONKD_MQTT_PORT": port,
    }
    _assert_refused(*_run(tmp_path, "agent", {}, env), "SLONKD_MQTT_PORT")


def test_the_coordinator_reads_its_trigger_settings(tmp_path: Path) -> None:
    """trigger_program from the file, slurmctld's broker client from the environment.

    The client's user and password go together; the password never shows in a repr.
    """
    from slonkd.cli import coordinator

    config = tmp_path / "c.json"
    config.write_text('{"trigger_program": "/opt/slonkd/bin/slonkd-nudge"}')
    env = {"POD_NAMESPACE": "ns", "POD_NAME": "c-0", "SLONKD_CONFIG": str(config)}
    plain = coordinator.load_settings(env)
    assert plain.trigger_program == "/opt/slonkd/bin/slonkd-nudge"
    assert plain.nudge_client is None
    s = coordinator.load_settings(
        {**env, "SLONKD_NUDGE_MQTT_USER": "slurmctld-nudge", "SLONKD_NUDGE_MQTT_PASSWORD": "pw1"}
    )
    assert s.nudge_client is not None
    assert (s.nudge_client.username, s.nudge_client.password) == ("slurmctld-nudge", "pw1")
    assert "pw1" not in repr(s)
    with pytest.raises(ValueError, match="go together"):
        coordinator.load_settings({**env, "SLONKD_NUDGE_MQTT_USER": "slurmctld-nudge"})
    assert coordinator.load_settings({"POD_NAMESPACE": "ns"}).trigger_program == ""


def test_the_coordinator_reads_its_change_poll_settings(tmp_path: Path) -> None:
    """change_poll (on by default, ``false`` turns it off) and change_poll_s: the config file."""
    from slonkd.cli import coordinator

    config = tmp_path / "c.json"
    config.write_text('{"change_poll": false, "change_poll_s": 0.5}')
    s = coordinator.load_settings(
        {"POD_NAMESPACE": "ns", "POD_NAME": "c-0", "SLONKD_CONFIG": str(config)}
    )
    assert (s.change_poll, s.change_poll_s) == (False, 0.5)
    assert coordinator.load_settings({"POD_NAMESPACE": "ns"}).change_poll is True


def test_the_slurm_backend_is_set_from_the_environment_and_refused_when_unknown() -> None:
    """``SLONKD_SLURM_BACKEND`` (an enum) and ``SLONKD_PYSLURM_PATH`` load for both roles."""
    from slonkd.adapters.slurm.choice import SlurmBackendName
    from slonkd.cli import agent, coordinator

    env = {"POD_NAME": "w-0", "POD_NAMESPACE": "ns", "NODE_NAME": "n1", "SLONKD_METRICS_PORT": "0"}
    chosen = {"SLONKD_SLURM_BACKEND": "pyslurm", "SLONKD_PYSLURM_PATH": "/opt/pyslurm"}
    a = agent.load_settings({**env, **chosen})
    assert (a.slurm_backend, a.pyslurm_path) == (SlurmBackendName.PYSLURM, "/opt/pyslurm")
    c = coordinator.load_settings({"POD_NAMESPACE": "ns", "SLONKD_SLURM_BACKEND": "auto"})
    assert c.slurm_backend is SlurmBackendName.AUTO
    assert agent.load_settings(env).slurm_backend is SlurmBackendName.SCONTROL
    with pytest.raises(ValueError, match="slurm_backend"):
        agent.load_settings({**env, "SLONKD_SLURM_BACKEND": "slurmrestd"})

"""The real-mode sandbox's pure parts: the ssh argv, env.sh's functions, the CLI's --real."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from slonkd_sandbox import command as cli
from slonkd_sandbox.sandbox.real import _write_env, host_leftovers, ssh_argv


def _state(tmp_path: Path) -> dict[str, Any]:
    return {
        "dir": str(tmp_path),
        "namespace": "chart-abc",
        "kubeconfig": str(tmp_path / "admin.kubeconfig"),
        "kubectl": "/opt/tools/kubectl",
        "controller": {"pod": "rel-slurmctld-0", "container": "slurmctld"},
        "login": {
            "pod": "rel-login-0",
            "user": "alice",
            "ssh_key": str(tmp_path / "id_ed25519"),
            "netns": "slonkd-abc123",
        },
        "node": {"netns": "slonkd-abc123"},
    }


def test_ssh_goes_through_the_nodes_namespace_as_the_user_with_the_key(tmp_path: Path) -> None:
    """ssh runs inside the node's netns (pod IPs live only there), key-only, as the user."""
    argv = ssh_argv(_state(tmp_path), "10.244.3.7")
    assert argv[:3] == ["nsenter", "--net=/run/netns/slonkd-abc123", "--"]
    assert argv[3] == "ssh"
    assert argv[argv.index("-i") + 1] == str(tmp_path / "id_ed25519")
    assert "BatchMode=yes" in argv
    assert argv[-1] == "alice@10.244.3.7"


def test_env_sh_defines_slurm_and_login_functions_a_shell_accepts(tmp_path: Path) -> None:
    """Sourcing env.sh sets KUBECONFIG and defines `slurm` (kubectl exec) and `login` (ssh)."""
    state = _state(tmp_path)
    _write_env(tmp_path, state)
    script = (
        f"source {tmp_path / 'env.sh'} && echo $KUBECONFIG && type slurm && type login"
        " && echo $POD_NAMESPACE"
    )
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert state["kubeconfig"] in out
    assert "exec rel-slurmctld-0 -c slurmctld --" in out
    assert '"alice@$ip"' in out
    assert "--net=/run/netns/slonkd-abc123" in out
    assert out.strip().endswith("chart-abc")


def test_nothing_is_left_of_a_sandbox_whose_namespace_and_files_are_gone(tmp_path: Path) -> None:
    """host_leftovers finds no netns, mount or process for a downed sandbox's state."""
    state = {**_state(tmp_path), "leftovers": []}
    assert host_leftovers(state) == []
    assert host_leftovers({**state, "leftovers": ["mount /x"]}) == ["mount /x"]


def test_up_and_run_take_real() -> None:
    """`sandbox up --real` and `sandbox run --real` parse; demo and down need no mode flag."""
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["sandbox", "up", "--real"]).real is True
    assert parser.parse_args(["sandbox", "run", "--real", "--workers", "3"]).real is True
    assert parser.parse_args(["sandbox", "up"]).real is False
    assert parser.parse_args(["sandbox", "demo"]).sandbox_command == "demo"


def test_the_command_running_down_is_not_a_leftover(tmp_path: Path) -> None:
    """`sudo slonkd sandbox down --dir DIR` names DIR: down's own ancestors never count."""
    state = {**_state(tmp_path), "leftovers": []}
    script = (
        "import json, sys; from slonkd_sandbox.sandbox.real import host_leftovers;"
        " print(json.dumps(host_leftovers(json.loads(sys.argv[1]))))"
    )
    # the parent shell's command line names the directory, as sudo's or time's would
    out = subprocess.run(
        ["bash", "-c", f'{sys.executable} -c "$0" "$1"; : {tmp_path}', script, json.dumps(state)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert json.loads(out) == []

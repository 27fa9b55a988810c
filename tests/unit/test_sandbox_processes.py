"""Counting the sandbox's processes: a fork that has not exec'd yet is not a second daemon."""

from __future__ import annotations

from slonkd_sandbox.sandbox.run import commands

COORD = "python3 -m slonkd.cli.main coordinator"


def test_a_fork_before_exec_is_left_out_and_real_processes_are_kept() -> None:
    """The coordinator's child between fork and exec shows the coordinator's own command line.

    The e2e test counted it as a second coordinator (seen once: ``assert 2 == 1``).
    """
    procs = [
        {"pid": 10, "ppid": 1, "cmd": COORD},
        {"pid": 11, "ppid": 10, "cmd": COORD},  # forked for scontrol, exec pending
        {"pid": 12, "ppid": 10, "cmd": "scontrol -o show node"},
        {"pid": 13, "ppid": 1, "cmd": "python3 -m slonkd.cli.main agent"},
        {"pid": 14, "ppid": 1, "cmd": "python3 -m slonkd.cli.main agent"},  # a second agent
    ]
    got = commands(procs)
    assert got.count(COORD) == 1
    assert got.count("python3 -m slonkd.cli.main agent") == 2
    assert "scontrol -o show node" in got

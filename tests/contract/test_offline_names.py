"""Contract: under ``offline_names.offline_prefix`` a name that does not resolve asks no DNS.

Each check runs in a network namespace of its own (loopback only, nothing can leave the
machine) whose ``/etc/resolv.conf`` names a nameserver on that loopback: a listener there
counts the queries a lookup sends. The control (this machine's ``hosts: files dns``) shows
the listener hears a query; under the prefix the same lookup hears none and fails at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.offline_names import files_only, offline_prefix

NAME = "slurmctld-0.slurmctld.nowhere.invalid"

LISTEN = """\
import socket, subprocess, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
s.settimeout(3)
lookup = subprocess.run(sys.argv[1:], capture_output=True, timeout=30)
heard = 0
try:
    while True:
        s.recvfrom(4096)
        heard += 1
        s.settimeout(0.3)
except TimeoutError:
    pass
print(f"rc={lookup.returncode} heard={heard}")
"""


def heard(tmp_path: Path, prefix: tuple[str, ...]) -> tuple[int, int]:
    """(the lookup's exit code, the DNS queries the loopback nameserver heard)."""
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    script = tmp_path / "listen.py"
    script.write_text(LISTEN)
    argv = [
        "unshare", "-m", "-n", "--propagation", "private", "sh", "-c",
        'ip link set lo up && mount --bind "$0" /etc/resolv.conf && exec "$@"',
        str(resolv), sys.executable, str(script), *prefix, "getent", "hosts", NAME,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    last = done.stdout.strip().splitlines()[-1]
    fields = dict(part.split("=") for part in last.split())
    return int(fields["rc"]), int(fields["heard"])


def test_files_only_replaces_or_adds_the_hosts_line() -> None:
    """Every other database stays as the machine has it."""
    assert (
        files_only("passwd: files\nhosts: files dns\n") == "passwd: files\nhosts:          files\n"
    )
    assert files_only("passwd: files\n") == "passwd: files\nhosts:          files\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="private mount and network namespaces need root")
def test_a_missing_name_under_the_prefix_sends_no_query(tmp_path: Path) -> None:
    """The control hears the query; the prefix's lookup hears none and says "not found" (2)."""
    control_rc, control_heard = heard(tmp_path, ())
    assert control_heard >= 1, "the listener heard nothing: this check could not fail"
    assert control_rc == 2
    rc, queries = heard(tmp_path, offline_prefix(tmp_path))
    assert (rc, queries) == (2, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="private mount namespaces need root")
def test_a_name_in_the_tests_hosts_file_resolves(tmp_path: Path) -> None:
    """A name the test's hosts file gives resolves under the prefix (the machine's does not)."""
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 {NAME}\n")
    prefix = offline_prefix(tmp_path, hosts)
    found = subprocess.run([*prefix, "getent", "hosts", NAME], capture_output=True, text=True,
                           timeout=30)  # fmt: skip
    assert found.returncode == 0, found
    assert "127.0.0.1" in found.stdout, found

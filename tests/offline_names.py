"""A resolver configuration of a test's own: names from a hosts file the test writes, no DNS.

Tests that make slurmctld's name fail to resolve (libslurm ends the process that asks, as it
does when slurmctld's pod restarts behind a headless Service) must not ask the machine's
nameserver, which is off this machine (issue 37 item 10). :func:`offline_prefix` is an argv
prefix: the command runs in a private mount namespace where ``/etc/nsswitch.conf`` says
``hosts: files`` and ``/etc/hosts`` is a file the test controls, so a name missing from it is
"not found" at once, with no query sent. Needs root (``unshare -m``). Neighbours:
``tests/contract/test_slurm_libslurm.py`` and ``tests/e2e/test_coordinator.py`` use it;
``tests/contract/test_offline_names.py`` shows no query leaves under it.
"""

from __future__ import annotations

import re
from pathlib import Path

NSSWITCH = Path("/etc/nsswitch.conf")
HOSTS = Path("/etc/hosts")

_BIND = 'mount --bind "$0" /etc/nsswitch.conf && mount --bind "$1" /etc/hosts && shift && exec "$@"'


def files_only(nsswitch: str) -> str:
    """``nsswitch`` with its ``hosts:`` line (added if missing) naming the files alone."""
    text, n = re.subn(r"(?m)^hosts:.*$", "hosts:          files", nsswitch)
    return text if n else text.rstrip("\n") + "\nhosts:          files\n"


def offline_prefix(tmp: Path, hosts: Path | None = None) -> tuple[str, ...]:
    """The argv prefix that runs a command with host names from ``hosts`` only.

    ``hosts`` defaults to a copy of this machine's ``/etc/hosts``. It is bound, not copied:
    rewrite it in place (same inode) and the command sees the change.
    """
    nss = tmp / "nsswitch-files-only.conf"
    nss.write_text(files_only(NSSWITCH.read_text() if NSSWITCH.exists() else ""))
    if hosts is None:
        hosts = tmp / "hosts-offline"
        hosts.write_text(HOSTS.read_text())
    return ("unshare", "-m", "--propagation", "private", "sh", "-c", _BIND, str(nss), str(hosts))

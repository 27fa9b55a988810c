"""Run one exec credential plugin with a deadline, and kill it when the deadline passes.

kubernetes_asyncio's ``ExecProvider`` starts the plugin itself and has no timeout; cancelling
it would leave a hung plugin running. So :mod:`slonkd.adapters.kube.exec_auth` has it start
this file (by path, with ``python -I -S``, about 40 ms more a run) in front of the plugin's
argv: ``DEADLINE_S -- ARGV``. stdin, stdout, stderr and the environment pass through
unchanged; the exit status is the plugin's, 124 when it ran out of time (as coreutils
``timeout``) and 127 when it cannot be started (as a shell). Standard library only: it must
start fast and import nothing of slonkd.
"""

from __future__ import annotations

import subprocess
import sys

TIMED_OUT = 124
CANNOT_RUN = 127


def main(argv: list[str]) -> int:
    """Run ``argv[2:]`` with a deadline of ``argv[0]`` seconds (``argv[1]`` is ``--``)."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: exec_deadline.py DEADLINE_S -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    deadline_s, command = float(argv[0]), argv[2:]
    try:
        # subprocess.run kills the plugin (SIGKILL) and reaps it when the deadline passes
        done = subprocess.run(command, timeout=deadline_s, check=False)  # noqa: S603 (the kubeconfig's argv, no shell)
    except subprocess.TimeoutExpired:
        print(f"{command[0]}: no answer in {deadline_s:g}s, killed", file=sys.stderr)
        return TIMED_OUT
    except OSError as exc:
        print(f"cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return CANNOT_RUN
    return done.returncode if done.returncode >= 0 else 128 - done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

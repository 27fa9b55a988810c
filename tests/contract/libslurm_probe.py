"""Asks libslurm "changed since T?" for the contract tests, in its own process.

libslurm reads ``SLURM_CONF`` once per process, so each cluster gets its own probe. Each
line on stdin is a time T; each answer on stdout is one JSON line: ``{"changed", "last_update"}``
or ``{"error": class name, "message"}``; ``{"loaded": path or null}`` comes first.
``SLONKD_SANDBOX_LIBSLURM_CHILD_PREFIX`` (a JSON list): what the library's child runs
under.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from slonkd.adapters.slurm import libslurm_child
from slonkd.core.errors import SlonkdError
from slonkd_sandbox.slurm.chroot import CHILD_PREFIX_ENV


async def main() -> None:
    """Answer one question per stdin line until stdin closes."""
    prefix = os.environ.get(CHILD_PREFIX_ENV)
    if prefix:
        libslurm_child.CHILD_PREFIX = tuple(json.loads(prefix))
    lib = libslurm_child.load()
    print(json.dumps({"loaded": lib.path if lib else None}), flush=True)
    for line in sys.stdin:
        if lib is None:
            break
        try:
            stamp = await lib.changed_since(int(line), timeout_s=20.0)
        except SlonkdError as exc:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        else:
            print(
                json.dumps({"changed": stamp.changed, "last_update": stamp.last_update}), flush=True
            )


if __name__ == "__main__":
    asyncio.run(main())

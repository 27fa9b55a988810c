"""``slonkd recheck NODE``: ask the leader to have NODE's agent run its health checks now.

The coordinator answers ``POST /v1/nodes/{node}/recheck`` only from loopback, so this is run
inside the coordinator's pod (``kubectl exec deploy/<coordinator> -- slonkd recheck w-0``) or
through ``kubectl port-forward``: Kubernetes RBAC decides who may (HTTPS is verified with
``SLONKD_COORDINATOR_CA`` and ``SLONKD_COORDINATOR_TLS_NAME``, see :mod:`slonkd.cli.api_client`).
The leader publishes a fenced ``recheck`` command on the agent's commands topic; the agent
runs every check and republishes its status. Prints the command (id, fencing token) as
JSON. Exit codes: 0 sent, 1 refused or unreachable, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any
from urllib.parse import quote

import aiohttp

from slonkd.cli.api_client import DEFAULT_URL, base_url, call


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``recheck``."""
    p = sub.add_parser("recheck", help="have NODE's agent run its health checks now")
    p.add_argument("node")
    p.add_argument("--url", help=f"the coordinator's API, from its pod (default {DEFAULT_URL})")


async def _post(url: str) -> tuple[int, Any]:
    return await call("POST", url)


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd recheck``."""
    base = base_url(args.url)
    url = f"{base}/v1/nodes/{quote(str(args.node), safe='')}/recheck"
    try:
        status, body = asyncio.run(_post(url))
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        print(f"slonkd recheck: cannot reach {base}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        error = body.get("error") if isinstance(body, dict) else body
        print(f"slonkd recheck: refused ({status}): {error}", file=sys.stderr)
        return 1
    print(json.dumps(body))
    return 0

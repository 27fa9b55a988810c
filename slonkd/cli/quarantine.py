"""``slonkd return KUBE_NODE``: a person checked a quarantined machine; lift slonkd's marks.

A machine slonkd took out for a failure keeps its cordon, taints and ``SlurmHealthy=False``
once its worker pod went elsewhere; ``slonkd status`` lists it under ``quarantined (waiting
for a person)``. After checking it, a person returns it with this command. It asks the
leader (``POST /v1/nodes/{kube_node}/return``, :mod:`slonkd.runtime.coordinating.returning`),
which answers only loopback clients, as ``slonkd recheck`` (:mod:`slonkd.cli.recheck`): run
it inside the coordinator's pod (``kubectl exec deploy/<coordinator> -- slonkd return
gpu-node-17 --by alice``) or through ``kubectl port-forward``, so Kubernetes RBAC decides
who may. The leader refuses, in one line, while a failure stands there (a failing check an
agent measured on that machine, or the SLURM node the marks are for still failing with its
pod on no other machine); otherwise it lifts exactly slonkd's own marks, never a foreign
cordon or taint, audits the return as ``returned by <who>`` and keeps the remediation
history marked returned. Exit codes: 0 returned, 1 refused or unreachable, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from typing import Any
from urllib.parse import quote

import aiohttp

from slonkd.cli.api_client import DEFAULT_URL, base_url, call


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``return``."""
    p = sub.add_parser(
        "return", help="lift slonkd's marks from a quarantined K8s node a person checked"
    )
    p.add_argument("node", help="the K8s node (as `slonkd status` lists it under quarantined)")
    p.add_argument("--by", default="", help="who checked it (default: the login name)")
    p.add_argument("--url", help=f"the coordinator's API, from its pod (default {DEFAULT_URL})")


async def _post(url: str, who: str) -> tuple[int, Any]:
    return await call("POST", url, json_body={"by": who})


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd return``."""
    base = base_url(args.url)
    url = f"{base}/v1/nodes/{quote(str(args.node), safe='')}/return"
    who = args.by or getpass.getuser()
    try:
        status, body = asyncio.run(_post(url, who))
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        print(f"slonkd return: cannot reach {base}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        error = body.get("error") or body.get("outcome") if isinstance(body, dict) else body
        one_line = json.dumps(str(error), ensure_ascii=True)[1:-1]
        print(f"slonkd return: refused ({status}): {one_line}", file=sys.stderr)
        return 1
    print(json.dumps(body, sort_keys=True, ensure_ascii=True))
    return 0

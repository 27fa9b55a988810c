"""``slonkd mode POOL MODE``: switch one pool to ``observe``, ``quarantine`` or ``full``.

The rules of the modes are :mod:`slonkd.core.modes`'. Like ``slonkd pause``
(:mod:`slonkd.cli.ops`), it writes the coordinator's state ConfigMap with the operator's own
Kubernetes credentials (RBAC decides who may), recording who and when; the leader sees the
change within ``state_poll_s``, audits it (action ``mode``) and acts on it at its next pass. A
pool switched to a mode that takes more (to ``full``) has its held-back actions admitted within
the disruption budget, never as a mass event. The pool must be one the leader knows (its
``slonkd status``, read as :mod:`slonkd.cli.api_client` does): a misspelt pool left in
``full`` while the operator thinks it observes would be worse than a refusal. Exit codes: 0
done, 1 the coordinator or the apiserver could not be reached or refused, 2 an unknown mode or
pool (one line naming it).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import sys
import time
from dataclasses import replace

import aiohttp

from slonkd.cli.api_client import DEFAULT_URL, base_url, call
from slonkd.cli.state_writes import state_written
from slonkd.core.coordinator_state import CoordinatorState, PoolMode
from slonkd.core.errors import SlonkdError
from slonkd.core.modes import Mode, check_pool, parse_mode

TIMEOUT_S = 10.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``slonkd mode``."""
    p = sub.add_parser("mode", help="switch a pool to observe, quarantine or full")
    p.add_argument("pool", help="the pool (its slonk.dev/pool label)")
    p.add_argument("mode", help="observe, quarantine or full")
    p.add_argument("--namespace", help="the coordinator's namespace (default $POD_NAMESPACE)")
    p.add_argument("--state", default="slonkd-state", help="state ConfigMap (%(default)s)")
    p.add_argument("--by", default="", help="who does it (default: the login name)")
    p.add_argument("--url", help=f"the coordinator's API (default {DEFAULT_URL})")


async def known_pools(url: str) -> set[str]:
    """The pools the leader knows: of its workers, and those given a mode."""
    code, body = await call("GET", f"{url}/v1/status", timeout_s=TIMEOUT_S)
    if code != 200 or not isinstance(body, dict):
        raise SlonkdError(f"the coordinator at {url} answered {code}: not the leader")
    pools = {str(p.get("pool", "")).split("/", 1)[0] for p in body.get("budget", [])}
    return pools | set(body.get("modes") or {})


async def _write(args: argparse.Namespace, pool: str, mode: Mode) -> CoordinatorState:
    from slonkd.adapters.kube.state import StateStore
    from slonkd.adapters.kube.transport import KubeTransport

    namespace = args.namespace or os.environ.get("POD_NAMESPACE", "")
    if not namespace:
        raise ValueError("no namespace: pass --namespace or set POD_NAMESPACE")
    who = args.by or getpass.getuser()
    kubeconfig = os.environ.get("KUBECONFIG")
    transport = (
        await KubeTransport.from_kubeconfig(kubeconfig)
        if kubeconfig
        else KubeTransport.in_cluster()
    )
    try:
        store = StateStore(transport, namespace, args.state)
        chosen = PoolMode(mode=mode.value, by=who, at=time.time())
        return await store.operator_update(
            lambda s: replace(s, pool_modes={**s.pool_modes, pool: chosen})
        )
    finally:
        await transport.close()


def main(args: argparse.Namespace) -> int:
    """``slonkd mode POOL MODE``."""
    try:
        mode = parse_mode(args.mode)
        pool = check_pool(args.pool)
    except ValueError as exc:
        print(f"slonkd mode: {exc}", file=sys.stderr)
        return 2
    url = base_url(args.url)
    try:
        pools = asyncio.run(known_pools(url))
    except (aiohttp.ClientError, TimeoutError, ValueError, SlonkdError) as exc:
        print(f"slonkd mode: cannot check pool {pool!r} at {url}: {exc}", file=sys.stderr)
        return 1
    if pool not in pools:
        print(
            f"slonkd mode: unknown pool {pool!r} (the leader knows {', '.join(sorted(pools))})",
            file=sys.stderr,
        )
        return 2
    state = state_written("mode", args.state, _write(args, pool, mode))
    if isinstance(state, int):
        return state
    print(f"slonkd mode: {pool} is {mode.value} ({json.dumps(state.as_json()['poolModes'])})")
    return 0

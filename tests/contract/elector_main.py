"""A leader-election candidate as its own process, for the contract tests that kill or stop it.

It campaigns for a Lease; while leading it checks its lease's validity every 100 ms and, when
valid, records a write in the fenced coordinator state (a fenced write ends the term, as in
the coordinator). Every step is printed to stdout as a
JSON line stamped with ``time.monotonic()`` (one clock for all processes of the machine), so
a test can tell what the candidate did before a SIGSTOP and after a SIGCONT.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import time
from dataclasses import replace
from typing import Any

import structlog

from slonkd.adapters.kube.lease import LeaderElector, LeaseSettings
from slonkd.adapters.kube.state import FencedError, StateStore
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.coordinator_state import Attempts, CoordinatorState


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout, flushed at once."""
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


async def main(args: argparse.Namespace) -> None:
    """Campaign until killed."""
    transport = await KubeTransport.from_kubeconfig(args.kubeconfig, timeout_s=2.0)
    settings = LeaseSettings(
        name=args.lease,
        namespace=args.namespace,
        identity=args.identity,
        lease_duration_s=args.duration,
        renew_deadline_s=args.renew,
        retry_period_s=args.retry,
        safety_margin_s=args.margin,
    )
    store = StateStore(transport, args.namespace, args.state)
    elector = LeaderElector(transport, settings, floor=store.last_token)  # as the coordinator

    def record(state: CoordinatorState, n: int) -> CoordinatorState:
        attempts = {**state.remediation, args.identity: Attempts(attempts=n)}
        return replace(state, remediation=attempts)

    async def work(token: int) -> None:
        emit("leading", token=token)
        seq = 0
        try:
            while True:
                valid = elector.is_valid()
                emit("check", valid=valid, token=token)
                if valid:
                    sent = time.monotonic()
                    try:
                        await store.update(token, functools.partial(record, n=seq))
                        emit("wrote", seq=seq, sent=sent, token=token)
                    except FencedError as exc:
                        emit("fenced", error=str(exc))
                        raise  # as the coordinator: the elector ends the term
                seq += 1
                await asyncio.sleep(0.1)
        finally:
            emit("stopped", token=token)

    emit("started")
    await elector.run(work)


if __name__ == "__main__":
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--lease", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--renew", type=float, default=2.0)
    parser.add_argument("--retry", type=float, default=0.5)
    parser.add_argument("--margin", type=float, default=0.5)
    asyncio.run(main(parser.parse_args()))

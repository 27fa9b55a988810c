"""``slonkd secrets ensure``: make each Secret of a spec once; keep every one that exists.

The chart runs it in its pre-install/pre-upgrade (Argo CD PreSync) Job, under a ServiceAccount
that may only create Secrets and get (and patch) the ones it names, so that no generated
value is ever in a rendered manifest: ``helm template`` renders the same bytes every time.
``--spec`` (or ``--spec-file``) is the JSON of :mod:`slonkd.core.secret_spec`; the namespace
is ``--namespace``, else ``$POD_NAMESPACE``; credentials are ``$KUBECONFIG``, else the pod's
ServiceAccount. Every API call has a timeout (``--timeout``), and so has the whole run.

One line per Secret on stdout says what was done (created, kept); values are never printed.
Exit codes: 0 every Secret is there, 1 the apiserver failed or refused, or a kept Secret
lacks a key the spec names, 2 bad arguments or spec (one line on stderr).

Neighbours: :mod:`slonkd.adapters.kube.secrets` (create-when-absent),
:mod:`slonkd.core.secret_spec` (the spec), :mod:`slonkd.cli.main` (dispatch).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from slonkd.cli.refusal import EXIT_BAD_SETTINGS
from slonkd.core.errors import SlonkdError
from slonkd.core.secret_spec import SecretSpec, parse_spec

TIMEOUT_S = 10.0
"""Each API call's limit; the whole run gets three calls' worth per Secret, and one more."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``secrets ensure``."""
    secrets = sub.add_parser("secrets", help="Secrets made once (the chart's pre-install Job)")
    actions = secrets.add_subparsers(dest="secrets_command", metavar="ACTION", required=True)
    ensure = actions.add_parser(
        "ensure", help="create each Secret of the spec that is absent; never replace one"
    )
    ensure.add_argument("--namespace", help="where (default $POD_NAMESPACE)")
    given = ensure.add_mutually_exclusive_group(required=True)
    given.add_argument("--spec", help='JSON: {"secrets": [{"name", "labels", "data" or "tls"}]}')
    given.add_argument("--spec-file", type=Path, help="a file holding that JSON")
    ensure.add_argument(
        "--timeout", type=float, default=TIMEOUT_S, help="seconds per API call (%(default)s)"
    )


def _inputs(args: argparse.Namespace) -> tuple[str, tuple[SecretSpec, ...]]:
    """The namespace and the parsed spec; a ValueError names what is wrong."""
    namespace = args.namespace or os.environ.get("POD_NAMESPACE", "")
    if not namespace:
        raise ValueError("no namespace: pass --namespace or set POD_NAMESPACE")
    if not 0 < args.timeout <= 300:
        raise ValueError(f"--timeout {args.timeout}: give 0 to 300 seconds")
    if args.spec_file is not None:
        try:
            text = args.spec_file.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read {args.spec_file}: {exc.strerror}") from None
    else:
        text = args.spec
    return namespace, parse_spec(text)


async def _ensure(namespace: str, specs: tuple[SecretSpec, ...], timeout_s: float) -> int:
    from slonkd.adapters.kube.secrets import ensure_secret
    from slonkd.adapters.kube.transport import KubeTransport

    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        transport = await KubeTransport.from_kubeconfig(kubeconfig, timeout_s=timeout_s)
    else:
        transport = KubeTransport.in_cluster(timeout_s=timeout_s)
    code = 0
    async with transport:
        for spec in specs:
            done = await ensure_secret(transport, namespace, spec)
            keys = ", ".join(k.key for k in spec.keys)
            print(f"secret {namespace}/{done.name}: {done.outcome} (keys {keys})", flush=True)
            if done.missing:
                print(
                    f"slonkd secrets ensure: {namespace}/{done.name} exists without key(s) "
                    f"{', '.join(done.missing)}: the pods need them; fix or delete it",
                    file=sys.stderr,
                )
                code = 1
    return code


async def _within(limit_s: float, run: Coroutine[Any, Any, int]) -> int:
    """``run``, cancelled past ``limit_s`` (TimeoutError): ``asyncio.timeout``, not wait_for."""
    async with asyncio.timeout(limit_s):
        return await run


def main(args: argparse.Namespace) -> int:
    """``slonkd secrets ensure``."""
    try:
        namespace, specs = _inputs(args)
    except ValueError as exc:
        print(f"slonkd secrets ensure: {exc}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    limit = args.timeout * (3 * len(specs) + 1)  # get, create or patch, a get after a 409
    try:
        return asyncio.run(_within(limit, _ensure(namespace, specs, args.timeout)))
    except TimeoutError:
        print(f"slonkd secrets ensure: not done within {limit:.0f} s", file=sys.stderr)
    except SlonkdError as exc:
        print(f"slonkd secrets ensure: {str(exc)[:300]}", file=sys.stderr)
    return 1

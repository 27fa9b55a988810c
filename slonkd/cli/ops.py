"""Operator commands: ``slonkd status``, ``explain``, ``pause``, ``unpause``, ``budget``, ``state``.

``status`` and ``explain`` read the leader's HTTP API (``--url``, else
``SLONKD_COORDINATOR_URL``, else http://127.0.0.1:8081; HTTPS is verified with
``SLONKD_COORDINATOR_CA`` and ``SLONKD_COORDINATOR_TLS_NAME``, see
:mod:`slonkd.cli.api_client`). ``pause``, ``unpause``, ``budget reset`` and ``state reset``
write the coordinator's state ConfigMap with the operator's own Kubernetes credentials
(``KUBECONFIG`` or in-cluster), so RBAC decides who may; the leader sees the change at its
next pass. Exit codes: 0 done, 1 the coordinator or the apiserver could not be reached or
refused, 2 bad arguments.

A state ConfigMap that does not parse (hand-edited, corrupted) stops the coordinator's
automated actions and refuses ``pause``/``unpause``/``budget reset``;
``slonkd state reset --yes-discard-state`` replaces it with the initial state (closed breaker,
not paused, no remediation history; the last leader's fencing token is kept) and prints the
discarded data, so an operator can restore what they need from it.
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
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp

from slonkd.cli.api_client import DEFAULT_URL, base_url, call
from slonkd.cli.state_writes import state_written
from slonkd.core.coordinator_state import CoordinatorState

TIMEOUT_S = 10.0
COLUMNS = (
    "node",
    "slurm_state",
    "kube_state",
    "hold",
    "owner",
    "reason",
    "causes",
    "since",
    "drift",
)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the operator commands."""
    status = sub.add_parser("status", help="per node: SLURM and K8s state, owner, causes, drift")
    status.add_argument("-o", "--output", choices=("table", "json"), default="table")
    status.add_argument("--url", help=f"the coordinator's API (default {DEFAULT_URL})")
    explain = sub.add_parser("explain", help="what the coordinator saw of NODE and decided")
    explain.add_argument("node")
    explain.add_argument("--url", help=f"the coordinator's API (default {DEFAULT_URL})")
    for name, text in (
        ("pause", "stop every automated action of the coordinator (cluster-wide)"),
        ("unpause", "let the coordinator act again"),
    ):
        p = sub.add_parser(name, help=text)
        _state_args(p)
        if name == "pause":
            p.add_argument("--reason", default="", help="why (shown in slonkd status)")
    budget = sub.add_parser("budget", help="the disruption budget's breaker")
    budget_sub = budget.add_subparsers(dest="budget_command", metavar="ACTION", required=True)
    reset = budget_sub.add_parser("reset", help="close the breaker (a human decision)")
    _state_args(reset)
    state = sub.add_parser("state", help="the coordinator's state ConfigMap")
    state_sub = state.add_subparsers(dest="state_command", metavar="ACTION", required=True)
    discard = state_sub.add_parser(
        "reset", help="replace a broken state by the initial one (prints what it discards)"
    )
    _state_args(discard)
    discard.add_argument(
        "--yes-discard-state",
        action="store_true",
        help="confirm: breaker, pause and remediation history are lost",
    )


def _state_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--namespace", help="the coordinator's namespace (default $POD_NAMESPACE)")
    p.add_argument("--state", default="slonkd-state", help="state ConfigMap (%(default)s)")
    p.add_argument("--by", default="", help="who does it (default: the login name)")


def _url(args: argparse.Namespace) -> str:
    return base_url(args.url)


async def _get(url: str) -> tuple[int, Any]:
    return await call("GET", url, timeout_s=TIMEOUT_S)


SHOWN = 10
"""At most this many entries (nodes, blocks) on one line of a status section."""


def escape(value: object) -> str:
    r"""``value`` as text the way ``explain`` prints it: JSON's string escapes, ASCII only.

    Control characters (``\u001b``, ``\n``), bidirectional overrides (``\u202e``) and
    every other non-ASCII character are written as escapes, so text from a reason, a pause
    or a node label cannot reorder, recolour or split the lines the operator reads.
    """
    return json.dumps(str(value), ensure_ascii=True)[1:-1]


def _modes_line(body: dict[str, Any]) -> str | None:
    """``slonkd status``'s line of each pool's mode (None: the leader shows none)."""
    modes = body.get("modes")
    if not isinstance(modes, dict) or not modes:
        return None
    return "modes: " + "; ".join(
        f"{escape(pool)} {escape(m.get('mode'))} ({escape(m.get('source'))}"
        + (f", {escape(m.get('would'))} held back" if m.get("would") else "")
        + ")"
        for pool, m in sorted(modes.items())
        if isinstance(m, dict)
    )


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "-"
    if isinstance(value, list):
        return ",".join(escape(v) for v in value)[:60] or "-"
    return "-" if value in (None, "") else escape(value)[:60]


def _pairs(items: Any, sep: str = " ") -> str:
    """``k v, k v, ...`` of a mapping, escaped, at most :data:`SHOWN` of them."""
    pairs = list(items.items()) if isinstance(items, dict) else []
    text = ", ".join(f"{escape(k)}{sep}{escape(v)}" for k, v in pairs[:SHOWN])
    return text + (f", and {len(pairs) - SHOWN} more" if len(pairs) > SHOWN else "")


def _short(sha: Any) -> str:
    return escape(sha)[:12] if sha else "none"


def _when(epoch: Any) -> str:
    if not isinstance(epoch, int | float) or isinstance(epoch, bool):
        return "?"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rollout_lines(r: dict[str, Any]) -> list[str]:
    """The rollout section: a summary line, then what moves, waits or is blocked."""
    if "updated" not in r:
        return ["rollout: no pass yet"]
    moving = r.get("in_progress") or {}
    head = f"rollout: {escape(r.get('updated'))} updated"
    if r.get("complete"):
        head += ", complete"
    else:
        head += (
            f", {escape(r.get('outdated'))} outdated, {len(moving)} in progress"
            f" (max parallel {escape(r.get('max_parallel', '?'))})"
        )
    if r.get("leading") is False:
        head += ", NOT LEADING"
    lines = [head]
    if r.get("paused"):  # nothing of the rollout is written meanwhile
        lines.append(f"  paused: {escape(r['paused'])}")
    for key, label, sep in (
        ("in_progress", "in progress", " "),
        ("waiting", "waiting", ": "),
        ("blocked", "blocked", ": "),
    ):
        if r.get(key):
            lines.append(f"  {label}: {_pairs(r[key], sep)}")
    for name, sts in (r.get("statefulsets") or {}).items():
        if not isinstance(sts, dict):
            continue
        lines.append(
            f"  statefulset {escape(name)}: revision {escape(sts.get('update_revision'))},"
            f" {escape(sts.get('updated'))}/{escape(sts.get('replicas'))} updated,"
            f" {escape(sts.get('outdated'))} outdated,"
            + (" OnDelete" if sts.get("on_delete") else " not OnDelete (left alone)")
        )
    return lines


def _topology_lines(t: dict[str, Any]) -> list[str]:
    """The topology section: what is applied, slurmctld's copy, drift and refusals."""
    lines = [
        f"topology: {escape(t.get('plugin'))}, applied {_short(t.get('applied_sha256'))},"
        f" {escape(t.get('reconfigures', 0))} reconfigures",
        f"  slurmctld's copy: {_short(t.get('slurmctld_copy_sha256'))}"
        f" (desired {_short(t.get('desired_sha256'))})",
    ]
    if t.get("waiting_for_copy_since"):
        lines.append(f"  waiting for slurmctld's copy since {_when(t['waiting_for_copy_since'])}")
    if t.get("reconfigure_deferred_until"):  # min_reconfigure_interval_s not over yet
        lines.append(f"  next reconfigure not before {_when(t['reconfigure_deferred_until'])}")
    last = t.get("last_reconfigure")
    if isinstance(last, dict):
        took = last.get("took_s")
        lines.append(
            f"  last reconfigure: {_when(last.get('at'))}, {_short(last.get('sha256'))}"
            + (f", took {took:.1f} s" if isinstance(took, int | float) else "")
        )
    drift = t.get("drift") or {}
    if t.get("drift_count") or drift:
        shown = {
            n: f"labels {escape(d.get('labels'))}, slurmctld {escape(d.get('slurmctld'))}"
            for n, d in drift.items()
            if isinstance(d, dict)
        }
        listed = "; ".join(f"{escape(n)}: {text}" for n, text in list(shown.items())[:SHOWN])
        lines.append(f"  drift: {escape(t.get('drift_count', len(drift)))} node(s): {listed}")
    for key in ("error", "refused"):
        if t.get(key):
            lines.append(f"  {key}: {escape(t[key])}")
    left_out = t.get("left_out_blocks") or {}
    if left_out:
        lines.append(
            f"  left out blocks: {_pairs({k: f'({v} nodes)' for k, v in left_out.items()})}"
        )
    return lines


def _quarantine_lines(q: Any) -> list[str]:
    """Machines slonkd took out that no worker pod runs on: each waits for a person."""
    nodes = q.get("nodes") if isinstance(q, dict) else None
    if not nodes:
        return []
    lines = [
        f"quarantined (waiting for a person): {len(nodes)}, `slonkd return NODE` after a check"
    ]
    for n in nodes[:SHOWN] if isinstance(nodes, list) else []:
        hours = n.get("for_s") / 3600 if isinstance(n.get("for_s"), int | float) else None
        lines.append(
            f"  {escape(n.get('kube_node'))}: {escape(n.get('rung'))}"
            f" (attempt {escape(n.get('attempts'))}) since {escape(n.get('since') or '?')}"
            + (f" ({hours:.1f} h)" if hours is not None else "")
            + f": {escape(n.get('why') or '?')}"
            + (f", for {escape(n['slurm_node'])}" if n.get("slurm_node") else "")
            + (", on hold" if n.get("hold") else "")
        )
    if len(nodes) > SHOWN:
        lines.append(f"  and {len(nodes) - SHOWN} more (slonkd status -o json)")
    return lines


def render_table(body: dict[str, Any]) -> str:
    """The status as a table for people; all text from outside goes through :func:`escape`."""
    state = body.get("state", {})
    lines = [
        f"leader {escape(body.get('identity'))} (fencing token {escape(body.get('fencing_token'))})"
        + ("  DRY RUN" if body.get("dry_run") else ""),
        "paused: "
        + (
            f"yes, by {escape(state.get('pausedBy') or '?')}:"
            f" {escape(state.get('pausedReason') or '-')}"
            if state.get("paused")
            else "no"
        ),
        "breaker: "
        + (f"OPEN: {escape(state.get('breakerReason'))}" if state.get("breakerOpen") else "closed"),
        "budget: "
        + "; ".join(
            f"{escape(p['pool'])} {escape(p['out'])}/{escape(p['size'])} out"
            f" (limit {escape(p['limit'])})"
            for p in body.get("budget", [])
        ),
    ]
    if (modes := _modes_line(body)) is not None:
        lines.append(modes)
    passes = body.get("passes")
    if isinstance(passes, dict) and passes.get("slurm_backend"):
        lines.append(
            f"slurm: {escape(passes['slurm_backend'])} ({escape(passes.get('slurm_backend_why'))});"
            f" poll: {escape(passes.get('slurm_poll_backend'))}"
        )
    if isinstance(body.get("topology"), dict) and body["topology"]:
        lines.extend(_topology_lines(body["topology"]))
    if isinstance(body.get("rollout"), dict) and body["rollout"]:
        lines.extend(_rollout_lines(body["rollout"]))
    for node in body.get("nodes", []):
        r = node.get("revalidation")
        if isinstance(r, dict):  # proof of health before return: what it waits for
            lines.append(
                f"revalidating {escape(node.get('node'))} since {escape(r.get('since'))}:"
                f" {escape(r.get('step'))},"
                f" pending {escape(','.join(r.get('pending_checks') or []))}"
                f" ({escape(r.get('why'))})"
            )
    lines.extend(_quarantine_lines(body.get("quarantined")))
    rows = [[_cell(n.get(c)) for c in COLUMNS] for n in body.get("nodes", [])]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(COLUMNS)]
    lines.append("  ".join(c.upper().ljust(w) for c, w in zip(COLUMNS, widths, strict=True)))
    lines.extend("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(lines)


def status(args: argparse.Namespace) -> int:
    """``slonkd status``."""
    try:
        code, body = asyncio.run(_get(f"{_url(args)}/v1/status"))
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        print(
            f"slonkd status: cannot reach the coordinator at {_url(args)}: {exc}", file=sys.stderr
        )
        return 1
    if code != 200:
        holder = body.get("holder", "") if isinstance(body, dict) else ""
        print(
            f"slonkd status: {code}: not the leader; the leader is {holder or '?'}", file=sys.stderr
        )
        return 1
    print(
        json.dumps(body, indent=2, sort_keys=True) if args.output == "json" else render_table(body)
    )
    return 0


def explain_node(args: argparse.Namespace) -> int:
    """``slonkd explain NODE``."""
    url = f"{_url(args)}/v1/explain/{quote(args.node, safe='')}"
    try:
        code, body = asyncio.run(_get(url))
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        print(f"slonkd explain: cannot reach the coordinator: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2, sort_keys=True, ensure_ascii=True))  # as escape() does
    return 0 if code == 200 else 1


async def _operator_update(args: argparse.Namespace, what: str) -> CoordinatorState:
    from slonkd.adapters.kube.state import StateStore
    from slonkd.adapters.kube.transport import KubeTransport

    namespace = args.namespace or os.environ.get("POD_NAMESPACE", "")
    if not namespace:
        raise ValueError("no namespace: pass --namespace or set POD_NAMESPACE")
    who = args.by or getpass.getuser()
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        transport = await KubeTransport.from_kubeconfig(kubeconfig)
    else:
        transport = KubeTransport.in_cluster()
    try:
        store = StateStore(transport, namespace, args.state)
        if what == "state reset":
            old, new = await store.discard(who)
            print(json.dumps({"discarded": old}, sort_keys=True))
            return new
        if what == "pause":
            return await store.operator_update(
                lambda s: replace(
                    s, paused=True, paused_by=who, paused_reason=args.reason, paused_at=time.time()
                )
            )
        if what == "unpause":
            return await store.operator_update(
                lambda s: replace(s, paused=False, paused_by=who, paused_reason="", paused_at=0.0)
            )
        return await store.operator_update(
            lambda s: replace(s, breaker_open=False, breaker_reason=f"reset by {who}")
        )
    finally:
        await transport.close()


def operator(args: argparse.Namespace, what: str) -> int:
    """``slonkd pause`` / ``unpause`` / ``budget reset`` / ``state reset``."""
    if what == "state reset" and not args.yes_discard_state:
        print(
            "slonkd state reset: this discards the breaker, the pause and the remediation "
            "history; confirm with --yes-discard-state",
            file=sys.stderr,
        )
        return 2
    state = state_written(what, args.state, _operator_update(args, what))
    if isinstance(state, int):
        return state
    print(f"slonkd {what}: done ({json.dumps(state.as_json(), sort_keys=True)})")
    return 0

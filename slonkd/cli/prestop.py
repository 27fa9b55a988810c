"""``slonkd prestop``: the slurmd container's preStop hook (drain, wait, requeue, down).

Identity and timing come from flags or the environment the chart sets: the SLURM node name
(``--node``, ``SLONKD_SLURM_NODE`` as for the agent, else the pod name from ``POD_NAME``;
``SLONKD_NODE``, its old name, still counts), the pod's grace period
(``--grace``, ``SLONKD_GRACE_S``) and the margin kept for the requeue and the DOWN; the
checkpoint signal (``--checkpoint-signal B:USR1``, ``SLONKD_CHECKPOINT_SIGNAL``; off by
default) and its window (``--checkpoint-window``, ``SLONKD_CHECKPOINT_WINDOW_S``); where to
report the time from that signal to the requeue (``--report-url``,
``SLONKD_PRESTOP_REPORT_URL``: the pod's agent on loopback; unset, it is only logged). It exits
0 whatever SLURM says (the pod is going anyway; what could not be done is logged), and 2
with a one-line reason on bad settings.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from slonkd.cli.refusal import EXIT_BAD_SETTINGS, settings_or_refusal
from slonkd.core.checkpoint import SignalSpec
from slonkd.runtime.prestop import PrestopSettings, run_prestop


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``prestop`` and its options."""
    p = sub.add_parser(
        "prestop", help="preStop hook: drain, wait for jobs, requeue, down", description=__doc__
    )
    p.add_argument(
        "--node", default=None, help="SLURM node name (default: $SLONKD_SLURM_NODE or $POD_NAME)"
    )
    p.add_argument(
        "--grace",
        "--grace-seconds",
        dest="grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the pod's termination grace period (default: $SLONKD_GRACE_S or 30)",
    )
    p.add_argument(
        "--margin",
        "--margin-seconds",
        dest="margin",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="time kept for requeue and DOWN at the end of the grace (default: 5)",
    )
    p.add_argument("--poll", type=float, default=1.0, metavar="SECONDS")
    p.add_argument(
        "--checkpoint-signal",
        default=None,
        metavar="B:SIG",
        help="signal for each requeueable job's batch shell that handles it, before the requeue "
        "(default: $SLONKD_CHECKPOINT_SIGNAL, else none)",
    )
    p.add_argument(
        "--checkpoint-window",
        default=None,
        metavar="SECONDS",
        help="seconds from that signal to the requeue (default: $SLONKD_CHECKPOINT_WINDOW_S or 0)",
    )
    p.add_argument(
        "--report-url",
        default=None,
        metavar="URL",
        help="the pod's agent's loopback route for the signal-to-requeue time "
        "(default: $SLONKD_PRESTOP_REPORT_URL, else only logged)",
    )


def settings_from(args: argparse.Namespace) -> PrestopSettings:
    """Validated settings, or ValueError with a one-line reason."""
    env = os.environ
    node = (
        args.node
        or env.get("SLONKD_SLURM_NODE")
        or env.get("SLONKD_NODE")  # the old name, before the agent's was used for both
        or env.get("POD_NAME")
        or ""
    )
    if not node:
        raise ValueError("no SLURM node name: pass --node or set SLONKD_SLURM_NODE or POD_NAME")
    raw_grace = args.grace if args.grace is not None else os.environ.get("SLONKD_GRACE_S", "30")
    try:
        grace = float(raw_grace)
    except ValueError:
        raise ValueError(f"grace period {raw_grace!r} is not a number of seconds") from None
    if grace <= 0 or args.margin < 0 or args.poll <= 0:
        raise ValueError("grace and poll must be positive and the margin not negative")
    if args.margin >= grace:
        raise ValueError(f"margin {args.margin} s leaves nothing of the {grace} s grace period")
    raw_signal = args.checkpoint_signal or os.environ.get("SLONKD_CHECKPOINT_SIGNAL", "")
    spec = SignalSpec.parse(raw_signal) if raw_signal.strip() else None
    raw_window = args.checkpoint_window or os.environ.get("SLONKD_CHECKPOINT_WINDOW_S", "0")
    try:
        window = float(raw_window)
    except ValueError:
        raise ValueError(f"checkpoint window {raw_window!r} is not a number of seconds") from None
    if window < 0 or (spec is not None and window + args.margin >= grace):
        raise ValueError(
            f"checkpoint window {window} s plus margin {args.margin} s must fit in the "
            f"{grace} s grace period"
        )
    report_url = args.report_url or os.environ.get("SLONKD_PRESTOP_REPORT_URL", "") or None
    if report_url is not None and not report_url.startswith(("http://127.0.0.1:", "http://[::1]:")):
        raise ValueError(f"report URL {report_url[:80]!r}: only the pod's loopback http is used")
    return PrestopSettings(
        node=node,
        report_url=report_url,
        grace_s=grace,
        margin_s=args.margin,
        poll_s=args.poll,
        checkpoint_signal=spec,
        checkpoint_window_s=window if spec is not None else 0.0,
    )


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd prestop``."""
    settings = settings_or_refusal("prestop", lambda: settings_from(args))
    if settings is None:
        return EXIT_BAD_SETTINGS
    asyncio.run(run_prestop(settings))
    return 0

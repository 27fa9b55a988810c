"""``slonkd prestop``: the slurmd container's preStop hook (drain, wait, requeue, down).

Its settings are flags, over the ``prestop`` section of the configuration tree (the JSON
file in ``SLONKD_CONFIG``, :mod:`slonkd.cli.config`; the fields of
:class:`~slonkd.runtime.prestop.PrestopSettings`): the SLURM node name (``--node``,
``node``, else the pod name from ``POD_NAME``), the pod's grace period (``--grace``,
``grace_s``) and the margin kept for the requeue and the DOWN (``--margin``, ``margin_s``);
the checkpoint signal (``--checkpoint-signal B:USR1``, ``checkpoint_signal``; off by
default) and its window (``--checkpoint-window``, ``checkpoint_window_s``); where to report
the time from that signal to the requeue (``--report-url``, ``report_url``: the pod's agent
on loopback; unset, it is only logged). The old variables (``SLONKD_SLURM_NODE``,
``SLONKD_NODE``, ``SLONKD_GRACE_S``, ``SLONKD_CHECKPOINT_SIGNAL``,
``SLONKD_CHECKPOINT_WINDOW_S``, ``SLONKD_PRESTOP_REPORT_URL``) still count, each with one
deprecation line. It exits 0 whatever SLURM says (the pod is going anyway; what could not be
done is logged), and 2 with a one-line reason on bad settings.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
from collections.abc import Mapping

from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.cli.config import loaded, role_section
from slonkd.cli.refusal import EXIT_BAD_SETTINGS
from slonkd.core.config_tree import build
from slonkd.runtime.prestop import PrestopSettings, run_prestop


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``prestop`` and its options."""
    p = sub.add_parser(
        "prestop", help="preStop hook: drain, wait for jobs, requeue, down", description=__doc__
    )
    p.add_argument(
        "--node", default=None, help="SLURM node name (default: prestop.node, else $POD_NAME)"
    )
    p.add_argument(
        "--grace",
        "--grace-seconds",
        dest="grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the pod's termination grace period (default: prestop.grace_s or 30)",
    )
    p.add_argument(
        "--margin",
        "--margin-seconds",
        dest="margin",
        type=float,
        default=None,
        metavar="SECONDS",
        help="time kept for requeue and DOWN at the end of the grace (default: 5)",
    )
    p.add_argument("--poll", type=float, default=None, metavar="SECONDS")
    p.add_argument(
        "--checkpoint-signal",
        default=None,
        metavar="B:SIG",
        help="signal for each requeueable job's batch shell that handles it, before the requeue "
        "(default: prestop.checkpoint_signal, else none)",
    )
    p.add_argument(
        "--checkpoint-window",
        default=None,
        metavar="SECONDS",
        help="seconds from that signal to the requeue (default: prestop.checkpoint_window_s or 0)",
    )
    p.add_argument(
        "--report-url",
        default=None,
        metavar="URL",
        help="the pod's agent's loopback route for the signal-to-requeue time "
        "(default: prestop.report_url, else only logged)",
    )


def flags_unset() -> argparse.Namespace:
    """The flags of a ``slonkd prestop`` given none (the file and the environment decide)."""
    return argparse.Namespace(
        node=None, grace=None, margin=None, poll=None, checkpoint_signal=None,
        checkpoint_window=None, report_url=None,
    )  # fmt: skip


def settings_from(
    args: argparse.Namespace,
    env: Mapping[str, str] | None = None,
    notes: list[str] | None = None,
) -> PrestopSettings:
    """Validated settings (flags over the file's ``prestop`` section over the environment).

    ValueError with a one-line reason; deprecated variables read add their line to ``notes``.
    """
    env = os.environ if env is None else env
    raw = role_section(
        env, "prestop", PrestopSettings, [] if notes is None else notes, had_flat_file=False
    )
    flags = {
        "node": args.node, "grace_s": args.grace, "margin_s": args.margin,
        "poll_s": args.poll, "checkpoint_signal": args.checkpoint_signal,
        "checkpoint_window_s": args.checkpoint_window, "report_url": args.report_url,
    }  # fmt: skip
    raw.update({key: value for key, value in flags.items() if value not in (None, "")})
    if isinstance(raw.get("checkpoint_window_s"), str):  # the flag's text
        try:
            raw["checkpoint_window_s"] = float(raw["checkpoint_window_s"])
        except ValueError:
            text = raw["checkpoint_window_s"]
            raise ValueError(f"checkpoint window {text!r} is not a number of seconds") from None
    if not raw.get("node"):
        raise ValueError("no SLURM node name: pass --node or set prestop.node or POD_NAME")
    if isinstance(raw.get("checkpoint_signal"), str) and not raw["checkpoint_signal"].strip():
        raw["checkpoint_signal"] = None
    s = build(PrestopSettings, raw, given={"slurm": SlurmSettings()})
    if s.grace_s <= 0 or s.margin_s < 0 or s.poll_s <= 0:
        raise ValueError("grace and poll must be positive and the margin not negative")
    if s.margin_s >= s.grace_s:
        raise ValueError(f"margin {s.margin_s} s leaves nothing of the {s.grace_s} s grace period")
    window = s.checkpoint_window_s
    if window < 0 or (s.checkpoint_signal is not None and window + s.margin_s >= s.grace_s):
        raise ValueError(
            f"checkpoint window {window} s plus margin {s.margin_s} s must fit in the "
            f"{s.grace_s} s grace period"
        )
    url = s.report_url or None
    if url is not None and not url.startswith(("http://127.0.0.1:", "http://[::1]:")):
        raise ValueError(f"report URL {url[:80]!r}: only the pod's loopback http is used")
    return dataclasses.replace(
        s, report_url=url, checkpoint_window_s=window if s.checkpoint_signal is not None else 0.0
    )


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd prestop``."""
    settings = loaded("prestop", lambda notes: settings_from(args, notes=notes))
    if settings is None:
        return EXIT_BAD_SETTINGS
    asyncio.run(run_prestop(settings))
    return 0

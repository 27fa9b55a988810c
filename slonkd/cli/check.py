"""``slonkd check``: run the health checks once on this machine and print what they found.

For operators, and for SLURM's prolog/epilog (``--prolog``): there the exit code is non-zero
only for a ``fail`` (a failing prolog makes SLURM drain the node with its own reason and
requeue the job); ``unknown`` (a missing tool, a probe past its deadline) exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from slonkd.adapters.health.checks import build_checks
from slonkd.adapters.health.probes import ProbeGuard
from slonkd.adapters.health.settings import HealthSettings
from slonkd.cli.refusal import EXIT_BAD_SETTINGS, settings_or_refusal
from slonkd.core.health import CheckResult, Verdict

EXIT_FAIL = 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``check`` and its options."""
    p = sub.add_parser(
        "check", help="run the health checks once and print the results", description=__doc__
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only checks whose name starts with NAME (repeatable)",
    )
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.add_argument(
        "--prolog",
        action="store_true",
        help="prolog/epilog mode: exit non-zero only for a fail, print one line",
    )
    p.add_argument("--expected-gpus", type=int, default=0, metavar="N")
    p.add_argument("--disk", action="append", default=[], metavar="PATH")
    p.add_argument("--mount", action="append", default=[], metavar="PATH")
    p.add_argument("--slurmd-port", type=int, default=None, metavar="PORT")
    p.add_argument("--peer", action="append", default=[], metavar="HOST")
    p.add_argument("--nic", action="append", default=[], metavar="IFACE")
    p.add_argument("--ib-ports", type=int, default=0, metavar="N")
    dcgm = p.add_mutually_exclusive_group()
    dcgm.add_argument(
        "--dcgm",
        action="store_true",
        help="run dcgmi diag -r 1 also in --prolog mode (where it is skipped: it takes a while)",
    )
    dcgm.add_argument("--no-dcgm", action="store_true", help="skip dcgmi diag (DCGM is optional)")
    p.add_argument(
        "--dcgm-host",
        default="",
        metavar="HOST",
        help="nv-hostengine for dcgmi: unix:///path/to/socket or host[:port]",
    )
    p.add_argument(
        "--nvlink-links",
        type=int,
        default=0,
        metavar="N",
        help="check NVLink: every GPU must have N active links (H100/H200 SXM: 18)",
    )
    p.add_argument(
        "--fabric-required",
        action="store_true",
        help="this node is on an NVSwitch fabric (HGX): no fabric state fails",
    )
    p.add_argument("--xid-lookback", type=float, default=0.0, metavar="SECONDS")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")


def settings_from(args: argparse.Namespace) -> HealthSettings:
    """HealthSettings from the parsed options."""
    return HealthSettings(
        expected_gpus=args.expected_gpus,
        disk_paths=tuple(args.disk) or ("/",),
        mounts=tuple(args.mount),
        slurmd_port=args.slurmd_port,
        peers=tuple(args.peer),
        nic_interfaces=tuple(args.nic),
        ib_expected_ports=args.ib_ports,
        dcgm=args.dcgm or not (args.no_dcgm or args.prolog),
        dcgm_host=args.dcgm_host,
        nvlink_links=args.nvlink_links,
        fabric_required=args.fabric_required,
        xid_lookback_s=args.xid_lookback,
        timeout_s=args.timeout,
        mount_timeout_s=min(args.timeout, 5.0),
    )


async def run_once(settings: HealthSettings, only: Sequence[str] = ()) -> list[CheckResult]:
    """Run every selected check once, concurrently."""
    guard = ProbeGuard()
    checks = [
        c
        for c in build_checks(settings, guard)
        if not only or any(c.name.startswith(o) for o in only)
    ]
    results = await asyncio.gather(*(c.run() for c in checks))
    return [replace(r, check=c.name) for c, r in zip(checks, results, strict=True)]


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd check``."""
    started = time.monotonic()
    settings = settings_or_refusal("check", lambda: settings_from(args))
    if settings is None:
        return EXIT_BAD_SETTINGS
    results = asyncio.run(run_once(settings, args.only))
    took = time.monotonic() - started
    failed = [r for r in results if r.verdict is Verdict.FAIL]
    if args.output == "json":
        print(
            json.dumps(
                {
                    "results": [
                        {
                            "check": r.check,
                            "verdict": r.verdict.value,
                            "cause": r.cause,
                            "remediation": r.remediation.value,
                            "evidence": r.evidence,
                            "timed_out": r.timed_out,
                        }
                        for r in results
                    ],
                    "duration_s": round(took, 3),
                },
                indent=2,
            )
        )
    elif args.prolog:
        if failed:
            print(
                "slonkd check: " + "; ".join(f"{r.check}: {r.cause}" for r in failed),
                file=sys.stderr,
            )
    else:
        print(f"{'CHECK':<22} {'VERDICT':<8} {'CAUSE':<28} EVIDENCE")
        for r in results:
            print(f"{r.check:<22} {r.verdict.value:<8} {r.cause or '-':<28} {r.evidence}")
    return EXIT_FAIL if failed else 0

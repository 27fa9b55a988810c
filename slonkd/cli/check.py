"""``slonkd check``: run the health checks once on this machine and print what they found.

For operators, and for SLURM's prolog/epilog (``--prolog``): there the exit code is non-zero
only for a ``fail`` (a failing prolog makes SLURM drain the node with its own reason and
requeue the job); ``unknown`` (a missing tool, a probe past its deadline) exits 0.

With no option that names checks (``--expected-gpus``, ``--disk``, ``--mount``,
``--slurmd-port``, ``--peer``, ``--nic``, ``--ib-ports``), no ``--no-discover`` and no
``--prolog`` (a prolog checks what the site named: its failure drains the node), it first
finds what the machine has (:mod:`slonkd.adapters.health.discovery`: GPUs from /dev/nvidia*
and ``nvidia-smi -L``, InfiniBand ports, physical NICs that are up, the agent config's
mounts) and checks that. Every run then says which check families it did not run, and why.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from slonkd.adapters.health.checks import build_checks
from slonkd.adapters.health.discovery import (
    Found,
    NotChecked,
    discover,
    not_checked,
    settings_for,
)
from slonkd.adapters.health.probes import Outcome, ProbeGuard, run_command
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
    p.add_argument(
        "-o",
        "--output",
        choices=["table", "json"],
        default="table",
        help="table for people (default), json for tools",
    )
    p.add_argument(
        "--prolog",
        action="store_true",
        help="prolog/epilog mode: exit non-zero only for a fail, print one line",
    )
    p.add_argument(
        "--no-discover",
        action="store_true",
        help="do not look for GPUs, InfiniBand ports, NICs and mounts: run only what the "
        "options below name (naming any of them turns discovery off as well)",
    )
    _add_selecting(p)
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
        default=None,
        metavar="N",
        help="check NVLink: every GPU must have N active links (H100/H200 SXM: 18); "
        "does not turn discovery off",
    )

    p.add_argument(
        "--fabric-required",
        action="store_true",
        help="this node is on an NVSwitch fabric (HGX): no fabric state fails",
    )
    p.add_argument(
        "--xid-lookback",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="count Xids logged up to SECONDS before now too (default 0: only new ones)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="deadline of each probe, nvidia-smi -L included (default 10; mounts: at most 5)",
    )
    p.add_argument(
        "--agent-config",
        default=os.environ.get("SLONKD_CONFIG", ""),
        metavar="FILE",
        help="the agent's config (JSON, default $SLONKD_CONFIG): discovery checks the mounts "
        "its health.mounts names",
    )
    p.add_argument(
        "--sysfs-root",
        default="/sys",
        metavar="PATH",
        help="where the host's /sys is (default /sys; in a container: /host/sys)",
    )
    p.add_argument(
        "--dev-root",
        default="/dev",
        metavar="PATH",
        help="where the host's /dev is (default /dev): GPUs are its nvidiaN files, Xids its kmsg",
    )


def _add_selecting(p: argparse.ArgumentParser) -> None:
    """The options that name checks; any of them turns discovery off (today's behaviour)."""
    p.add_argument(
        "--expected-gpus",
        type=int,
        default=None,
        metavar="N",
        help="check N GPUs (nvidia-smi, Xid, dcgmi, fabric); 0: no GPU checks",
    )
    p.add_argument(
        "--disk",
        action="append",
        default=[],
        metavar="PATH",
        help="check free space on PATH (repeatable; default /)",
    )
    p.add_argument(
        "--mount",
        action="append",
        default=[],
        metavar="PATH",
        help="check PATH is a mount that answers in time (repeatable)",
    )
    p.add_argument(
        "--slurmd-port",
        type=int,
        default=None,
        metavar="PORT",
        help="check slurmd listens on 127.0.0.1:PORT",
    )
    p.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="HOST",
        help="check HOST answers a ping (repeatable)",
    )
    p.add_argument(
        "--nic",
        action="append",
        default=[],
        metavar="IFACE",
        help="check IFACE is up and not flapping (repeatable)",
    )
    p.add_argument(
        "--ib-ports",
        type=int,
        default=None,
        metavar="N",
        help="check N InfiniBand ports are active, at full rate, without error bursts",
    )


SELECTING = ("expected_gpus", "disk", "mount", "slurmd_port", "peer", "nic", "ib_ports")
"""The options (``dest``) that name checks: any of them turns discovery off. ``--nvlink-links``
is not one: like ``--dcgm`` it tunes the GPU checks, which discovery may find."""


def discovers(args: argparse.Namespace) -> bool:
    """Whether this run looks for what to check: no ``--no-discover``, no check named.

    Never in ``--prolog`` mode: a failing prolog drains the node, so a prolog checks what
    the site named, not whatever a NIC or port left down happens to be.
    """
    return not (args.no_discover or args.prolog) and all(
        getattr(args, d) in (None, []) for d in SELECTING
    )


def settings_from(args: argparse.Namespace) -> HealthSettings:
    """HealthSettings from the parsed options."""
    return HealthSettings(
        expected_gpus=args.expected_gpus or 0,
        disk_paths=tuple(args.disk) or ("/",),
        mounts=tuple(args.mount),
        slurmd_port=args.slurmd_port,
        peers=tuple(args.peer),
        nic_interfaces=tuple(args.nic),
        ib_expected_ports=args.ib_ports or 0,
        dcgm=args.dcgm or not (args.no_dcgm or args.prolog),
        dcgm_host=args.dcgm_host,
        nvlink_links=args.nvlink_links or 0,
        fabric_required=args.fabric_required,
        xid_lookback_s=args.xid_lookback,
        timeout_s=args.timeout,
        mount_timeout_s=min(args.timeout, 5.0),
        sysfs_root=args.sysfs_root,
        kmsg_path=str(Path(args.dev_root) / "kmsg"),
    )


async def run_once(settings: HealthSettings, only: Sequence[str] = ()) -> list[CheckResult]:
    """Run every selected check once, concurrently."""
    guard = ProbeGuard()
    checks = [c for c in build_checks(settings, guard) if _selected(c.name, only)]
    results = await asyncio.gather(*(c.run() for c in checks))
    return [replace(r, check=c.name) for c, r in zip(checks, results, strict=True)]


def _selected(name: str, only: Sequence[str]) -> bool:
    return not only or any(name.startswith(o) for o in only)


async def _discover_and_run(
    args: argparse.Namespace, given: HealthSettings
) -> tuple[list[CheckResult], Found | None, list[NotChecked]]:
    """Discover (unless options name the checks), run, and say what was not checked."""
    found = None
    settings = given
    if discovers(args):
        guard = ProbeGuard()

        async def run(argv: Sequence[str]) -> Outcome:
            return await run_command("nvidia-smi-L", argv, timeout_s=args.timeout, guard=guard)

        found = await discover(
            run=run,
            dev_root=args.dev_root,
            sys_root=args.sysfs_root,
            agent_config=args.agent_config,
        )
        settings = settings_for(found, given)
    skipped = not_checked(settings, found, dcgm_off=_dcgm_off(args))
    skipped += [
        NotChecked(c.name, "not selected by --only")
        for c in build_checks(settings, ProbeGuard())
        if not _selected(c.name, args.only)
    ]
    return await run_once(settings, args.only), found, skipped


def _dcgm_off(args: argparse.Namespace) -> str:
    """Why the options turn dcgmi diag off ("" when they do not)."""
    if args.no_dcgm:
        return "--no-dcgm given"
    if args.prolog and not args.dcgm:
        return "skipped in --prolog mode (--dcgm runs it)"
    return ""


def _found_doc(found: Found) -> dict[str, object]:
    return {
        "gpus": found.gpus,
        "gpus_how": found.gpu_how,
        "ib_ports": list(found.ib_ports),
        "nics": list(found.nics),
        "nics_down": [{"nic": n, "operstate": s} for n, s in found.nics_down],
        "mounts": list(found.mounts),
        "mounts_how": found.mounts_how,
        "dcgmi": found.dcgmi,
        "notes": list(found.notes),
    }


def _print_table(
    results: list[CheckResult], found: Found | None, skipped: list[NotChecked]
) -> None:
    print(f"{'CHECK':<22} {'VERDICT':<8} {'CAUSE':<28} EVIDENCE")
    for r in results:
        print(f"{r.check:<22} {r.verdict.value:<8} {r.cause or '-':<28} {r.evidence}")
    if found is not None:
        nics = ", ".join(found.nics) or "none up"
        print(
            f"\nfound: {found.gpus} GPUs ({found.gpu_how}); {len(found.ib_ports)} InfiniBand "
            f"ports; NICs: {nics}; mounts: {', '.join(found.mounts) or found.mounts_how}"
        )
        for note in found.notes:
            print(f"  discovery: {note}")
    if skipped:
        print("\nnot checked:")
        for n in skipped:
            print(f"  {n.check:<20} {n.why}")


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd check``."""
    started = time.monotonic()
    settings = settings_or_refusal("check", lambda: settings_from(args))
    if settings is None:
        return EXIT_BAD_SETTINGS
    results, found, skipped = asyncio.run(_discover_and_run(args, settings))
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
                    "discovered": None if found is None else _found_doc(found),
                    "not_checked": [{"check": n.check, "why": n.why} for n in skipped],
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
        _print_table(results, found, skipped)
    return EXIT_FAIL if failed else 0

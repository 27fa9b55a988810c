"""Benchmarks of a base revision and of this tree side by side, in one run (issue 17).

    .venv/bin/python -m bench.compare BASE_REV BENCH [BENCH ...] [--rounds N] [--timeout S]

e.g. ``python -m bench.compare ef15df2 health 'kube:1000' --rounds 2``. Each ``BENCH`` names a
module of this package (the neighbours it drives: :mod:`bench.agent`, :mod:`bench.bus`,
:mod:`bench.coordinator`, :mod:`bench.harness`, :mod:`bench.health`, :mod:`bench.jobs`,
:mod:`bench.kube`, :mod:`bench.real_node`, :mod:`bench.revalidation`,
:mod:`bench.signal_requeue`, :mod:`bench.slurm`, :mod:`bench.soak`, :mod:`bench.topology`),
optionally with its own arguments after a colon, split as a shell would: ``kube:1000``
runs ``python -m bench.kube 1000``, ``'coordinator:0 1000'`` runs ``... coordinator 0 1000``,
``'revalidation:--runs 1'`` runs ``... revalidation --runs 1``.

How it runs: ``BASE_REV`` is checked out into a temporary ``git worktree`` (detached; removed
at the end, also on an error, Ctrl-C or SIGTERM); "head" is the tree this module lives in,
uncommitted changes included. Each bench runs as ``python -m bench.<name>`` with this
interpreter, in each tree (cwd and ``PYTHONPATH`` both that tree, so each side imports its own
``slonkd``, its own harness: ``slonkd/testing`` in old trees, ``slonkd_sandbox`` in new ones,
and its own ``bench``), one run at a time, ``--rounds`` times, in the order base, head in odd
rounds and head, base in even ones (ABBA: drift of the machine and a warm-up favour neither
side). A run that passes ``--timeout`` is interrupted (SIGINT to its process group, so the
harness stops its services; SIGKILL 30 s later). A bench missing from the base revision runs
on head alone. The last non-empty line of a run's stdout is its result (the benches'
contract: a table, then one JSON object as the last line).

How to read the verdict. Each key has a direction from :data:`DIRECTIONS` (first matching
rule): ``lower`` for costs (times, memory, CPU, load, slurmctld reads and RPCs, calls),
``higher`` for rates of useful work, ``info`` for settings, sample counts, the floors measured
beside slonkd (``raw_*``, ``python_start_s``: the tools' and the machine's time, not
slonkd's), slopes and offsets. Per key the table shows the median of each side, its spread
``[min..max]`` when there are 2 rounds or more, and the change of the medians. Verdicts:

- ``regression``: head's best run is worse than base's worst run by more than 10 % in the
  key's bad direction (with one round: head worse than base by more than 10 %); a regression
  is never called on what the spread of the runs can explain;
- ``noise``: the medians differ by more than 10 % the bad way, but the runs overlap (or come
  within 10 % of each other): no verdict, run more rounds;
- ``better``: head's worst run is better than base's best by more than 10 %;
- ``ok``: none of these; ``info``: a key without a direction; ``-``: a key on one side only,
  or not a number. A base of 0 makes any change infinite (``false_blames`` 0 -> 1 is a
  regression), except within a time key's resolution (:data:`RESOLUTION`: a millisecond, so
  a phase of 0 ms -> 0.1 ms is ``ok``).

One round has no spread: its verdicts cannot tell a regression from the machine's noise (the
floors, ``raw_*``, moving as much as slonkd's figures beside them is the sign). Act on
``--rounds 2`` or more; the default of 1 is for a first look.

Prints a progress line per run on stderr, the table per bench on stdout, then one JSON object
as the last line: ``base``, ``base_sha``, ``head``, ``rounds``, ``threshold_pct``,
``regressions`` / ``noise`` / ``better`` (``bench.key`` names), ``compared`` (keys given a
verdict), ``failures`` (runs without a result). Exit status 0 even with regressions (a
report), 1 when a run gave no result, 2 on bad arguments. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal, NoReturn

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = 0.10
"""A change worse than this fraction of base (in the key's bad direction) is a regression."""
DEFAULT_TIMEOUT_S = 1800.0
INTERRUPT_GRACE_S = 30.0
"""After SIGINT, how long a bench has to stop its services before its group gets SIGKILL."""

Direction = Literal["lower", "higher", "info"]

_SIZE = r"(_\d+)?"
DIRECTIONS: tuple[tuple[str, Direction, str], ...] = (
    # info first: what a key is about, not a figure to beat
    (
        r"^(events|runs|pods|commands|nodes|simulations|noise|bad_rate|seed|soak_minutes"
        r"|real_nodes|declared_nodes|validated|release|slurm_release|results|cold"
        r"|latency_slurmd_timeout_s|checkpoint_window_s|node_cpu_shares)$",
        "info",
        "a setting or the size of the run",
    ),
    (
        r"_samples$|^synced_objects_|^nodes_seen_|_counted$|_expected$|_rounds$"
        r"|^drains_by_agent$|^poll30s_",
        "info",
        "a count that checks the run, or a model (poll30s_*: a 30 s poll's delay, not measured)",
    ),
    (
        r"^(faults_injected|workload_events|jobs_submitted|jobs_completed|actions_taken"
        r"|control_plane_restarts|checks|jobs_lost_to_injected_faults|foreign_marks_lost_to_\w+)$",
        "info",
        "the soak's workload and what it injected",
    ),
    (
        r"^raw_|^python_start_s$|(^|_)floor_ratio$",
        "info",
        "the floor beside slonkd: the tools' or the machine's time, not slonkd's",
    ),
    (
        r"(^|_)slope(_|$)|_minus_|^load_|^rss_longest_process_min$|^asyncio_tasks_",
        "info",
        "a slope, an offset, a list or a lifetime: no better side",
    ),
    (
        r"^loadavg_1m_at_end$",
        "info",
        "the machine's load after the run: the previous run's load too, not this run's cost",
    ),
    # higher: rates of useful work (no bench reports one yet; RPCs and reads per second are costs)
    (
        r"(^|_)(events|msgs|messages|ops|writes|requests|jobs)_per_s(_|$)",
        "higher",
        "a rate of useful work",
    ),
    # lower: costs
    (r"_(s|ms|us)(_|$)", "lower", "a time (reads_per_s and rpc_per_s: a cost per second)"),
    (r"(^|_)(mb|kb|rss)(_|$)", "lower", "memory or size"),
    (r"(^|_)(pct|cpu)(_|$)", "lower", "CPU"),
    (r"(^|_)(rpc|rpcs|reads|busy|calls)(_|$)", "lower", "work for slurmctld, calls made"),
    (r"(^|_)(load|loadavg)(_|$)|^loadavg", "lower", "load of the machine"),
    (r"_ratio" + _SIZE + "$", "lower", "slonkd's time over the floor's"),
    (
        r"^(triangulation_\w+|false_blames|nodes_not_converged|log_lines_per_min_outage_max)$",
        "lower",
        "failed jobs to detect, wrong blames, nodes left unconverged, log volume",
    ),
)
"""(regex on the key, direction, why): the first rule whose regex matches decides; no match is
``info``. Built from the JSON keys of every bench/*.py (see the module docstring)."""

_RULES = tuple((re.compile(p), d, why) for p, d, why in DIRECTIONS)


def direction(key: str) -> Direction:
    """Whether a lower or a higher value of ``key`` is better, or neither (``info``)."""
    for pattern, found, _why in _RULES:
        if pattern.search(key):
            return found
    return "info"


class UsageError(Exception):
    """A bad argument: the message names it."""


class BenchOutputError(Exception):
    """A run's stdout does not end with one JSON object."""


def parse_result(stdout: str) -> dict[str, Any]:
    """The JSON object on the last non-empty line of a bench's stdout."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise BenchOutputError("no output: the last line should be a JSON object")
    last = lines[-1].strip()
    try:
        value = json.loads(last)
    except ValueError as exc:
        shown = last if len(last) <= 120 else last[:117] + "..."
        raise BenchOutputError(f"the last line is not JSON ({exc}): {shown!r}") from None
    if not isinstance(value, dict):
        raise BenchOutputError(f"the last line is JSON but a {type(value).__name__}, not an object")
    return value


def numeric(value: Any) -> float | None:
    """A JSON number as a float; anything else (bool, null, text, list, object) is None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def worse_by(base: float, head: float, way: Direction) -> float:
    """How much worse head is than base, as a fraction of base (negative: better).

    A base of 0 gives 0 when head is 0 too, else plus or minus infinity.
    """
    if way == "info":
        raise ValueError("an info key has no worse side")
    delta = head - base if way == "lower" else base - head
    if base == 0:
        return 0.0 if delta == 0 else math.copysign(math.inf, delta)
    return delta / abs(base)


RESOLUTION: tuple[tuple[str, float], ...] = (
    (r"(?<!per)_ms" + _SIZE + "$", 1.0),
    (r"(?<!per)_us" + _SIZE + "$", 1000.0),
    (r"(?<!per)_s" + _SIZE + "$", 0.001),
)
"""(regex on a time key's unit, what counts as no change): head within a millisecond of base,
either way, is the same time. The passes' phases are timed to 0.1 ms and one of them can be 0
in most passes of one side (the SLURM phase, when the poll's table serves at once): 0 -> 0.1
ms is not an infinite regression. Counts and rates have none (``false_blames`` 0 -> 1 is
one), nor do costs per second (``busy_ms_per_s``, ``reads_per_s``); the first matching rule
decides, a key of no rule has 0."""

_RESOLUTION = tuple((re.compile(p), r) for p, r in RESOLUTION)


def resolution(key: str) -> float:
    """The change of ``key`` too small to count, either way (:data:`RESOLUTION`)."""
    return next((r for pattern, r in _RESOLUTION if pattern.search(key)), 0.0)


_EPSILON = 1e-9
"""Exactly 10 % (2.0 -> 2.2 in floats: 0.10000000000000009) is not more than 10 %."""

Verdict = Literal["regression", "noise", "better", "ok", "info", "-"]


def verdict(
    way: Direction,
    base: Sequence[float],
    head: Sequence[float],
    threshold: float = THRESHOLD,
    floor: float = 0.0,
) -> Verdict:
    """The verdict on one key from each side's runs (see the module docstring).

    ``floor``: a change of at most this much, either way, is none (:func:`resolution`).
    """
    if way == "info":
        return "info"
    if not base or not head:
        return "-"
    best, worst = (min, max) if way == "lower" else (max, min)
    limit = threshold + _EPSILON

    def worse(b: float, h: float) -> float:
        return 0.0 if abs(h - b) <= floor + _EPSILON else worse_by(b, h, way)

    if worse(worst(base), best(head)) > limit:
        return "regression"
    if worse(best(base), worst(head)) < -limit:
        return "better"
    if worse(statistics.median(base), statistics.median(head)) > limit:
        return "noise"
    return "ok"


@dataclass(frozen=True, slots=True)
class Bench:
    """One bench module and its arguments."""

    name: str
    args: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The bench as its command line's tail: ``kube 1000``."""
        return shlex.join([self.name, *self.args])


_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def parse_bench(spec: str) -> Bench:
    """``NAME`` or ``NAME:ARGS`` (ARGS split as a shell would) as a :class:`Bench`."""
    name, _, rest = spec.partition(":")
    if not _NAME.match(name) or name in {"compare", "__init__"}:
        raise UsageError(f"{spec!r} does not name a bench module (bench/<name>.py)")
    try:
        args = tuple(shlex.split(rest))
    except ValueError as exc:
        raise UsageError(f"{spec!r}: its arguments do not split: {exc}") from None
    return Bench(name, args)


@dataclass(slots=True)
class Side:
    """One tree's results of one bench over the rounds."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def values(self, key: str) -> list[float]:
        """The key's numeric values, one per run that has it."""
        found = (numeric(run.get(key)) for run in self.runs)
        return [v for v in found if v is not None]

    def keys(self) -> list[str]:
        """Every key of every run, in first-seen order."""
        return list(dict.fromkeys(k for run in self.runs for k in run))


@dataclass(frozen=True, slots=True)
class Row:
    """One key's comparison."""

    key: str
    way: Direction
    base: list[float]
    head: list[float]
    verdict: Verdict
    shown_base: str
    shown_head: str
    change_pct: float | None


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _shown(side: Side, key: str, values: list[float]) -> str:
    if values:
        median = _fmt(statistics.median(values))
        if len(side.runs) >= 2:
            return f"{median} [{_fmt(min(values))}..{_fmt(max(values))}]"
        return median
    present = [run[key] for run in side.runs if key in run]
    if not present:
        return "-"
    text = json.dumps(present[0])
    return text if len(text) <= 24 else text[:21] + "..."


def compare_rows(base: Side, head: Side, threshold: float = THRESHOLD) -> list[Row]:
    """One row per key of either side, head's keys in order, then base's own."""
    rows = []
    for key in dict.fromkeys([*head.keys(), *base.keys()]):
        way = direction(key)
        b, h = base.values(key), head.values(key)
        change = None
        if b and h:  # the signed change of the medians, whatever the direction
            change = 100 * worse_by(statistics.median(b), statistics.median(h), "lower")
        rows.append(
            Row(
                key=key,
                way=way,
                base=b,
                head=h,
                verdict=verdict(way, b, h, threshold, resolution(key)) if b and h else "-",
                shown_base=_shown(base, key, b),
                shown_head=_shown(head, key, h),
                change_pct=change,
            )
        )
    return rows


def render(bench: Bench, rows: list[Row]) -> str:
    """The side-by-side table of one bench."""
    headers = ("key", "dir", "base", "head", "change", "verdict")
    cells = [
        (
            r.key,
            r.way,
            r.shown_base,
            r.shown_head,
            "-" if r.change_pct is None else f"{r.change_pct:+.1f} %",
            r.verdict,
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    lines = [f"== {bench.label}"]
    for line in (headers, *cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    return "\n".join(lines)


# --- running -----------------------------------------------------------------------------


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise UsageError(f"git {' '.join(args)}: {out.stderr.strip() or out.returncode}")
    return out.stdout.strip()


def resolve(rev: str) -> str:
    """The commit ``rev`` names; a :class:`UsageError` when it names none."""
    try:
        return _git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    except UsageError:
        raise UsageError(f"{rev!r} names no commit of this repository") from None


def _is_bench(text: str) -> bool:
    return 'if __name__ == "__main__":' in text


def check_benches(rev: str, benches: Sequence[Bench]) -> dict[str, bool]:
    """Per bench: whether base has it; a :class:`UsageError` when neither side can run it."""
    in_base: dict[str, bool] = {}
    for bench in benches:
        path = f"bench/{bench.name}.py"
        here = ROOT / path
        head_text = here.read_text() if here.exists() else None
        shown = subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=False
        )
        base_text = shown.stdout if shown.returncode == 0 else None
        if head_text is None and base_text is None:
            raise UsageError(f"no bench {bench.name!r}: neither tree has {path}")
        if not any(_is_bench(t) for t in (head_text, base_text) if t is not None):
            raise UsageError(f"{path} is not a bench (it has no __main__)")
        in_base[bench.name] = base_text is not None and _is_bench(base_text)
    return in_base


@contextmanager
def base_tree(rev: str) -> Iterator[Path]:
    """A detached worktree of ``rev`` in a temporary directory, removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="slonkd-bench-compare-"))
    tree = tmp / "base"
    try:
        _git("worktree", "add", "--detach", "--quiet", str(tree), rev)
        yield tree
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(tree)],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True, check=False)


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGINT to the run's process group (the harness stops its services), then SIGKILL."""
    for sig, wait_s in ((signal.SIGINT, INTERRUPT_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _default_sigint() -> None:
    """In the run, before exec: SIGINT at its default, so Python turns it into KeyboardInterrupt.

    Started under ``nohup ... &`` this process ignores SIGINT, and a child inherits that: a run
    past its timeout would not stop its services, and would go on until the SIGKILL.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_once(tree: Path, bench: Bench, timeout_s: float) -> dict[str, Any]:
    """One run of ``bench`` in ``tree``: its result (its JSON line)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        [sys.executable, "-m", f"bench.{bench.name}", *bench.args],
        cwd=tree,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: a timeout or Ctrl-C stops all of it
        preexec_fn=_default_sigint,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        proc.communicate()
        raise BenchOutputError(f"timed out after {timeout_s:.0f} s") from None
    except BaseException:
        _stop_group(proc)
        raise
    if proc.returncode != 0:
        tail = "\n".join(stderr.splitlines()[-15:])
        raise BenchOutputError(f"exit status {proc.returncode}; stderr ends:\n{tail}")
    return parse_result(stdout)


def _on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m bench.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("base", metavar="BASE_REV")
    parser.add_argument("benches", metavar="BENCH", nargs="+", help="NAME or 'NAME:ARGS'")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="s per run")
    return parser


def _say(message: str) -> None:
    print(f"[compare] {message}", file=sys.stderr, flush=True)


def run_all(
    trees: dict[str, Path],
    benches: Sequence[Bench],
    in_base: dict[str, bool],
    rounds: int,
    timeout_s: float,
) -> tuple[dict[tuple[str, str], Side], list[dict[str, Any]]]:
    """Every run, one at a time, ABBA: per (bench label, side) its results; the failures."""
    sides = {(b.label, s): Side() for b in benches for s in ("base", "head")}
    failures: list[dict[str, Any]] = []
    for round_ in range(1, rounds + 1):
        order = ("base", "head") if round_ % 2 else ("head", "base")
        for bench in benches:
            for which in order:
                if which == "base" and not in_base[bench.name]:
                    continue
                side = sides[(bench.label, which)]
                began = time.monotonic()
                try:
                    result = run_once(trees[which], bench, timeout_s)
                except BenchOutputError as exc:
                    first = str(exc).splitlines()[0]
                    side.errors.append(first)
                    failures.append(
                        {"bench": bench.label, "side": which, "round": round_, "error": first}
                    )
                    took = time.monotonic() - began
                    _say(f"round {round_} {which} {bench.label}: FAILED after {took:.0f} s: {exc}")
                    continue
                side.runs.append(result)
                side.seconds.append(time.monotonic() - began)
                _say(f"round {round_} {which} {bench.label}: {side.seconds[-1]:.1f} s")
    return sides, failures


def report(
    benches: Sequence[Bench],
    in_base: dict[str, bool],
    sides: dict[tuple[str, str], Side],
    base_rev: str,
) -> tuple[dict[str, list[str]], int]:
    """Print the table of every bench; the keys per verdict, the number of keys compared."""
    found: dict[str, list[str]] = {"regression": [], "noise": [], "better": []}
    compared = 0
    for bench in benches:
        base, head = sides[(bench.label, "base")], sides[(bench.label, "head")]
        rows = compare_rows(base, head)
        print()
        print(render(bench, rows))
        if not in_base[bench.name]:
            print(f"  base: no bench/{bench.name}.py at {base_rev}: head alone")
        for name, side in (("base", base), ("head", head)):
            if side.seconds:
                each = statistics.median(side.seconds)
                print(f"  {name}: {len(side.runs)} run(s), {each:.1f} s each (median)")
            for error in side.errors:
                print(f"  {name}: FAILED: {error}")
        for row in rows:
            if row.verdict in found:
                found[row.verdict].append(f"{bench.name}.{row.key}")
            compared += row.verdict in {"regression", "noise", "better", "ok"}
    return found, compared


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run every bench on both sides, print the tables and the JSON line."""
    try:
        args = _parser().parse_args(argv)
        if args.rounds < 1:
            raise UsageError(f"--rounds must be 1 or more, not {args.rounds}")
        if args.timeout <= 0:
            raise UsageError(f"--timeout must be positive, not {args.timeout}")
        benches = [parse_bench(spec) for spec in args.benches]
        base_sha = resolve(args.base)
        in_base = check_benches(base_sha, benches)
    except UsageError as exc:
        print(f"bench.compare: {exc}", file=sys.stderr)
        return 2
    head = _git("describe", "--always", "--dirty")
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with base_tree(base_sha) as base:
            trees = {"base": base, "head": ROOT}
            sides, failures = run_all(trees, benches, in_base, args.rounds, args.timeout)
    except KeyboardInterrupt:
        _say("interrupted: the base worktree is removed, no report")
        return 130
    print(
        f"base {args.base} ({base_sha[:12]}), head {head}, {args.rounds} round(s); regression: "
        f"head's best run worse than base's worst by more than {THRESHOLD:.0%}"
        + ("" if args.rounds > 1 else " (one round: no spread, a verdict may be noise)")
    )
    found, compared = report(benches, in_base, sides, args.base)
    print(
        json.dumps(
            {
                "base": args.base,
                "base_sha": base_sha,
                "head": head,
                "rounds": args.rounds,
                "threshold_pct": round(THRESHOLD * 100),
                "regressions": found["regression"],
                "noise": found["noise"],
                "better": found["better"],
                "compared": compared,
                "failures": failures,
            }
        )
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

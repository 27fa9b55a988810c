"""Turn the suite's JUnit XML into tables: by tier, by module and by slow fixture.

``python -m tests.timing_report [XML ...] [--top N]`` prints Markdown tables
(``docs/testing.md`` keeps them before and after each change to the suite's cost). Reads the
properties :mod:`tests.timing` adds (``setup_s``, ``call_s``, ``teardown_s``,
``fixture:NAME[scope]``); a file without them (another runner's) still gives each test's total.
Several files (``scripts/test``'s phases) are read as one run whose wall time is the sum of
theirs. Sums are test time; under pytest-xdist the wall time (the testsuite's ``time``) is less.
``--durations-out tests/durations.json`` writes the seconds per module that
:mod:`tests.parallel` hands the longest work out first by (refresh it from a full run).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_XML = Path(".test-results/junit-parallel.xml")
PHASES = ("setup_s", "call_s", "teardown_s")


@dataclass
class Case:
    """One test case of the XML: where it lives, its phases and its slow fixtures."""

    module: str
    name: str
    total_s: float
    outcome: str
    phases: dict[str, float] = field(default_factory=dict)
    fixtures: dict[str, float] = field(default_factory=dict)

    @property
    def tier(self) -> str:
        """``unit``, ``contract`` or ``e2e`` (the folder under ``tests/``), else ``other``."""
        parts = self.module.split(".")
        return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


@dataclass
class Run:
    """The cases of one run and its wall time (the testsuite's ``time``)."""

    cases: list[Case]
    wall_s: float


def read(path: Path) -> Run:
    """Parse a pytest JUnit XML file."""
    root = ET.parse(path).getroot()  # noqa: S314 (the suite's own output, not untrusted input)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    cases: list[Case] = []
    wall = 0.0
    for suite in suites:
        wall += float(suite.get("time", "0") or 0)
        for tc in suite.iter("testcase"):
            cases.append(_case(tc))
    return Run(cases, wall)


def _case(tc: ET.Element) -> Case:
    outcome = "passed"
    for tag in ("failure", "error", "skipped"):
        if tc.find(tag) is not None:
            outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            break
    case = Case(
        module=tc.get("classname", "").rsplit(".", 1)[0]
        if _is_class(tc.get("classname", ""))
        else tc.get("classname", ""),
        name=tc.get("name", ""),
        total_s=float(tc.get("time", "0") or 0),
        outcome=outcome,
    )
    for prop in tc.iter("property"):
        name, value = prop.get("name", ""), prop.get("value", "0")
        try:
            seconds = float(value)
        except ValueError:
            continue
        if name in PHASES:
            case.phases[name] = case.phases.get(name, 0.0) + seconds
        elif name.startswith("fixture:"):
            case.fixtures[name[len("fixture:") :]] = seconds
    return case


def _is_class(classname: str) -> bool:
    last = classname.rsplit(".", 1)[-1]
    return last[:1].isupper()


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)]


def _group(cases: list[Case], key: str) -> list[list[str]]:
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
    for c in cases:
        s = sums[getattr(c, key)]
        s[0] += 1
        s[1] += c.total_s
        for i, phase in enumerate(PHASES, start=2):
            s[i] += c.phases.get(phase, 0.0)
    ordered = sorted(sums.items(), key=lambda kv: -kv[1][1])
    return [[k, str(int(v[0])), *(f"{x:.0f}" for x in v[1:])] for k, v in ordered]


def report(run: Run, top: int) -> str:
    """The Markdown tables for ``run``: tiers, the ``top`` modules, the ``top`` fixtures."""
    cases = run.cases
    counts: dict[str, int] = defaultdict(int)
    for c in cases:
        counts[c.outcome] += 1
    total = sum(c.total_s for c in cases)
    lines = [
        f"{len(cases)} tests ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}); "
        f"test time {total:.0f} s; wall time {run.wall_s:.0f} s",
        "",
        "By tier (seconds):",
        "",
        *_table(["tier", "tests", "total", "setup", "call", "teardown"], _group(cases, "tier")),
        "",
        f"The {top} slowest modules (seconds):",
        "",
        *_table(
            ["module", "tests", "total", "setup", "call", "teardown"],
            _group(cases, "module")[:top],
        ),
        "",
        f"The {top} costliest fixtures (set-up seconds, summed over the tests charged):",
        "",
    ]
    fixtures: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for c in cases:
        for name, seconds in c.fixtures.items():
            fixtures[name][0] += 1
            fixtures[name][1] += seconds
    rows = sorted(fixtures.items(), key=lambda kv: -kv[1][1])[:top]
    lines += _table(
        ["fixture[scope]", "set-ups", "seconds", "mean"],
        [[k, str(int(n)), f"{s:.0f}", f"{s / n:.2f}"] for k, (n, s) in rows],
    )
    return "\n".join(lines) + "\n"


def durations(run: Run) -> dict[str, float]:
    """Seconds per test module (its path), summed over its cases, longest first."""
    per: dict[str, float] = defaultdict(float)
    for case in run.cases:
        per[case.module.replace(".", "/") + ".py"] += case.total_s
    return {m: round(s, 1) for m, s in sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))}


def main(argv: list[str] | None = None) -> int:
    """Print the tables for one JUnit XML file; exit 2 with one line if it cannot be read."""
    parser = argparse.ArgumentParser(prog="python -m tests.timing_report", description=__doc__)
    parser.add_argument("xml", nargs="*", type=Path, default=[DEFAULT_XML])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--durations-out", type=Path, help="write seconds per module (JSON)")
    args = parser.parse_args(argv)
    runs = []
    for path in args.xml:
        try:
            runs.append(read(path))
        except (OSError, ET.ParseError) as exc:
            print(f"timing_report: cannot read {path}: {exc}", file=sys.stderr)
            return 2
    run = Run([c for r in runs for c in r.cases], sum(r.wall_s for r in runs))
    sys.stdout.write(report(run, args.top))
    if args.durations_out is not None:
        args.durations_out.write_text(json.dumps(durations(run), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

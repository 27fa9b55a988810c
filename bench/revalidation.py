"""Proof of health before return, measured on the real services (issue 19 item 2).

``revalidation_s``: from the moment a failed node's check passes again (its failure ended,
its pod replaced, the new pod's agent's check fixed) to the node resumed by slonkd after the
recheck's passing answer: the price of proving health over resuming at once. Measured by the
e2e scene ``tests/e2e/test_revalidation.py`` (real slurmctld/slurmd, mosquitto, apiserver,
agents and a coordinator, ``revalidate_recheck_s`` 2), run ``--runs`` times; median and max.

    .venv/bin/python -m bench.revalidation [--runs 3]

Prints one line per run, then one JSON object as the last line. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENE = "tests/e2e/test_revalidation.py"
_RESUMED = re.compile(r"revalidation: resumed ([0-9.]+) s after the gate opened")


def measure(runs: int) -> list[float]:
    """Seconds from the check passing to the resume, one per run of the e2e scene."""
    took: list[float] = []
    for i in range(runs):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", SCENE],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        found = _RESUMED.search(proc.stdout)
        if proc.returncode != 0 or found is None:
            print(proc.stdout[-3000:], file=sys.stderr)
            raise SystemExit(f"run {i + 1}: the e2e scene failed (rc {proc.returncode})")
        took.append(float(found[1]))
        print(f"run {i + 1}: resumed {took[-1]:.2f} s after the check passed")
    return took


def main() -> int:
    """Run the scene, print each run and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    took = measure(args.runs)
    print(
        json.dumps(
            {
                "revalidation_s": round(statistics.median(took), 2),
                "revalidation_max_s": round(max(took), 2),
                "runs": args.runs,
            },
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

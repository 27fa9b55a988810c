"""Job-safety figures of issue 19 (not part of CI; prints, never asserts).

Today: the triangulation of bad nodes from failed jobs (:mod:`slonkd.core.job_blame`), over
seeded simulations of a 256-node cluster with one bad node. Jobs of 1 to 16 nodes (random
placement) run one after another; a job that holds the bad node ends NODE_FAIL with
probability ``--bad-rate``, and any job ends NODE_FAIL for reasons of its own with
probability ``--noise`` (the noise that makes partners look guilty). After every failed job
the window is judged. A simulation ends when the bad node is blamed, then runs ``--after``
more jobs without it (it was drained) to give healthy nodes time to be blamed wrongly.

- triangulation_jobs_to_detect: median of the bad node's failed jobs when it was blamed;
- triangulation_jobs_to_detect_p90, triangulation_undetected (not blamed within
  ``--max-jobs``), false_blames (healthy nodes blamed, all simulations together).

And checkpoint before requeue, on real SLURM (:mod:`bench.signal_requeue`): ``--deletions``
rounds of a trapping job and ``slonkd prestop`` with a checkpoint window (``--window``):

- signal_to_requeue_p99_s (and _median_s, _max_s): from the checkpoint signal to the
  requeue, with checkpoint_window_s next to it (the target: within the window + 2 s);
  signal_to_requeue_rounds: the rounds that counted (checkpoint written, job requeued).

``--revalidation N`` adds revalidation_s (check passing -> node resumed, on the real services:
:mod:`bench.revalidation`, N runs, median). Prints a table, then one JSON object as the last
line.

    .venv/bin/python -m bench.jobs [--simulations 1000] [--deletions 10 --window 3]
        [--revalidation 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from bench.signal_requeue import measure as measure_signal_to_requeue
from slonkd.core.job_blame import BlamePolicy, JobOutcome, blame
from slonkd.core.slurm_job import JobId
from slonkd.core.slurm_node import NodeName

NODES = 256
SIZES = (1, 2, 4, 8, 16)
SIZE_WEIGHTS = (0.2, 0.2, 0.25, 0.2, 0.15)


def simulate(
    seed: int, policy: BlamePolicy, *, bad_rate: float, noise: float, max_jobs: int, after: int
) -> tuple[int | None, int]:
    """(the bad node's failed jobs when blamed, or None; healthy nodes blamed)."""
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not a secret
    names = [NodeName(f"n{i:03d}") for i in range(NODES)]
    bad = rng.choice(names)
    history: list[JobOutcome] = []
    wrongly: set[str] = set()
    bad_failures = 0
    detected: int | None = None
    placeable = names
    remaining_after = after
    for job_id in range(1, max_jobs + 1):
        size = rng.choices(SIZES, SIZE_WEIGHTS)[0]
        nodes = frozenset(rng.sample(placeable, size))
        failed = (bad in nodes and rng.random() < bad_rate) or rng.random() < noise
        history.append(JobOutcome(job_id=JobId(job_id), nodes=nodes, infrastructure_failure=failed))
        if bad in nodes and failed:
            bad_failures += 1
        if failed:
            found = {b.node for b in blame(history, policy)}
            wrongly |= found - {bad}
            if detected is None and bad in found:
                detected = bad_failures
                placeable = [n for n in names if n != bad]  # drained: it runs no more jobs
        if detected is not None:
            remaining_after -= 1
            if remaining_after <= 0:
                break
    return detected, len(wrongly)


def revalidation_runs(runs: int) -> dict[str, float]:
    """revalidation_s (median) and its max over ``runs`` runs on the real services."""
    from bench.revalidation import measure

    took = measure(runs)
    return {
        "revalidation_s": round(statistics.median(took), 2),
        "revalidation_max_s": round(max(took), 2),
    }


def main() -> int:
    """Run the simulations, print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--simulations", type=int, default=1000)
    parser.add_argument("--bad-rate", type=float, default=0.8, help="P(bad node breaks a job)")
    parser.add_argument("--noise", type=float, default=0.02, help="P(any job fails by itself)")
    parser.add_argument("--max-jobs", type=int, default=5000)
    parser.add_argument("--after", type=int, default=500, help="jobs run after detection")
    parser.add_argument("--min-failures", type=int, default=BlamePolicy().min_failures)
    parser.add_argument(
        "--deletions", type=int, default=10, help="prestop rounds on real SLURM (0: skip)"
    )
    parser.add_argument("--window", type=float, default=3.0, help="checkpoint window, seconds")
    parser.add_argument("--revalidation", type=int, default=0, help="runs of bench.revalidation")
    args = parser.parse_args()
    revalidation = revalidation_runs(args.revalidation) if args.revalidation else {}
    policy = BlamePolicy(min_failures=args.min_failures)
    started = time.perf_counter()
    detections: list[int] = []
    undetected = 0
    false_blames = 0
    for seed in range(args.simulations):
        detected, wrong = simulate(
            seed,
            policy,
            bad_rate=args.bad_rate,
            noise=args.noise,
            max_jobs=args.max_jobs,
            after=args.after,
        )
        false_blames += wrong
        if detected is None:
            undetected += 1
        else:
            detections.append(detected)
    elapsed = time.perf_counter() - started
    requeue_s = sorted(measure_signal_to_requeue(args.deletions, window_s=args.window))
    requeue_p99 = (
        requeue_s[min(len(requeue_s) - 1, int(0.99 * len(requeue_s)))] if requeue_s else None
    )
    requeue_median = round(statistics.median(requeue_s), 2) if requeue_s else None
    ordered = sorted(detections)
    p90 = ordered[int(0.9 * (len(ordered) - 1))] if ordered else None
    median = statistics.median(ordered) if ordered else None
    print(f"{'simulations':<38}{args.simulations:>10}")
    print(f"{'nodes, bad nodes':<38}{NODES:>7}, 1")
    print(f"{'bad node breaks its job (p)':<38}{args.bad_rate:>10}")
    print(f"{'any job fails by itself (p)':<38}{args.noise:>10}")
    print(f"{'min independent failures (K)':<38}{policy.min_failures:>10}")
    print(f"{'failed jobs to detect, median':<38}{median!s:>10}")
    print(f"{'failed jobs to detect, p90':<38}{p90!s:>10}")
    print(f"{'undetected within max jobs':<38}{undetected:>10}")
    print(f"{'healthy nodes blamed (all sims)':<38}{false_blames:>10}")
    print(f"{'wall time s':<38}{elapsed:>10.1f}")
    print(f"{'prestop rounds counted / run':<38}{len(requeue_s):>7} / {args.deletions}")
    print(f"{'checkpoint window s':<38}{args.window:>10.1f}")
    print(f"{'signal to requeue s, median':<38}{requeue_median!s:>10}")
    print(f"{'signal to requeue s, p99':<38}{requeue_p99!s:>10}")
    print(f"{'signal to requeue s, max':<38}{(requeue_s[-1] if requeue_s else None)!s:>10}")
    print(
        json.dumps(
            {
                "triangulation_jobs_to_detect": median,
                "triangulation_jobs_to_detect_p90": p90,
                "triangulation_undetected": undetected,
                "false_blames": false_blames,
                "simulations": args.simulations,
                "noise": args.noise,
                "bad_rate": args.bad_rate,
                "signal_to_requeue_p99_s": requeue_p99,
                "signal_to_requeue_median_s": requeue_median,
                "signal_to_requeue_max_s": requeue_s[-1] if requeue_s else None,
                "signal_to_requeue_rounds": len(requeue_s),
                "checkpoint_window_s": args.window,
                **revalidation,
            },
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

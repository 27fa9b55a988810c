"""The coordinator (``slonkd coordinator``), one concept per module.

- :mod:`.settings`: what it is told (:class:`CoordinatorSettings`).
- :mod:`.observing`: what it sees: informer caches, agents' verdicts, a view per worker.
- :mod:`.remembering`: the state ConfigMap (breaker, pause, remediation history).
- :mod:`.admitting`: the disruption budget and the breaker, one gate (with its reservation
  ledger) for the pass, the fast path and the rollout.
- :mod:`.executing`: the executors' table, with audit, metrics and log line in one place.
- :mod:`.recording`: a SLURM write's record (metric, audit, log line), the rollout's too.
- :mod:`.remediating`: the remediation ladder's steps (evict, reboot request, manual repair).
- :mod:`.job_outcomes`: nodes blamed for failed jobs (the ``job-failures`` drain).
- :mod:`.auditing` and :mod:`.values`: the audit record and the values written.
- :mod:`.fast_path`: K8s marks for the SLURM failures a poll saw, between passes.
- :mod:`.pass_read`: which SLURM table a pass plans on (read ahead, the poll's, its own).
- :mod:`.rolling` and :mod:`.replacing`: worker rollouts of OnDelete StatefulSets, and one
  worker's replacement (jobs, requeue, eviction).
- :mod:`.rollout_read`: what a rollout pass reads (SLURM's table, one view per worker).
- :mod:`.composing`: the composition root of a term (:class:`Parts` and every collaborator).
- :mod:`.reconciling`: one pass and the fast path (:class:`Coordinator`, on its composition).
- :mod:`.term`: one leader's term: its tasks in their waves, its loop of passes.
- :mod:`.leading`: the process (:func:`run_coordinator`) and :func:`lead`, which runs a term.
"""

from slonkd.runtime.coordinating.composing import Parts
from slonkd.runtime.coordinating.leading import api_readiness, lead, run_coordinator
from slonkd.runtime.coordinating.reconciling import Coordinator, Snapshot
from slonkd.runtime.coordinating.settings import CoordinatorSettings

__all__ = [
    "Coordinator",
    "CoordinatorSettings",
    "Parts",
    "Snapshot",
    "api_readiness",
    "lead",
    "run_coordinator",
]

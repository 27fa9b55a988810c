"""Pure parser of the running-job count read (``squeue``, one line a job); no I/O.

The count of jobs holding resources on each node is an optional enrichment of a node read:
one ``squeue`` call over every partition (hidden ones too) for the states in which a job
holds its nodes, printing only the state and the compressed node list of each job. Same
output on 22.05 and 24.11. A node that no listed job names has no running job; a job whose
state is not one of those asked for, a malformed line or a cut-off output is a ParseError,
never a guessed count.
"""

from __future__ import annotations

import re
from collections import Counter

from slonkd.adapters.slurm.parsing import expand_hostlist, output_lines, squeue_args
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import JobState
from slonkd.core.slurm_node import NodeName

ON_NODE_STATES = (
    JobState.RUNNING,
    JobState.COMPLETING,
    JobState.SUSPENDED,
    JobState.CONFIGURING,
)
"""Job states in which a job holds resources on its nodes (``SlurmJob.on_node``)."""

SQUEUE_JOBS_ARGS = squeue_args(ON_NODE_STATES, "--format=%T|%N")
"""``squeue`` arguments of the count read: state and node list of each job, nothing else."""

_LINE = re.compile(r"(?P<state>[A-Z_]+)\|(?P<nodes>[A-Za-z0-9._,\[\]-]*)")
_WANTED = frozenset(ON_NODE_STATES)


def parse_running_jobs(text: str) -> dict[NodeName, int]:
    """Jobs per node from ``squeue`` with :data:`SQUEUE_JOBS_ARGS`; nodes without jobs absent."""
    counts: Counter[NodeName] = Counter()
    for line in output_lines(text, "squeue"):
        match = _LINE.fullmatch(line)
        if match is None:
            raise ParseError(f"not a squeue state|nodes line: {line[:80]!r}")
        state = JobState.parse(match["state"])
        if state not in _WANTED:
            raise ParseError(f"squeue listed a job in state {match['state'][:40]!r}")
        counts.update(set(expand_hostlist(match["nodes"])))
    return dict(counts)

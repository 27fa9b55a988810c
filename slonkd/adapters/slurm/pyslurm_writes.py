"""The pyslurm backend of the SLURM port: its reads (``pyslurm_reads.py``) and its writes.

:class:`PyslurmBackend` implements :class:`~slonkd.adapters.slurm.backend.SlurmReads` and
:class:`~slonkd.adapters.slurm.backend.SlurmWrites` through the pyslurm child
(:mod:`slonkd.adapters.slurm.pyslurm_child`, asked by :class:`~slonkd.adapters.slurm.
pyslurm_link.PyslurmChild`). Its compare-and-set is the scontrol backend's
(:mod:`slonkd.adapters.slurm.scontrol`), on another transport: this process reads the nodes
through the child (one node: ``Node.load``, two RPCs, the node and the partitions; several:
one ``Nodes.load``), plans them with the same pure planners (:mod:`slonkd.core.slurm_plan`:
an operator's drain, a foreign or SLURM reason, an unknown state are never touched), and
:class:`~slonkd.adapters.slurm.cas_apply.CasApply` sends identical updates as hostlist chunks,
each one ``Node.modify`` in the child, re-reads later chunks and judges refusals node by
node. The window between the read's answer and the update's request is a plan and a pipe
round trip: no process start, no text to parse. A write that died in the child is
NotReached or OutcomeUnknown by whether it said ``sending`` (pyslurm_link.py).

Differences from the scontrol backend, each forced by libslurm or pyslurm:

- An empty ``extra`` is written as ``{}``: pyslurm sends an empty text as "unchanged"
  (NULL), so the last slonkd cause released would stay in ``extra``; ``{}`` decodes to no
  causes (:func:`~slonkd.core.reasons.decode_causes`) and the planners are wrapped so that a
  chunk's recheck plans the same ``{}``. A comment cannot be cleared (``set_comment("")`` is
  a TerminalError that says so).
- The reboot request: libslurm has no call for it (``scontrol reboot`` builds the RPC from
  SLURM's internal headers; neither release exports it, nor does pyslurm wrap it), so the
  compare-and-set drain goes through pyslurm and the request itself through ``scontrol
  reboot ASAP``: the one SLURM client this backend runs.
- A requeue is one RPC a job (scontrol sends one list); a job that ended or cannot be
  requeued between the read and its requeue is reported in ``not_requeueable``.
- ``reason_user`` of a reason written through pyslurm may be None on 22.05 (pyslurm leaves
  the update's ``reason_uid`` unset): display only, ownership goes by the reason's text.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slonkd.adapters.slurm.cas_apply import CasApply
from slonkd.adapters.slurm.cas_writes import CasWrites
from slonkd.adapters.slurm.hostlists import chunk_hostlists
from slonkd.adapters.slurm.pyslurm_reads import PyslurmReads
from slonkd.adapters.slurm.results import RequeueResult, UpdateResult
from slonkd.adapters.slurm.runner import (
    CommandRunner,
    InvalidNodeStateError,
    NodeNotFoundError,
    counting,
)
from slonkd.core.checkpoint import SignalSpec
from slonkd.core.errors import ParseError, TerminalError
from slonkd.core.reasons import sanitise_text
from slonkd.core.slurm_job import JobId
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd.core.slurm_plan import (
    Planner,
    Skip,
    Update,
    plan_or_missing,
)

EMPTY_EXTRA = "{}"
"""What an empty ``extra`` is written as (pyslurm cannot send an empty text)."""


def with_empty_extra(planner: Planner) -> Planner:
    """``planner`` whose updates write :data:`EMPTY_EXTRA` where they would clear ``extra``."""

    def plan(node: SlurmNode) -> Update | Skip:
        got = planner(node)
        if isinstance(got, Update) and got.extra == "":
            return dataclasses.replace(got, extra=EMPTY_EXTRA)
        return got

    return plan


@dataclass(slots=True)
class PyslurmBackend(PyslurmReads, CasWrites):
    """SLURM through pyslurm in a child process (22.05 and 24.11 builds)."""

    runner: CommandRunner = field(init=False)
    """``scontrol reboot`` alone (libslurm has no reboot request): see the module docstring."""

    def __post_init__(self) -> None:
        PyslurmReads.__post_init__(self)
        self.runner = CommandRunner(self.settings)

    async def _write(self, op: str, **args: object) -> Any:
        return await self.child.ask(op, args, timeout_s=self.settings.timeout_s, write=True)

    async def set_comment(self, names: Sequence[str], comment: str) -> UpdateResult:
        """Set the comment of ``names`` (sanitised); an empty one cannot be sent (see above)."""
        value = sanitise_text(comment)
        if not value:
            raise TerminalError("pyslurm cannot clear a node's comment (it sends '' as unchanged)")
        with counting() as calls:
            for expr in chunk_hostlists(names, self.settings.max_hostlist_chars):
                await self._write("comment", expr=expr, comment=value)
        return UpdateResult(changed=tuple(NodeName(n) for n in names), calls=calls())

    async def requeue_jobs(self, name: str, *, all_or_none: bool = False) -> RequeueResult:
        """Requeue every requeueable job on node ``name``; report the others.

        ``all_or_none``: when any job there cannot be requeued, requeue none, judged on the
        same read the requeue acts on.
        """
        jobs = await self.jobs_on(name)
        can = [j.job_id for j in jobs if j.requeueable]
        cannot = tuple(j.job_id for j in jobs if not j.requeueable)
        if cannot and all_or_none:
            return RequeueResult(not_requeueable=cannot, held_back=tuple(can))
        if not can:
            return RequeueResult(not_requeueable=cannot)
        said = await self._write("requeue", job_ids=[int(j) for j in can])
        if not isinstance(said, dict) or not isinstance(said.get("requeued"), list):
            raise ParseError(f"pyslurm requeue: not an answer: {str(said)[:80]!r}")
        done = {int(j) for j in said["requeued"]}
        return RequeueResult(
            requeued=tuple(j for j in can if int(j) in done),
            not_requeueable=cannot + tuple(j for j in can if int(j) not in done),
        )

    async def reconfigure(self) -> None:
        """slurmctld reads its configuration again."""
        await self._write("reconfigure")

    async def signal_batch(self, job_id: JobId, signal: SignalSpec) -> None:
        """``signal`` to job ``job_id``'s batch shell alone, sent once."""
        await self._write("signal", job_id=int(job_id), signal=signal.number)

    async def read_for_update(
        self, names: Sequence[str], *, hold: bool = False
    ) -> dict[str, SlurmNode]:
        """The fresh read a compare-and-set decides on: one node alone, or one table read.

        ``hold`` changes nothing: pyslurm's read is exact (``extra`` included).
        """
        unique = list(dict.fromkeys(names))
        if len(unique) == 1:
            node = await self.read_node(unique[0])
            return {} if node is None else {node.name: node}
        return {n.name: n for n in await self.read_nodes(unique)} if unique else {}

    async def read_then_apply(
        self, names: Sequence[str], planner: Planner, *, hold: bool = False
    ) -> UpdateResult:
        """The compare-and-set: the read, the plans (an empty extra as ``{}``), the updates."""
        plan = with_empty_extra(planner)
        with counting() as calls:
            read_at = time.time()  # an operator's write after this and before ours is lost
            nodes = await self.read_for_update(names, hold=hold)
            plans = [plan_or_missing(nodes, n, plan) for n in dict.fromkeys(names)]
            cas = CasApply(self.settings, self.read_nodes, self._update)
            result = await cas.apply(plans, plan)
            return dataclasses.replace(result, read_at=read_at, calls=calls())

    async def _update(
        self, expr: str, state: str | None, reason: str | None, extra: str | None
    ) -> bool:
        """One ``Node.modify`` of hostlist ``expr`` (``cas_apply.SendUpdate``); False: refused."""
        try:
            await self._write("update", expr=expr, state=state, reason=reason, extra=extra)
        except (NodeNotFoundError, InvalidNodeStateError):
            return False
        return True

"""The scontrol/sinfo/squeue backend of the SLURM adapter: its compare-and-set writes.

:class:`ScontrolBackend` is the whole backend: the reads of
:class:`~slonkd.adapters.slurm.scontrol_reads.ScontrolReads` (``scontrol_reads.py``) and,
here, the writes. Every write re-reads the nodes it touches right before updating them
(``sinfo -n`` with only the fields the decisions need, see ``parsing_cas.py``; ``scontrol``
for whatever that cannot show exactly), runs the pure decisions of
:mod:`slonkd.core.slurm_plan` on that fresh read, and sends identical updates together as
compressed hostlists (``hostlists.py``), chunked to ``max_hostlist_chars``. Results
(``results.py``) say which nodes changed and which were skipped, and why. A chunk that
slurmctld refuses (a node vanished, a state changed under us) is retried node by node so one
bad node never hides the others. Subprocesses run in ``runner.py``. Every write goes through
the runner's ``write``: sent again only when it never reached slurmctld, raised as
``OutcomeUnknownError`` when it may have landed. The chunks, rechecks and resends are
``cas_apply.py``'s, which knows no transport: this backend hands it its node read and its
``scontrol update`` (the primed process for the first chunk, else argv). The checkpoint
signal of ``job_signal.py`` is a write here too (``scancel --batch --signal``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

from slonkd.adapters.slurm.cas_apply import CasApply
from slonkd.adapters.slurm.cas_writes import CasWrites
from slonkd.adapters.slurm.hostlists import chunk_hostlists, compress
from slonkd.adapters.slurm.parsing_cas import CAS_FORMAT, parse_cas_read
from slonkd.adapters.slurm.primed import PrimedScontrol
from slonkd.adapters.slurm.results import RequeueResult, UpdateResult
from slonkd.adapters.slurm.runner import InvalidNodeStateError, NodeNotFoundError
from slonkd.adapters.slurm.scontrol_reads import ScontrolReads
from slonkd.core.checkpoint import SignalSpec
from slonkd.core.errors import ParseError, TerminalError
from slonkd.core.reasons import sanitise_text
from slonkd.core.slurm_job import JobId
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd.core.slurm_plan import (
    Planner,
    plan_or_missing,
)


@dataclass(slots=True)
class ScontrolBackend(ScontrolReads, CasWrites):
    """SLURM through its command-line clients (22.05 and 24.11; argv prefix for a chroot)."""

    async def set_comment(self, names: Sequence[str], comment: str) -> UpdateResult:
        """Set the comment of ``names`` (sanitised); comments are free for anyone to write."""
        value = sanitise_text(comment)
        with self.runner.counting() as calls:
            for expr in chunk_hostlists(names, self.settings.max_hostlist_chars):
                await self.runner.write(
                    "scontrol", "update", f"nodename={expr}", f"comment={value}"
                )
        return UpdateResult(changed=tuple(NodeName(n) for n in names), calls=calls())

    async def requeue_jobs(self, name: str, *, all_or_none: bool = False) -> RequeueResult:
        """Requeue every requeueable job on node ``name``; report the others.

        ``all_or_none``: when any job there cannot be requeued, requeue none (``held_back``
        names the others), judged on the same read the requeue would act on.
        """
        jobs = await self.jobs_on(name)
        can = [j.job_id for j in jobs if j.requeueable]
        cannot = tuple(j.job_id for j in jobs if not j.requeueable)
        if cannot and all_or_none:
            return RequeueResult(not_requeueable=cannot, held_back=tuple(can))
        if can:
            await self.runner.write("scontrol", "requeue", ",".join(str(j) for j in can))
        return RequeueResult(requeued=tuple(can), not_requeueable=cannot)

    async def reconfigure(self) -> None:
        """``scontrol reconfigure``: slurmctld reads its configuration again (topology)."""
        await self.runner.run("scontrol", "reconfigure")

    async def signal_batch(self, job_id: JobId, signal: SignalSpec) -> None:
        """``scancel --batch --signal``: ``signal`` to the job's batch shell alone, sent once.

        As ``sbatch --signal=B:SIG`` would; a job signal, not a node write.
        """
        await self.runner.write(
            "scancel", "--batch", f"--signal={signal.name}", str(job_id), retry=False
        )

    # -- compare-and-set machinery ---------------------------------------------------------

    async def read_for_update(
        self, names: Sequence[str], *, hold: bool = False
    ) -> dict[str, SlurmNode]:  # CasWrites' read
        """The fresh read a compare-and-set decides on, right before its update.

        One node: ``sinfo -n NODE`` with only the fields the decisions use (slurmctld packs
        that node alone; ``scontrol show node NODE`` makes it pack all of them). If sinfo
        cannot show it exactly, or, before a ``hold``, cannot tell a slonkd-held node's
        ``extra``, it is read again with ``scontrol``. Several nodes: one ``scontrol`` read
        (slurmctld packs the whole table for sinfo too; 1,000 of 5,000: sinfo 55 ms, it 24 ms).
        """
        if len(set(names)) != 1:
            return {n.name: n for n in await self.read_nodes(names)} if names else {}
        args = ["--all", "--Node", "--noheader", f"--nodes={compress(names)}"]
        try:
            text = await self.runner.run("sinfo", *args, f"--Format={CAS_FORMAT}")
            read = parse_cas_read(text, names)
        except (ParseError, TerminalError):
            return {n.name: n for n in await self.read_nodes(names)}
        exact = read.unsure | (read.null_extra if hold else frozenset())
        nodes = dict(read.nodes)
        if exact:
            nodes.update((n.name, n) for n in await self.read_nodes(sorted(exact)))
        return nodes

    async def read_then_apply(
        self, names: Sequence[str], planner: Planner, *, hold: bool = False
    ) -> UpdateResult:
        """The compare-and-set: a primed scontrol (``primed.py``), the read, the plans, writes."""
        primed = PrimedScontrol(self.settings)
        with self.runner.counting() as calls:
            try:
                await primed.start()
                read_at = time.time()  # an operator's write after this and before ours is lost
                nodes = await self.read_for_update(names, hold=hold)
                plans = [plan_or_missing(nodes, n, planner) for n in dict.fromkeys(names)]

                async def first(
                    expr: str, state: str | None, reason: str | None, extra: str | None
                ) -> bool:
                    return await self._update_nodes(expr, state, reason, extra, primed)

                cas = CasApply(self.settings, self.read_nodes, self._update_nodes, first)
                result = await cas.apply(plans, planner)
                return dataclasses.replace(result, read_at=read_at, calls=calls())
            finally:
                await primed.close()

    async def _update_nodes(
        self, expr: str, state: str | None, reason: str | None, extra: str | None,
        primed: PrimedScontrol | None = None,
    ) -> bool:  # fmt: skip
        """One ``scontrol update`` (``primed`` if it can), sent once; False: slurmctld refused some.

        The compare-and-set's update (``cas_apply.SendUpdate``), counted on the runner. Raises
        :class:`NotReachedError` (never reached slurmctld: the compare-and-set may send it
        again after a read) or :class:`~slonkd.core.errors.OutcomeUnknownError` (it may have
        been applied: never sent again).
        """
        args = [f"nodename={expr}"]
        if state is not None:
            args.append(f"state={state}")
        if reason is not None:
            args.append(f"reason={reason}")
        if extra is not None:
            args.append(f"extra={extra}")
        try:
            if primed is not None and primed.can_send(args):
                self.runner.count()
                await primed.update(args)
            else:
                await self.runner.write("scontrol", "update", *args, retry=False)
        except (NodeNotFoundError, InvalidNodeStateError):
            return False
        return True

"""The scontrol/sinfo/squeue backend of the SLURM adapter: reads and compare-and-set writes.

Every write re-reads the nodes it touches right before updating them (``sinfo -n`` with
only the fields the decisions need, see ``parsing_cas.py``; ``scontrol`` for whatever that
cannot show exactly), runs the pure decisions of :mod:`slonkd.core.slurm_plan` on that
fresh read, and sends identical updates together as compressed hostlists
(``hostlists.py``), chunked to ``max_hostlist_chars``. Results (``results.py``) say which
nodes changed and which were skipped, and why. A chunk that slurmctld refuses (a node
vanished, a state changed under us) is retried node by node so one bad
node never hides the others. Parsing lives in ``parsing.py``; subprocesses in ``runner.py``.
Every write goes through the runner's ``write``: sent again only when it never reached
slurmctld, raised as ``OutcomeUnknownError`` when it may have landed (``cas_apply.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import hostlist

from slonkd.adapters.slurm.cas_apply import CasApply
from slonkd.adapters.slurm.hostlists import chunk_hostlists, compress
from slonkd.adapters.slurm.kept_table import TableKeeper
from slonkd.adapters.slurm.parsing import (
    AmbiguousOutput,
    NodeLines,
    ReasonGroup,
    ReportedErrors,
    parse_reason_nodes,
    parse_show_node,
    parse_sinfo_json,
    parse_sinfo_reasons,
    parse_squeue_json,
)
from slonkd.adapters.slurm.parsing_cas import CAS_FORMAT, parse_cas_read
from slonkd.adapters.slurm.parsing_finished import (
    SQUEUE_FINISHED_ARGS,
    FinishedJob,
    parse_finished_jobs,
)
from slonkd.adapters.slurm.parsing_jobs import SQUEUE_JOBS_ARGS, parse_running_jobs
from slonkd.adapters.slurm.parsing_v42 import parse_scontrol_json, parse_squeue_json_v42
from slonkd.adapters.slurm.primed import PrimedScontrol
from slonkd.adapters.slurm.results import RequeueResult, UpdateResult
from slonkd.adapters.slurm.runner import (
    CommandRunner,
    NodeNotFoundError,
    SlurmSettings,
)
from slonkd.core.errors import ParseError, TerminalError, TransientError
from slonkd.core.reasons import Cause, format_reason, sanitise_text
from slonkd.core.slurm_job import SlurmJob
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd.core.slurm_plan import (
    HoldState,
    Planner,
    ReleaseState,
    Skip,
    SkipReason,
    Update,
    plan_hold,
    plan_or_missing,
    plan_reboot,
    plan_release,
)

REASONS_FORMAT = "%N|%T|%H|%U|%E"


@dataclass(slots=True)
class ScontrolBackend:
    """SLURM through its command-line clients (22.05 and 24.11; argv prefix for a chroot)."""

    settings: SlurmSettings = field(default_factory=SlurmSettings)
    runner: CommandRunner = field(init=False)
    json_read: str | None = field(default=None, init=False)
    """Which JSON node read this SLURM has (``scontrol`` or ``sinfo``), learnt on first use."""
    known: NodeLines = field(default_factory=NodeLines, init=False, repr=False)
    """The last full node read's lines (an unchanged line is not parsed again)."""
    kept: TableKeeper = field(default_factory=TableKeeper, init=False, repr=False)
    """The last full node table, served to the passes (``kept_table.py``)."""

    def __post_init__(self) -> None:
        self.runner = CommandRunner(self.settings)

    @property
    def calls(self) -> int:
        """SLURM client invocations so far (reads and writes)."""
        return self.runner.calls

    # -- reads -------------------------------------------------------------------------------

    async def read_nodes(
        self, names: Sequence[str] = (), *, with_jobs: bool = False
    ) -> list[SlurmNode]:
        """All nodes, or those in ``names``, in one read; JSON when the text is ambiguous.

        slurmctld packs its whole node table either way; naming nodes only saves output
        and parsing on this side (1,000 of 5,000: 0.5 MB instead of 2.6 MB). With
        ``with_jobs`` every node also gets ``running_jobs`` from one ``squeue`` call run
        alongside the node read (two calls, read at about the same instant, not atomically).
        """
        if not with_jobs:
            return await self._read_nodes(names)
        reading = asyncio.ensure_future(self._read_nodes(names))
        counting = asyncio.ensure_future(self.running_jobs())
        try:
            nodes, counts = await asyncio.gather(reading, counting)
        except BaseException:
            # The first failure is raised as it is (typed); the other read is stopped.
            for task in (reading, counting):
                task.cancel()
            await asyncio.gather(reading, counting, return_exceptions=True)
            raise
        return [dataclasses.replace(n, running_jobs=counts.get(n.name, 0)) for n in nodes]

    async def running_jobs(self) -> dict[NodeName, int]:
        """Jobs holding resources on each node (nodes without any are absent): one squeue."""
        return parse_running_jobs(await self.runner.run("squeue", *SQUEUE_JOBS_ARGS))

    async def finished_jobs(self) -> list[FinishedJob]:
        """Jobs that ended within slurmctld's ``MinJobAge``: one squeue (parsing_finished.py)."""
        return parse_finished_jobs(await self.runner.run("squeue", *SQUEUE_FINISHED_ARGS))

    def recent_nodes(self, max_age_s: float) -> list[SlurmNode] | None:
        """The whole node table as read at most ``max_age_s`` ago, if slonkd wrote none since.

        The coordinator's poll and its passes send slurmctld the same request (``scontrol -o
        show node``): a pass that starts right after a poll read takes that table instead of
        asking again (issue 21: the passes' own reads kept the poll's next read waiting for
        the read limit). None when there is no such table (a write began after its read).
        """
        return self.kept.recent(max_age_s)

    def kept_read(self) -> tuple[float, list[SlurmNode]] | None:
        """The last full table kept and when its read began: the change poll's first baseline."""
        return self.kept.read()

    def confirm_table(self, read_began: float, at: float) -> None:
        """A probe at ``at`` saw no change since before the read that began at ``read_began``.

        The table kept from that read, or from a later one, is current at ``at``.
        With the libslurm change poll the poll reads only on a change, so its table would
        age past ``poll_s`` and every pass would read the same table again; a probe that
        says "no change" keeps it fresh (a few bytes from slurmctld instead of the table).
        """
        self.kept.confirm(read_began, at)

    async def _table_read(self) -> tuple[float, int, str]:
        """``scontrol -o show node`` with when it began and the writes counted then."""
        began, writes = self.kept.begin()
        return began, writes, await self.runner.run("scontrol", "-o", "show", "node")

    async def _read_nodes(self, names: Sequence[str]) -> list[SlurmNode]:
        args = ["-o", "show", "node"]
        if names:
            args.append(compress(names))
        try:
            if not names:  # a full read reuses the last full read's unchanged lines
                began, writes, text = await self._table_read()
                try:
                    nodes = parse_show_node(text, self.known)
                except AmbiguousOutput:
                    self.kept.drop_older(began)
                    raise
                self.kept.keep(began, writes, nodes)
                return nodes
            nodes = parse_show_node(await self.runner.run("scontrol", *args))
        except NodeNotFoundError:
            if len(set(names)) <= 1:
                return []
            return await self._read_nodes(())  # some named nodes do not exist: read them all
        except AmbiguousOutput:
            return await self.read_nodes_json(names)
        wanted = set(names)
        return [n for n in nodes if n.name in wanted]

    async def diag(self) -> str:
        """slurmctld's statistics (``sdiag``), tried once: the caller polls at its own rate."""
        return await self.runner.run("sdiag", retry=False)

    async def read_reason_nodes(self) -> list[SlurmNode]:
        """Every node that carries a reason, exactly (one ``scontrol -o show node``).

        Costs slurmctld what ``sinfo -R`` costs (node table + partition table RPCs) and
        this side a scan of the lines (38 ms of scontrol at 5,004 nodes against sinfo's 19
        ms), but gives exact node records; used by the coordinator's poll. The whole table
        is parsed (only the lines changed since the last full read) and kept for the pass
        that follows (:meth:`recent_nodes`). A line that does not parse alone leaves only
        the reason lines parsed; a reason with a newline makes the text ambiguous: then the
        JSON read, filtered.
        """
        try:
            began, writes, text = await self._table_read()
            try:
                nodes = parse_show_node(text, self.known)
            except AmbiguousOutput:
                self.kept.drop_older(began)
                return parse_reason_nodes(text)
            self.kept.keep(began, writes, nodes)
            return [n for n in nodes if n.reason]
        except AmbiguousOutput:
            return [n for n in await self.read_nodes_json(()) if n.reason]

    async def read_node(self, name: str) -> SlurmNode | None:
        """One node, or None when slurmctld does not know it."""
        nodes = await self.read_nodes([name])
        return next((n for n in nodes if n.name == name), None)

    async def read_nodes_json(self, names: Sequence[str]) -> list[SlurmNode]:
        """The unambiguous read: ``scontrol show node --json`` (24.11) or ``sinfo --json``.

        22.05's scontrol has no ``--json``; which one works is learnt on first use.
        """
        nodes: list[SlurmNode] | None = None
        try:
            if self.json_read in (None, "scontrol"):
                try:
                    text = await self.runner.run("scontrol", "show", "node", "--json")
                    nodes = parse_scontrol_json(text)
                    self.json_read = "scontrol"
                except (TerminalError, ParseError) as exc:
                    if self.json_read is not None or isinstance(exc, ReportedErrors):
                        raise
                    self.json_read = "sinfo"
            if nodes is None:
                nodes = parse_sinfo_json(await self.runner.run("sinfo", "--json"))
        except ReportedErrors as exc:
            raise TransientError(f"JSON node read: {exc}") from exc
        wanted = set(names)
        return [n for n in nodes if not wanted or n.name in wanted]

    async def read_reasons(self) -> list[ReasonGroup]:
        """Only the nodes that carry a reason, grouped by reason (``sinfo -R``): cheap."""
        text = await self.runner.run("sinfo", "-R", "-h", "-o", REASONS_FORMAT)
        try:
            return parse_sinfo_reasons(text)
        except AmbiguousOutput:
            # A reason with a newline: read every node exactly instead (one group a node,
            # the state in slonkd's spelling rather than sinfo's compact word).
            nodes = await self.read_nodes_json(())
            return [
                ReasonGroup(
                    nodes=(n.name,),
                    state=str(n.state).lower(),
                    reason=n.reason,
                    user=n.reason_user or "",
                    time=n.reason_time,
                )
                for n in nodes
                if n.live_reason
            ]

    async def jobs_on(self, name: str) -> list[SlurmJob]:
        """Jobs holding resources on node ``name`` now, with their requeue-ability."""
        text = await self.runner.run("squeue", "--json", "-w", name)
        try:
            try:
                jobs = parse_squeue_json(text)
            except ReportedErrors:
                raise
            except ParseError:
                jobs = parse_squeue_json_v42(text)  # 24.11: job_state is a list
        except ReportedErrors as exc:
            raise TransientError(f"squeue --json: {exc}") from exc
        return [j for j in jobs if name in j.nodes and j.on_node]

    # -- writes ------------------------------------------------------------------------------

    async def drain(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Drain ``names`` for ``cause``; foreign, SLURM-held and unknown nodes are skipped."""
        return await self._hold(names, HoldState.DRAIN, cause, text)

    async def down(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Mark ``names`` DOWN (running jobs are requeued by SLURM) under slonkd's reason."""
        return await self._hold(names, HoldState.DOWN, cause, text)

    async def fail(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Mark ``names`` FAIL under slonkd's reason."""
        return await self._hold(names, HoldState.FAIL, cause, text)

    async def resume(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """Release ``cause``; resume nodes slonkd holds for no other cause."""
        return await self._release(names, ReleaseState.RESUME, cause)

    async def undrain(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """Like :meth:`resume` but only removes DRAIN (a DOWN node stays DOWN)."""
        return await self._release(names, ReleaseState.UNDRAIN, cause)

    async def request_reboot(
        self, names: Sequence[str], cause: Cause, text: str = ""
    ) -> UpdateResult:
        """``scontrol reboot ASAP`` of the nodes slonkd may hold, once per request.

        First a compare-and-set drain for ``cause`` (next to any other cause slonkd holds the
        node for), then, on a fresh read, the reboot of every node slonkd's reason holds now,
        that reason unchanged (:func:`plan_reboot`). A node whose reboot is pending already is
        skipped (``reboot-pending``); ``changed`` names the nodes a reboot was sent for.
        """
        with self.kept.writing(), self.runner.counting() as calls:
            return await self._reboot(names, cause, text, calls)

    async def _reboot(
        self, names: Sequence[str], cause: Cause, text: str, calls: Callable[[], int]
    ) -> UpdateResult:
        wanted = list(dict.fromkeys(names))
        drained = await self._hold(wanted, HoldState.DRAIN, cause, text)
        refused = {s.node for s in drained.skipped if s.why is not SkipReason.ALREADY_HELD}
        skipped = [s for s in drained.skipped if s.node in refused]
        rest = [n for n in wanted if n not in refused]
        nodes = await self.read_for_update(rest, hold=True) if rest else {}
        plans = [plan_or_missing(nodes, n, plan_reboot) for n in rest]
        skipped += [p for p in plans if isinstance(p, Skip)]
        by_reason: dict[str, list[NodeName]] = {}
        for plan in plans:
            if isinstance(plan, Update):
                by_reason.setdefault(plan.reason or format_reason(cause, text), []).append(
                    plan.node
                )
        changed: list[NodeName] = []
        for reason, todo in by_reason.items():
            for expr in chunk_hostlists(todo, self.settings.max_hostlist_chars):
                await self.runner.write("scontrol", "reboot", "ASAP", f"reason={reason}", expr)
                changed += [NodeName(n) for n in hostlist.expand_hostlist(expr)]
        return UpdateResult(changed=tuple(changed), skipped=tuple(skipped), calls=calls())

    async def set_comment(self, names: Sequence[str], comment: str) -> UpdateResult:
        """Set the comment of ``names`` (sanitised); comments are free for anyone to write."""
        value = sanitise_text(comment)
        with self.kept.writing(), self.runner.counting() as calls:
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
            with self.kept.writing():
                await self.runner.write("scontrol", "requeue", ",".join(str(j) for j in can))
        return RequeueResult(requeued=tuple(can), not_requeueable=cannot)

    # -- compare-and-set machinery ---------------------------------------------------------

    async def read_for_update(
        self, names: Sequence[str], *, hold: bool = False
    ) -> dict[str, SlurmNode]:
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

    async def _hold(
        self, names: Sequence[str], how: HoldState, cause: Cause, text: str
    ) -> UpdateResult:
        def planner(node: SlurmNode) -> Update | Skip:
            return plan_hold(node, how, cause, text)

        return await self._read_then_apply(names, planner, hold=True)

    async def _release(self, names: Sequence[str], how: ReleaseState, cause: Cause) -> UpdateResult:
        def planner(node: SlurmNode) -> Update | Skip:
            return plan_release(node, how, cause)

        return await self._read_then_apply(names, planner)

    async def _read_then_apply(
        self, names: Sequence[str], planner: Planner, *, hold: bool = False
    ) -> UpdateResult:
        """The compare-and-set: a primed scontrol (``primed.py``), the read, the plans, writes."""
        primed = PrimedScontrol(self.settings)
        with self.kept.writing(), self.runner.counting() as calls:
            try:
                await primed.start()
                read_at = time.time()  # an operator's write after this and before ours is lost
                nodes = await self.read_for_update(names, hold=hold)
                plans = [plan_or_missing(nodes, n, planner) for n in dict.fromkeys(names)]
                cas = CasApply(self.runner, self.settings, self.read_nodes)
                result = await cas.apply(plans, planner, primed)
                return dataclasses.replace(result, read_at=read_at, calls=calls())
            finally:
                await primed.close()

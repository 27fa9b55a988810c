"""The coordinator's slurmctld read limiter and the reasons fingerprint."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from slonkd.adapters.slurm import libslurm_child
from slonkd.adapters.slurm.libslurm import NodeTableStamp
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.core.errors import TerminalError, TransientError
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.runtime.coordinating import slurm_watch
from slonkd.runtime.coordinating.node_table import KeptSlurm, NodeTable
from slonkd.runtime.coordinating.pass_read import PassRead
from slonkd.runtime.coordinating.settings import CoordinatorSettings
from slonkd.runtime.coordinating.slurm_watch import (
    ReadLimiter,
    SlurmChange,
    SlurmWatch,
    change_probe,
    fingerprint,
)
from tests.unit.looping import run_for


def _node(name: str, reason: str, state: str = "IDLE+DRAIN") -> SlurmNode:
    base, *flags = state.split("+")
    return SlurmNode(
        name=NodeName(name),
        state=NodeState.from_tokens(base, flags),
        reason=reason,
        reason_time=datetime(2026, 11, 30, tzinfo=UTC),
    )


def test_no_window_holds_more_reads_than_the_limit() -> None:
    """At 2 reads/s no one-second window holds more than 2 reads (on a fake clock)."""
    now = [0.0]
    stamps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        now[0] += seconds

    async def main() -> None:
        limiter = ReadLimiter(2, clock=lambda: now[0], sleep=fake_sleep)
        for _ in range(7):
            await limiter.acquire()
            stamps.append(now[0])

    asyncio.run(main())
    assert stamps[:2] == [0.0, 0.0]  # a poll and the full read it asks for: back to back
    for i, t in enumerate(stamps):
        assert sum(1 for u in stamps if t - 1.0 < u <= t) <= 2, (i, stamps)
    assert stamps[-1] >= 3.0  # 7 reads at 2 a second need at least 3 s


def test_a_fingerprint_changes_with_state_reason_or_nodes_not_with_order() -> None:
    """Same nodes in another order: same; a new reason, state or node: different."""
    a = [_node("n1", "slonkd:health:x"), _node("n3", "Not responding", "DOWN+NOT_RESPONDING")]
    assert fingerprint(a) == fingerprint(list(reversed(a)))
    assert fingerprint(a) != fingerprint([*a, _node("n4", "maint")])
    assert fingerprint(a) != fingerprint([_node("n1", "other"), a[1]])
    assert fingerprint(a) != fingerprint([a[0], _node("n3", "Not responding", "DOWN")])


def test_a_non_positive_rate_is_refused() -> None:
    """A rate of zero would never read: refused at start."""
    with pytest.raises(ValueError, match="positive"):
        ReadLimiter(0)


class _Probe:
    """A change probe answering from a script: a stamp, or an error to raise."""

    path = "fake-libslurm.so"

    def __init__(self, answers: list[object]) -> None:
        self.answers = answers
        self.sent: list[int] = []

    async def changed_since(self, since: int, *, timeout_s: float = 5.0) -> object:
        self.sent.append(since)
        answer = (
            self.answers.pop(0)
            if self.answers
            else NodeTableStamp(changed=False, last_update=since)
        )
        if isinstance(answer, Exception):
            raise answer
        return answer


class _Table(NodeTable):
    """The term's node table, recording each confirmation."""

    def __init__(self) -> None:
        super().__init__()
        self.confirmed: list[tuple[float, float]] = []
        """(read_began, at) of each confirm."""

    def confirm(self, read_began: float, at: float) -> None:
        self.confirmed.append((read_began, at))
        super().confirm(read_began, at)


class _Reads:
    """A SLURM port whose whole reads count their calls (``table``: the term's table)."""

    def __init__(self) -> None:
        self.reads = 0
        self.began: list[float] = []
        """When each read began (monotonic)."""
        self.table = _Table()

    async def read_nodes(
        self, names: Sequence[str] = (), *, with_jobs: bool = False
    ) -> list[SlurmNode]:
        self.began.append(time.monotonic())
        self.reads += 1
        return [_node("n1", f"r{self.reads}")]

    @property
    def confirmed(self) -> list[tuple[float, float]]:
        return self.table.confirmed


async def test_change_poll_reads_only_on_change() -> None:
    """With libslurm, scontrol reads once at start and again only when the table changed.

    The time sent next is the one taken before the read.
    """
    probe = _Probe([
        NodeTableStamp(changed=True, last_update=10),  # first stamp
        NodeTableStamp(changed=False, last_update=10),
        NodeTableStamp(changed=True, last_update=12),
    ])  # fmt: skip
    reads = _Reads()
    changes: asyncio.Queue[SlurmChange] = asyncio.Queue()
    watch = SlurmWatch(
        reads, ReadLimiter(100.0), changes, poll_s=0.7,  # type: ignore[arg-type]
        table=reads.table,
        change_probe=probe, change_poll_s=0.01,  # type: ignore[arg-type]
    )  # fmt: skip
    await run_for(watch.run, 0.3)
    assert reads.reads == 2
    assert changes.qsize() == 1
    assert probe.sent[:3] == [0, 10, 10]
    assert set(probe.sent[3:]) == {12}
    assert watch.backend == "libslurm"
    # each "no change" keeps the table of the read before it fresh, from when it was asked
    first, second = reads.began
    assert reads.confirmed[0][0] <= first  # taken as the read was asked
    assert len({b for b, _ in reads.confirmed[1:]}) == 1
    assert first < reads.confirmed[-1][0] <= second
    assert all(at > b for b, at in reads.confirmed)
    assert len(reads.confirmed) == len(probe.sent) - 2  # all but the first stamp and the change


async def test_the_probe_loads_in_a_thread_while_scontrol_polls() -> None:
    """A slow loader does not hold the poll: scontrol reads meanwhile, then the change poll."""
    probe = _Probe([])
    reads = _Reads()

    def slow_loader() -> object:
        time.sleep(0.2)
        return probe

    def watch() -> SlurmWatch:
        return SlurmWatch(
            reads, ReadLimiter(100.0), asyncio.Queue(), poll_s=0.02,  # type: ignore[arg-type]
            table=reads.table,
            probe_loader=slow_loader, change_poll_s=0.01,  # type: ignore[arg-type]
        )  # fmt: skip

    early = watch()
    await run_for(early.run, 0.15)
    assert early.backend == "scontrol"
    assert reads.reads >= 3
    later = watch()
    await run_for(later.run, 0.5)
    assert later.backend == "libslurm"
    assert probe.sent


async def test_a_probe_that_could_not_load_yet_is_loaded_again_later() -> None:
    """A load that failed for now (a child slow to start) is tried again: the change poll follows.

    Before, the first load's failure held for the life of the process: the scontrol poll
    alone, whatever the library could do a minute later.
    """
    probe = _Probe([])
    reads = _Reads()
    tries: list[float] = []

    def loader() -> object:
        tries.append(time.monotonic())
        if len(tries) == 1:
            raise TransientError("libslurm child: not ready in 10 s")
        return probe

    watch = SlurmWatch(
        reads, ReadLimiter(100.0), asyncio.Queue(), poll_s=0.02,  # type: ignore[arg-type]
        table=reads.table,
        probe_loader=loader, change_poll_s=0.01, reload_s=0.1,  # type: ignore[arg-type]
    )  # fmt: skip
    await run_for(watch.run, 0.06)
    assert watch.backend == "scontrol"
    assert "not ready" in watch.why
    await run_for(watch.run, 0.4)
    assert len(tries) == 2
    assert tries[1] - tries[0] >= 0.1  # not at once: after reload_s
    assert watch.backend == "libslurm"
    assert watch.why == ""
    assert probe.sent


async def test_change_poll_falls_back_to_scontrol_for_good_on_terminal() -> None:
    """A library that cannot talk to this slurmctld is dropped: the scontrol poll as before."""
    probe = _Probe([TerminalError("protocol version")])
    reads = _Reads()
    watch = SlurmWatch(
        reads, ReadLimiter(100.0), asyncio.Queue(), poll_s=0.05,  # type: ignore[arg-type]
        table=reads.table,
        change_probe=probe,  # type: ignore[arg-type]
    )  # fmt: skip
    await run_for(watch.run, 0.3)
    assert watch.backend == "scontrol"
    assert len(probe.sent) == 1
    assert reads.reads >= 4


def test_change_probe_is_off_by_setting_or_argv_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """No libslurm when off or behind an argv prefix; else loaded once, with scontrol's conf.

    An argv prefix runs another release's clients, which the installed library may not speak.
    """
    loaded: list[str | None] = []

    def fake_load(path: str | None = None, *, conf: str | None = None) -> object:
        loaded.append(conf)
        return "lib"

    monkeypatch.setattr(libslurm_child, "load", fake_load)
    monkeypatch.setattr(slurm_watch, "_loaded", {})

    def settings(slurm: SlurmSettings, *, on: bool = True) -> CoordinatorSettings:
        return CoordinatorSettings(namespace="ns", identity="me", slurm=slurm, change_poll=on)

    conf = SlurmSettings(env={"SLURM_CONF": "/etc/x/slurm.conf"})
    assert change_probe(settings(conf, on=False)) is None
    assert change_probe(settings(SlurmSettings(argv_prefix=("chroot", "/r")))) is None
    loader = change_probe(settings(conf))
    assert loader is not None
    assert loaded == []  # nothing loaded until the watch runs the loader (in a thread)
    assert loader() == "lib"  # type: ignore[comparison-overlap]
    assert loader() == "lib"  # type: ignore[comparison-overlap]
    assert loaded == ["/etc/x/slurm.conf"]  # once per process


class _Kept(_Reads):
    """A port whose table kept a whole read (the term's first pass's)."""

    def __init__(self, nodes: list[SlurmNode]) -> None:
        super().__init__()
        self.table.keep(*self.table.begin(), nodes)
        assert self.table.table is not None
        self.kept_began = self.table.table.began


@pytest.mark.parametrize("change_poll", [False, True])
async def test_the_first_baseline_is_the_kept_table_so_the_terms_first_second_keeps_its_reads(
    change_poll: bool,
) -> None:
    """No read of the poll's own at start: what differs from the pass's table is new at once.

    The old poll read a baseline of its own as the term began, beside the pass's read, so
    a failure in that second waited for the read limit (issue 21: the first event, ~1 s).
    """
    reads = _Kept([_node("n1", "r0"), _node("n2", "", state="IDLE")])
    probe = _Probe([NodeTableStamp(changed=True, last_update=10)]) if change_poll else None
    changes: asyncio.Queue[SlurmChange] = asyncio.Queue()
    seen = asyncio.Event()

    watch = SlurmWatch(
        reads, ReadLimiter(100.0), changes, wake=seen, poll_s=0.1,  # type: ignore[arg-type]
        table=reads.table,
        change_probe=probe, change_poll_s=0.1,  # type: ignore[arg-type]
    )  # fmt: skip
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.sleep(0.05)
        assert reads.reads == 0  # the kept table is the baseline
        assert watch.read_began == reads.kept_began
        await asyncio.wait_for(seen.wait(), 5)
        assert [n.reason for n in changes.get_nowait().nodes] == [
            "r1"
        ]  # r0 -> r1, seen by the first read
        if probe is not None:
            assert probe.sent[0] == 0  # "changed": its read gives the time to ask from
            await asyncio.sleep(0.3)
            assert reads.reads == 1
            assert set(probe.sent[1:]) == {10}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_pass_with_an_aged_table_asks_changed_since_instead_of_reading_it_again() -> None:
    """Issue 38: a pass that found the kept table past ``poll_s`` read all of it again.

    At 5,000 nodes a pass decides for half a second without yielding, so the poll's "no
    change" came late and the next pass read the whole table (a pass in ten at rest). Now
    the pass asks the change poll's question once: "no change" serves the kept table, a
    change (or no change poll) reads as before.
    """
    probe = _Probe([NodeTableStamp(changed=True, last_update=10)])  # the first stamp
    reads = _Reads()
    slurm = KeptSlurm(reads, reads.table)  # type: ignore[arg-type]  # whole reads kept
    watch = SlurmWatch(
        slurm, ReadLimiter(100.0), asyncio.Queue(), poll_s=0.7,
        table=reads.table,
        change_probe=probe, change_poll_s=60.0,  # type: ignore[arg-type]
    )  # fmt: skip
    await run_for(watch.run, 0.1)  # the first stamp and read, then the poll sleeps
    assert reads.reads == 1
    pass_read = PassRead(slurm, ReadLimiter(100.0), reads.table, max_age_s=0.7)

    def age() -> None:
        kept = reads.table.table
        assert kept is not None
        reads.table.table = kept._replace(current_at=time.monotonic() - 5.0)

    age()
    assert not (await pass_read.table()).reused  # without the question: a whole read
    assert reads.reads == 2
    pass_read.confirm = watch.confirm_now
    age()
    took = await pass_read.table()
    assert (took.reused, reads.reads, probe.sent[-1]) == (True, 2, 10)
    probe.answers.append(NodeTableStamp(changed=True, last_update=12))
    age()
    assert not (await pass_read.table()).reused  # changed: read it
    assert reads.reads == 3
    probe.answers.append(TransientError("slurmctld unreachable"))
    age()
    assert not (await pass_read.table()).reused  # no answer: read it
    assert reads.reads == 4

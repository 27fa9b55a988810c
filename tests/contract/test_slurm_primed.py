"""The primed scontrol of a compare-and-set write (``primed.py``), on real SLURM 22.05 and 24.11.

slonkd reads a node, decides, then writes; SLURM has no compare-and-set, so an operator's
drain landing between the read and the write is overwritten (the soak's t = 2,476 s, issue
18). The write's scontrol is started before the read and waits on its stdin: the update is
one line, sent as soon as the read is parsed. These tests pin what that process does on both
releases: it writes what the argv path writes, refuses as the argv path refuses, changes
nothing when closed unused, and only safe text goes through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from slonkd.adapters.slurm import primed as primed_module
from slonkd.adapters.slurm.primed import PrimedScontrol
from slonkd.adapters.slurm.runner import NodeNotFoundError
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import Cause
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests.contract.conftest import settings_for

pytestmark = pytest.mark.slurm

POD = Cause.parse("pod-terminating")


@pytest.fixture
def one(cluster_factory: Callable[..., SlurmCluster]) -> SlurmCluster:
    """One slurmd node n1 of the release under test."""
    return cluster_factory(SlurmLayout(nodes=("n1",)))


def _show(cluster: SlurmCluster) -> str:
    return cluster.run("scontrol", "-o", "show", "node", "n1").stdout


async def test_a_primed_update_writes_and_a_refused_one_raises_as_the_runner_would(
    one: SlurmCluster,
) -> None:
    """Its one line drains n1 with the reason verbatim; an unknown node is NodeNotFoundError."""
    settings = settings_for(one)
    primed = PrimedScontrol(settings)
    try:
        await primed.start()
        args = ["nodename=n1", "state=drain", "reason=slonkd:pod-terminating pod is terminating"]
        assert primed.can_send(args)
        await primed.update(args)
        assert not primed.can_send(args)  # one update per process
    finally:
        await primed.close()
    shown = _show(one)
    assert "Reason=slonkd:pod-terminating pod is terminating [" in shown, shown
    assert "DRAIN" in shown, shown
    refused = PrimedScontrol(settings)
    try:
        await refused.start()
        with pytest.raises(NodeNotFoundError):
            await refused.update(["nodename=nosuchnode", "state=resume"])
    finally:
        await refused.close()


async def test_closed_without_an_update_it_changes_nothing(one: SlurmCluster) -> None:
    """A read that decided to skip closes the process: the node is as it was, nothing lingers."""
    before = _show(one)
    primed = PrimedScontrol(settings_for(one))
    await primed.start()
    proc = primed._proc  # the process it must not leave behind
    assert proc is not None
    await primed.close()
    assert proc.returncode == 0
    assert primed.sent == 0
    after = _show(one)
    assert "State=IDLE " in before, before
    assert "State=IDLE " in after, after
    assert "Reason=" not in after, after


async def test_the_backends_hold_and_release_write_through_it_and_unsafe_text_does_not(
    one: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """drain() and resume() write through the primed process; unsafe text goes through argv.

    A reason outside its character set (a quote) reaches SLURM all the same.
    """
    sent: list[list[str]] = []
    real = primed_module.PrimedScontrol.update

    async def spy(self: PrimedScontrol, args: Sequence[str]) -> None:
        sent.append(list(args))
        await real(self, args)

    monkeypatch.setattr(primed_module.PrimedScontrol, "update", spy)
    backend = ScontrolBackend(settings_for(one))
    drained = await backend.drain(["n1"], POD, "pod is terminating")
    assert drained.changed == ("n1",), drained
    assert [a[:2] for a in sent] == [["nodename=n1", "state=drain"]]
    resumed = await backend.resume(["n1"], POD)
    assert resumed.changed == ("n1",), resumed
    assert len(sent) == 2
    assert "Reason=" not in _show(one) or "DRAIN" not in _show(one)
    quoted = await backend.drain(["n1"], POD, 'it\'s "terminating"')
    assert quoted.changed == ("n1",), quoted
    assert len(sent) == 2  # not through the primed process
    assert "Reason=slonkd:pod-terminating it's 'terminating' [" in _show(one), _show(one)


def _time_reads(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each compare-and-set read answered (``perf_counter``), the real read unchanged."""
    read_done: list[float] = []
    real_read = ScontrolBackend.read_for_update

    async def timed_read(self: ScontrolBackend, *args: Any, **kw: Any) -> Any:
        got = await real_read(self, *args, **kw)
        read_done.append(time.perf_counter())
        return got

    monkeypatch.setattr(ScontrolBackend, "read_for_update", timed_read)
    return read_done


async def test_the_primed_write_follows_the_read_sooner_than_a_new_process(
    one: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window from the read's answer to the write's answer, primed against argv.

    Measured here for the note; asserted only as "no slower in the median" (2 cores, shared).
    """
    windows: dict[bool, list[float]] = {True: [], False: []}
    read_done = _time_reads(monkeypatch)
    for round_ in range(10):
        for primed in (True, False):
            backend = ScontrolBackend(settings_for(one, primed_writes=primed))
            result = await backend.drain(["n1"], POD, f"round {round_}")
            windows[primed].append(time.perf_counter() - read_done[-1])
            assert result.changed == ("n1",), result
            assert (await backend.resume(["n1"], POD)).changed == ("n1",)
    primed_ms = sorted(w * 1000 for w in windows[True])
    argv_ms = sorted(w * 1000 for w in windows[False])
    print(f"\n[primed] read to written, median ms: primed {primed_ms[5]:.1f} argv {argv_ms[5]:.1f}")
    assert primed_ms[5] <= argv_ms[5], (primed_ms, argv_ms)


SLOW_START_S = 0.5
SLOW_INTERACTIVE = 'for a; do last=$a; done; [ "$last" = scontrol ] && sleep {s}; exec "$@"'
"""An argv prefix that delays only the interactive scontrol (its last word is ``scontrol``)."""


async def test_a_slow_starting_primed_scontrol_is_waited_for_before_the_read(
    one: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read is taken when the primed process is ready, not while it still starts.

    A primed scontrol that took SLOW_START_S to start (a loaded node: the CI run of stop 46
    found the primed median slower than argv's) used to widen the window from the read's
    answer to the write's answer by that much; waiting for its prompt before the read keeps the
    window to the time to parse and send a line.
    """
    base = settings_for(one)
    slow = ["sh", "-c", SLOW_INTERACTIVE.format(s=SLOW_START_S), "sh", *base.argv_prefix]
    settings = settings_for(one, argv_prefix=tuple(slow))
    read_done = _time_reads(monkeypatch)
    backend = ScontrolBackend(settings)
    started = time.perf_counter()
    result = await backend.drain(["n1"], POD, "slow start")
    window = time.perf_counter() - read_done[-1]
    assert result.changed == ("n1",), result
    assert read_done[-1] - started >= SLOW_START_S  # the read waited for the prompt
    assert window < SLOW_START_S / 2, window
    assert "Reason=slonkd:pod-terminating slow start [" in _show(one), _show(one)

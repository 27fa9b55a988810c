"""The reservation ledger's rules (:mod:`slonkd.core.reservations`), clock in hand.

Which reserved nodes an admission counts as out, given when its read began: in flight for
every read; once written, for reads begun before the write, and for later reads until one
shows what the task did or ``settle_s`` passed. Neighbours: ``test_budget_gate.py`` (the
pass, the fast path and the rollout interleaved through the gate).
"""

from __future__ import annotations

import pytest

from slonkd.core.reservations import Ledger, Reservation, shows


def _never(_r: Reservation) -> bool:
    return False


def _always(_r: Reservation) -> bool:
    return True


def test_a_reservation_in_flight_counts_for_every_read() -> None:
    """Between the admission and the write's answer, every read counts it as out."""
    ledger = Ledger()
    ledger.reserve("rollout", {"w-0": "w"})
    assert ledger.held(read_at=100.0, now=100.0, shown=_always) == {"w": {"w-0"}}


def test_a_written_reservation_counts_for_reads_begun_before_the_write() -> None:
    """Shown to a later read, it still counts for an older one (the fast path's table)."""
    ledger = Ledger()
    ledger.written(ledger.reserve("rollout", {"w-0": "w"}), now=10.0)
    assert ledger.held(read_at=11.0, now=11.0, shown=_always) == {}
    assert ledger.held(read_at=9.0, now=12.0, shown=_never) == {"w": {"w-0"}}


def test_a_write_no_read_shows_counts_until_it_settles() -> None:
    """A late watch event: counted; past ``settle_s`` the node is taken as back (or never out)."""
    ledger = Ledger(settle_s=30.0)
    ledger.written(ledger.reserve("fast-path", {"w-5": "w"}), now=10.0)
    assert ledger.held(read_at=11.0, now=11.0, shown=_never) == {"w": {"w-5"}}
    assert ledger.held(read_at=41.0, now=41.0, shown=_never) == {}
    assert ledger.held(read_at=9.0, now=41.0, shown=_never) == {"w": {"w-5"}}


def test_what_a_read_showed_stays_shown_and_old_writes_are_forgotten() -> None:
    """Once shown, later reads need it no more; ``keep_s`` after the write it is dropped."""
    ledger = Ledger(settle_s=30.0, keep_s=60.0)
    ledger.written(ledger.reserve("pass", {"w-1": "w"}), now=10.0)
    ledger.held(read_at=12.0, now=12.0, shown=_always)
    assert ledger.held(read_at=13.0, now=13.0, shown=_never) == {}
    assert len(ledger) == 1
    ledger.held(read_at=80.0, now=80.0, shown=_never)
    assert len(ledger) == 0


def test_what_was_not_written_is_released() -> None:
    """A refused drain or a dry run holds nothing."""
    ledger = Ledger()
    ticket = ledger.reserve("rollout", {"w-0": "w", "w-1": "w"})
    ledger.written(ticket, now=5.0, nodes=["w-1"])  # w-0's drain was refused
    assert [r.node for r in ledger.reservations()] == ["w-1"]
    ledger.release(ledger.reserve("pass", {"w-2": "w"}))  # a dry run
    assert [r.node for r in ledger.reservations()] == ["w-1"]


def test_a_node_in_flight_keeps_its_first_reservation() -> None:
    """A second task never takes the same node as new room, nor ends the first's hold."""
    ledger = Ledger()
    first = ledger.reserve("rollout", {"w-0": "w"})
    second = ledger.reserve("pass", {"w-0": "w"})
    ledger.release(second)
    assert [(r.node, r.ticket) for r in ledger.reservations()] == [("w-0", first)]


def test_a_replaced_pod_shows_the_task_done() -> None:
    """The cordon took out the pod it reserved; a new pod on another K8s node is in service."""
    ledger = Ledger()
    ledger.reserve("pass", {"w-0": "w"}, pods={"w-0": "u0"})
    (r,) = ledger.reservations()
    assert not shows(r, out=False, pod="u0")
    assert not shows(r, out=False, pod=None)  # gone, not replaced yet
    assert shows(r, out=False, pod="u0b")
    assert shows(r, out=True, pod="u0")


def test_settle_must_not_exceed_keep() -> None:
    """A reservation is not forgotten while it may still count."""
    with pytest.raises(ValueError, match="settle_s"):
        Ledger(settle_s=120.0, keep_s=60.0)

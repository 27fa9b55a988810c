"""What a new term starts before its claim (reads) and only after it (writes); fakes only.

Issue 37 item 8d. A term writes its token into the state (``Memory.claim``) before it acts,
so an older term that has not yet noticed its end is refused from then on. The term's other
writers (slurmctld's triggers, topology, rollouts, the credential reaper, the announcement of
the token on the bus) started before the claim had completed: they could act for a term not
yet on record. Only reads may run beside the claim: the informers' lists and the SLURM
read-ahead. :func:`~slonkd.runtime.coordinating.leading.lead` runs over the fakes of
``test_coordinator_pass``; the informers are listed at once, the claim waits for the test.
Neighbours: ``test_coordinator_term_end`` (the claim's outcomes), ``test_coordinator_first_pass``
(the lists and the read-ahead).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from slonkd.core.coordinator_state import CoordinatorState
from slonkd.runtime.coordinating.leading import lead
from tests.unit.coordinator_fakes import (
    TOKEN,
    FakeNodeWriter,
    FakeSlurm,
    FakeStore,
    coordinator_with,
    kube_node,
    listed_at_once,
    slurm_node,
)


class _HeldClaim(FakeStore):
    """The state: its first write (the term's claim) is answered when ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.claimed = False

    async def update(
        self, token: int, change: Callable[[CoordinatorState], CoordinatorState]
    ) -> CoordinatorState:
        """The claim waits for ``release``; later writes are applied at once."""
        if not self.claimed:
            self.entered.set()
            await self.release.wait()
            self.claimed = True
        return await super().update(token, change)


WRITERS = ("announce", "reaper", "rollout", "topology", "triggers")


class _Began:
    """The term's writers that have begun; ``all`` is set once every one of ``WRITERS`` has."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.all = asyncio.Event()

    def note(self, name: str) -> None:
        """``name`` began."""
        self.names.append(name)
        if set(self.names) == set(WRITERS):
            self.all.set()


class _Writer:
    """A task of the term that writes: notes when it began (``run`` or the announcement)."""

    def __init__(self, name: str, began: _Began) -> None:
        self.name = name
        self.began = began

    async def run(self) -> None:
        """Began; runs until the term ends."""
        self.began.note(self.name)
        await asyncio.Event().wait()

    async def announce_when_connected(self) -> None:
        """Began (the announcement of the term's token on the bus)."""
        self.began.note(self.name)


async def test_the_terms_writers_start_only_after_its_claim() -> None:
    """Claim held: the lists ran, no writer began; claim answered: every writer begins."""
    store = _HeldClaim()
    slurm = FakeSlurm([slurm_node(0)], failing=set())
    c = coordinator_with(
        slurm, FakeNodeWriter(), [kube_node(0)], store=store, sdiag_s=0
    )  # no sdiag run
    began = _Began()
    c.nodes.run = listed_at_once(c.nodes)  # type: ignore[method-assign]
    c.pods.run = listed_at_once(c.pods)  # type: ignore[method-assign]
    c.triggers = _Writer("triggers", began)  # type: ignore[assignment]
    c.topology = _Writer("topology", began)  # type: ignore[assignment]
    c.rollout = _Writer("rollout", began)  # type: ignore[assignment]
    c.reaper = _Writer("reaper", began)  # type: ignore[assignment]
    c.commands = _Writer("announce", began)  # type: ignore[assignment]
    term = asyncio.create_task(lead(c, TOKEN))
    try:
        await asyncio.wait_for(store.entered.wait(), timeout=5)
        await asyncio.sleep(0.1)  # whatever the term starts beside the claim has started
        assert c.nodes.synced.is_set()  # the reads ran beside the claim
        assert c.pods.synced.is_set()
        assert began.names == [], f"began before the claim completed: {began.names}"
        store.release.set()
        await asyncio.wait_for(began.all.wait(), timeout=5)
        assert store.claimed
        assert sorted(began.names) == list(WRITERS)  # each once
    finally:
        term.cancel()
        await asyncio.gather(term, return_exceptions=True)

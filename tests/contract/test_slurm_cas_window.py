"""The compare-and-set window of a bulk release, against real SLURM 22.05 and 24.11.

A bulk resume reads the nodes, decides, then writes chunk after chunk. An operator's drain
that lands on a node after the read but before its chunk is written must survive: each chunk
is read again right before it is written, and only nodes whose reason is still slonkd's in
that read are resumed (issue 15 item 8). What remains is the time between one chunk's read
and its write (one slurmctld round trip), measured below.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.reasons import Cause
from slonkd.core.slurm_plan import SkipReason
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from tests.contract.conftest import settings_for

pytestmark = pytest.mark.slurm

K8S = Cause.parse("k8s-cordoned")


@pytest.fixture
def many(cluster_factory: Callable[..., SlurmCluster]) -> SlurmCluster:
    """One slurmd node and 120 declared nodes without slurmd."""
    return cluster_factory(SlurmLayout(nodes=("n1",), extra_nodes=120))


class Wrapped:
    """The real runner behind a test's wrapper; the backend counts its calls through it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        """What a wrapper does not intercept is the real runner's (``write``, ``argv``...)."""
        return getattr(self.inner, name)

    @property
    def calls(self) -> int:
        """The runner's count of scontrol calls."""
        return int(self.inner.calls)

    @calls.setter
    def calls(self, value: int) -> None:
        self.inner.calls = value


async def test_operator_drain_between_chunks_survives_a_bulk_resume(many: SlurmCluster) -> None:
    """An operator drains a node while slonkd's resume is between chunks: it stays drained."""
    names = many.extra_node_names[::2]  # x1,x3,...: no hostlist range collapses them
    # every write through the runner, where the operator is injected (no primed scontrol)
    backend = ScontrolBackend(settings_for(many, max_hostlist_chars=64, primed_writes=False))
    drained = await backend.drain(names, K8S, "cordoned")
    assert set(drained.changed) == set(names)
    victim = names[-1]  # written in the last chunk
    writes: list[float] = []

    class OperatorBetweenChunks(Wrapped):
        """The real runner; after slonkd's first write, an operator drains ``victim``."""

        async def run(self, *argv: str, **kw: Any) -> str:
            try:  # 22.05 answers "Invalid node state" for resumes it carried out
                return str(await self.inner.run(*argv, **kw))
            finally:
                self._after(argv)

        async def write(self, *argv: str, **kw: Any) -> str:
            """Writes go through ``write`` (never sent again blind), reads through ``run``."""
            try:
                return str(await self.inner.write(*argv, **kw))
            finally:
                self._after(argv)

        def _after(self, argv: tuple[str, ...]) -> None:
            if argv[:2] == ("scontrol", "update"):
                if not writes:
                    many.run(
                        "scontrol",
                        "update",
                        f"nodename={victim}",
                        "state=drain",
                        "reason=bad PSU",
                    )
                writes.append(time.monotonic())

    backend.runner = OperatorBetweenChunks(backend.runner)  # type: ignore[assignment]
    resumed = await backend.resume(names, K8S)
    assert len(writes) >= 3, (resumed, backend.calls)  # several chunks: a window to land in
    assert victim not in resumed.changed
    assert resumed.skipped_for(SkipReason.FOREIGN_REASON) == {victim}
    shown = many.run("scontrol", "show", "node", victim).stdout
    assert "Reason=bad PSU" in shown
    assert "DRAIN" in shown
    assert set(resumed.changed) == set(names) - {victim}


async def test_an_operator_drain_inside_one_nodes_window_is_overwritten_and_placed(
    many: SlurmCluster,
) -> None:
    """SLURM has no conditional update: what remains of the race, and how it is placed.

    An operator drains the node after slonkd's compare-and-set read and before its update:
    slurmctld takes slonkd's update over it (a documented limit, docs/architecture.md). The
    result's ``read_at`` (the agent logs it with ``written_at``) lies before the operator's
    write returned, which is how the soak's checker tells this race from slonkd changing a
    mark it had read (``bench/soak_check.py``). The day SLURM or slonkd closes the window,
    this test fails and the docs must change with it.
    """
    victim = many.extra_node_names[0]
    backend = ScontrolBackend(settings_for(many))  # primed writes: the agent's path
    operator: list[float] = []

    class OperatorAfterTheRead(Wrapped):
        """The real runner; right after slonkd's compare-and-set read, an operator drains."""

        async def run(self, *argv: str, **kw: Any) -> str:
            out = str(await self.inner.run(*argv, **kw))
            if argv[0] == "sinfo" and not operator:
                operator.append(time.time())
                many.run("scontrol", "update", f"nodename={victim}", "state=drain",
                         "reason=bad PSU")  # fmt: skip
                operator.append(time.time())
            return out

    backend.runner = OperatorAfterTheRead(backend.runner)  # type: ignore[assignment]
    drained = await backend.drain([victim], K8S, "cordoned")
    written = time.time()
    assert len(operator) == 2, "the compare-and-set read did not go through sinfo"
    assert drained.changed == (victim,)
    shown = many.run("scontrol", "show", "node", victim).stdout
    assert "Reason=slonkd:k8s-cordoned" in shown, shown  # the operator's reason is gone
    assert drained.read_at is not None
    assert drained.read_at <= operator[1]  # read before the operator's write returned
    assert written >= operator[0]  # and written after it began: placed in the window

"""Leader election on a real Lease: one leader, failover with a higher token, pause safety."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.kube.lease import LeaderElector, LeaseSettings
from slonkd.adapters.kube.state import FencedError, StateStore
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.coordinator_state import Attempts, CoordinatorState
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import free_ports, wait_for
from tests.contract.kube_helpers import until

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[2]
DURATION_S, RETRY_S = 3.0, 0.5


class Candidate:
    """An elector process and the JSON lines it printed so far."""

    def __init__(self, kube: KubeCluster, namespace: str, identity: str) -> None:
        self.identity = identity
        self.lines: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.contract.elector_main",
                f"--kubeconfig={kube.kubeconfig}",
                f"--namespace={namespace}",
                "--lease=coordinator",
                f"--identity={identity}",
                "--state=slonkd-state",
                f"--duration={DURATION_S}",
                f"--retry={RETRY_S}",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def events(self, name: str) -> list[dict[str, Any]]:
        """The lines of one event kind, in order."""
        return [e for e in list(self.lines) if e["event"] == name]

    def wait_printed(self, name: str) -> None:
        """Wait up to 30 s for this candidate's first line of event kind ``name``."""
        wait_for(f"{self.identity}: {name}", lambda: bool(self.events(name)), timeout_s=30)

    def stop(self) -> None:
        """SIGKILL (works on a stopped process too) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._reader.join(timeout=5)


@pytest.fixture
def candidates(kube: KubeCluster, namespace: str) -> Iterator[Callable[[str], Candidate]]:
    """Start elector processes; all are killed after the test."""
    started: list[Candidate] = []

    def start(identity: str) -> Candidate:
        cand = Candidate(kube, namespace, identity)
        started.append(cand)
        return cand

    yield start
    for cand in started:
        cand.stop()


def _pair(
    candidates: Callable[[str], Candidate], leader_printed: str
) -> tuple[Candidate, Candidate]:
    """Candidate a, once it printed ``leader_printed`` (it leads), and b standing by."""
    a = candidates("a")
    a.wait_printed(leader_printed)
    b = candidates("b")
    b.wait_printed("started")
    return a, b


def _lease(kube: KubeCluster, ns: str) -> dict[str, Any]:
    lease: dict[str, Any] = kube.api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/coordinator"
    )
    return lease


def test_two_electors_one_leader_and_failover_with_higher_token(
    kube: KubeCluster, namespace: str, candidates: Callable[[str], Candidate]
) -> None:
    """Of two candidates one leads; SIGKILL it and the other leads in time with a higher token."""
    a, b = _pair(candidates, "leading")
    time.sleep(DURATION_S + 1)
    assert not b.events("leading"), "two leaders at once"
    assert _lease(kube, namespace)["spec"]["holderIdentity"] == "a"
    token_a = a.events("leading")[0]["token"]
    killed = time.monotonic()
    a.stop()
    b.wait_printed("leading")
    took = b.events("leading")[0]["t"] - killed
    assert took <= DURATION_S + 2 * RETRY_S * 1.2 + 1.0
    assert b.events("leading")[0]["token"] > token_a
    lease = _lease(kube, namespace)["spec"]
    assert lease["holderIdentity"] == "b"
    assert lease["leaseTransitions"] == b.events("leading")[0]["token"]


def test_a_deleted_lease_keeps_the_fencing_token_above_the_state(
    kube: KubeCluster, namespace: str, candidates: Callable[[str], Candidate]
) -> None:
    """Delete the Lease under a running pair: the next term's token exceeds the state's.

    A failover first raises the token (and the state's) above 0; a recreated Lease must not
    restart at 0, or every state write is refused as if from an old leader, forever.
    """
    a, b = _pair(candidates, "wrote")
    a.stop()
    b.wait_printed("wrote")
    before = b.events("wrote")[-1]["token"]
    assert before >= 1
    c = candidates("c")  # the pair again: b leads, c stands by
    c.wait_printed("started")
    kube.api.request(
        "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/coordinator"
    )
    deleted = time.monotonic()

    def new_terms() -> list[int]:
        return [e["token"] for x in (b, c) for e in x.events("leading") if e["t"] > deleted]

    wait_for("a term after the Lease was deleted", lambda: bool(new_terms()), timeout_s=20)
    after = new_terms()[0]
    assert after > before
    wait_for(
        "a write of that term",
        lambda: any(e["token"] == after for x in (b, c) for e in x.events("wrote")),
        timeout_s=10,
    )
    assert _lease(kube, namespace)["spec"]["leaseTransitions"] >= after
    time.sleep(2)  # the old term (if another took the new one) has ended by now
    recent = time.monotonic() - 1.0
    assert [e for x in (b, c) for e in x.events("wrote") if e["t"] > recent]
    assert not [e for x in (b, c) for e in x.events("fenced") if e["t"] > recent]


def test_leader_paused_past_its_lease_is_invalid_before_any_write(
    kube: KubeCluster, namespace: str, candidates: Callable[[str], Candidate]
) -> None:
    """A leader SIGSTOPped past its lease wakes up invalid: no write after the pause."""
    a, b = _pair(candidates, "wrote")
    time.sleep(1.0)
    stopped = time.monotonic()
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        b.wait_printed("wrote")
        time.sleep(0.5)
        resumed = time.monotonic()
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    wait_for(
        "a notices",
        lambda: any(e["t"] > resumed for e in a.lines if e["event"] in ("check", "stopped")),
        timeout_s=10,
    )
    time.sleep(1.0)
    # A write in flight when the signal came may finish after it (its "sent" tells); every
    # decision taken after the pause must be "invalid" or "stopped".
    decided = [e for e in list(a.lines) if e["t"] > resumed and e["event"] in ("check", "stopped")]
    assert decided, "a decided nothing after SIGCONT"
    assert decided[0]["event"] == "stopped" or decided[0]["valid"] is False
    assert not [e for e in a.lines if e["event"] == "check" and e["valid"] and e["t"] > stopped]
    assert not [e for e in a.lines if e["event"] == "wrote" and e["sent"] > stopped]
    state = CoordinatorState.from_data(
        kube.api.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/slonkd-state")["data"]
    )
    assert state.fencing_token == b.events("leading")[0]["token"]


async def test_state_written_by_one_coordinator_is_read_by_the_next_and_fenced(
    kube_transport: KubeTransport, namespace: str
) -> None:
    """State survives a change of writer; a writer with an older token is refused."""
    first = StateStore(kube_transport, namespace, "slonkd-state")
    await first.update(
        3,
        lambda s: CoordinatorState(
            nodes_out=frozenset({"gpu-1", "gpu-2"}),
            breaker_open=True,
            breaker_reason="mass NotReady",
            remediation={"gpu-1": Attempts(attempts=2, last_at=5.0)},
        ),
    )
    second = StateStore(kube_transport, namespace, "slonkd-state")
    state = await second.load()
    assert state.nodes_out == {"gpu-1", "gpu-2"}
    assert state.breaker_open
    assert state.breaker_reason == "mass NotReady"
    assert state.remediation_attempts == {"gpu-1": 2}
    assert state.fencing_token == 3
    with pytest.raises(FencedError):
        await second.update(2, lambda s: CoordinatorState())
    assert (await second.load()).nodes_out == {"gpu-1", "gpu-2"}
    # an operator's change (pause) keeps the leader's token and the leader's fields
    paused = await second.operator_update(
        lambda s: replace(s, paused=True, paused_by="alice", paused_reason="firmware")
    )
    assert paused.fencing_token == 3
    again = await first.load()
    assert again.paused
    assert again.paused_by == "alice"
    assert again.remediation["gpu-1"] == Attempts(attempts=2, last_at=5.0)
    assert again.breaker_open


async def test_elector_in_process_is_valid_only_while_leading(
    kube_transport: KubeTransport, namespace: str
) -> None:
    """An elector is invalid before it leads, valid with a token while leading, and releases."""
    elector = _solo(kube_transport, namespace, "solo")
    assert not elector.is_valid()
    seen: list[int] = []
    leading = asyncio.Event()

    async def work(token: int) -> None:
        seen.append(elector.check_valid())
        leading.set()
        await asyncio.sleep(3600)

    task = asyncio.create_task(elector.run(work))
    try:
        async with asyncio.timeout(10):
            await leading.wait()
        await asyncio.sleep(DURATION_S + 0.5)  # renewals keep it valid past one duration
        assert elector.is_valid()
        assert seen == [0]
        await elector.release()
        assert not elector.is_valid()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _solo(transport: KubeTransport, namespace: str, name: str) -> LeaderElector:
    return LeaderElector(
        transport,
        LeaseSettings(
            name=name,
            namespace=namespace,
            identity=f"{name}-1",
            lease_duration_s=DURATION_S,
            renew_deadline_s=2,
            retry_period_s=RETRY_S,
            safety_margin_s=0.5,
        ),
    )


@contextlib.asynccontextmanager
async def _campaigning(
    elector: LeaderElector, work: Callable[[int], Coroutine[Any, Any, None]]
) -> AsyncIterator[None]:
    """``elector`` campaigns (``work`` for each term) during the block; then it is cancelled."""
    task = asyncio.create_task(elector.run(work))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class _Leading:
    """Runs an elector whose work records its start and its cancellation."""

    def __init__(self, elector: LeaderElector) -> None:
        self.elector = elector
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self.cancelled_at = 0.0

    async def work(self, token: int) -> None:
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled_at = time.monotonic()
            self.stopped.set()
            raise

    @contextlib.asynccontextmanager
    async def leads(self) -> AsyncIterator[None]:
        """Campaign during the block, whose body starts once the work has (within 10 s)."""
        async with _campaigning(self.elector, self.work):
            async with asyncio.timeout(10):
                await self.started.wait()
            yield


async def test_leader_whose_lease_is_taken_stops_at_once(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """When another holder appears in the Lease, the leader's work is cancelled within a retry."""
    leading = _Leading(_solo(kube_transport, namespace, "taken"))
    async with leading.leads():
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/taken"
        kube.api.request(
            "PATCH",
            path,
            {"spec": {"holderIdentity": "intruder"}},
            content_type="application/merge-patch+json",
        )
        taken = time.monotonic()
        async with asyncio.timeout(10):
            await leading.stopped.wait()
        assert not leading.elector.is_valid()
        assert leading.elector.token is None
        assert leading.cancelled_at - taken <= RETRY_S * 2 + 0.5


async def test_leader_that_cannot_renew_stops_before_its_lease_runs_out(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """With the apiserver gone, the leader turns invalid and stops before others may take over."""
    leading = _Leading(_solo(kube_transport, namespace, "cut-off"))
    async with leading.leads():
        await asyncio.sleep(RETRY_S * 2)  # a renewal or two went through
        try:
            kube.kill_apiserver()
            cut = time.monotonic()
            async with asyncio.timeout(10):
                await leading.stopped.wait()
            assert not leading.elector.is_valid()
            # Others wait a full lease duration from their last sight of a renewal.
            assert leading.cancelled_at - cut < DURATION_S
        finally:
            kube.start_apiserver()  # in this thread: the harness's children die with theirs


async def test_a_leader_fenced_by_a_newer_token_leads_again_above_it(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """A write with a newer token than the holder's lands in the state: the holder steps up.

    That is the late write of a deleted Lease's last leader, after the new term read the
    floor. The holder's writes are fenced; its elector gives the Lease up and leads again with
    a token above the state's, and writes again, instead of being refused for the whole term.
    """
    store = StateStore(kube_transport, namespace, "slonkd-state")
    elector = LeaderElector(
        kube_transport,
        LeaseSettings(
            name="stepup",
            namespace=namespace,
            identity="stepup-1",
            lease_duration_s=DURATION_S,
            renew_deadline_s=2,
            retry_period_s=RETRY_S,
            safety_margin_s=0.5,
        ),
        floor=store.last_token,
    )
    wrote: list[int] = []
    terms: list[int] = []

    async def work(token: int) -> None:
        terms.append(token)
        while True:
            await store.update(token, lambda s: s)  # FencedError ends the term
            wrote.append(token)
            await asyncio.sleep(0.1)

    async with _campaigning(elector, work):
        await until("a first write", lambda: bool(wrote), timeout_s=10)
        assert wrote[-1] == 0
        await StateStore(kube_transport, namespace, "slonkd-state").update(10, lambda s: s)
        await until("a write above 10", lambda: bool(wrote) and wrote[-1] > 10, timeout_s=10)
        assert terms == [0, 11]
        assert elector.check_valid() == 11
        assert (await store.load()).fencing_token == 11
        lease = kube.api.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/stepup"
        )
        assert lease["spec"]["leaseTransitions"] == 11


async def test_a_candidate_knows_how_long_the_api_has_been_silent(
    kube_transport: KubeTransport, namespace: str
) -> None:
    """An API nothing answers at: silent (None) however long it campaigns; the real one: answered.

    The coordinator's /readyz is built on this: the chart on the real node was Ready while its
    coordinator dialled an address nothing answered. (The apiserver is not killed here: the
    session's controller-manager takes tens of seconds to come back to a later test.)
    """
    server = f"https://127.0.0.1:{free_ports(1)[0]}"
    dead = KubeTransport(replace(kube_transport.endpoint, server=server), timeout_s=1.0)
    nowhere = _Leading(_solo(dead, namespace, "nowhere"))
    try:
        async with _campaigning(nowhere.elector, nowhere.work):
            await asyncio.sleep(RETRY_S * 6)
            assert nowhere.elector.api_silent_s() is None
            assert not nowhere.started.is_set()
    finally:
        await dead.close()
    leading = _Leading(_solo(kube_transport, namespace, "heard"))
    assert leading.elector.api_silent_s() is None
    async with leading.leads():
        await asyncio.sleep(RETRY_S * 2)  # renewals keep answering
        silent = leading.elector.api_silent_s()
        assert silent is not None
        assert silent <= RETRY_S + 0.5


async def test_a_term_whose_work_ends_gives_the_lease_up_and_campaigns_again(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """When the leader's work returns on its own, the term ends: no Lease held with no work.

    Found by the soak (bench/soak.py, seed 11): after an apiserver restart the coordinator's
    work returned (``coordinator.not_leading``) while the elector kept renewing the Lease, so
    neither coordinator led for minutes. The elector must end such a term (``kube.lease_lost``)
    and campaign again: here it leads a second term with a higher token.
    """
    elector = _solo(kube_transport, namespace, "work-ends")
    tokens: list[int] = []
    again = asyncio.Event()

    async def work(token: int) -> None:
        tokens.append(token)
        if len(tokens) > 1:
            again.set()
            await asyncio.sleep(3600)

    async with _campaigning(elector, work):
        async with asyncio.timeout(DURATION_S * 4):
            await again.wait()
        assert tokens[1] > tokens[0]


async def test_a_leader_stopped_then_released_hands_the_lease_over_at_once(
    kube_transport: KubeTransport, namespace: str
) -> None:
    """SIGTERM's order (cancel the campaign, then ``release``) clears the holder: no wait.

    The coordinator cancels its campaign first and releases after; a release that did nothing
    once the term had ended left the next leader waiting a whole lease duration (a rolling
    update's or bench's time to first action: 15 s more at the default duration).
    """

    def candidate(identity: str) -> LeaderElector:
        return LeaderElector(
            kube_transport,
            LeaseSettings(
                name="handover",
                namespace=namespace,
                identity=identity,
                lease_duration_s=30,
                renew_deadline_s=20,
                retry_period_s=RETRY_S,
                safety_margin_s=0.5,
            ),
        )

    old = _Leading(candidate("handover-old"))
    async with old.leads():
        pass  # its work started: SIGTERM cancels the campaign first
    await old.elector.release()
    new = _Leading(candidate("handover-new"))
    began = time.monotonic()
    async with new.leads():  # within 10 s: well under the lease's 30 s
        assert time.monotonic() - began <= RETRY_S * 2 + 1

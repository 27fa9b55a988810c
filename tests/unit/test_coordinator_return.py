"""Quarantined hardware on a leader with fakes: the section, the gauges, ``slonkd return``.

The coordinator runs a pass on the fakes of :mod:`tests.unit.coordinator_fakes`; one more
K8s node, kn-5, carries slonkd's marks (and a vendor's taint) with no worker pod, as after
an eviction. The API is served on loopback (aiohttp's test server), as ``slonkd return``
reaches it from inside the coordinator's pod.
"""

from __future__ import annotations

from typing import Any

import structlog
from aiohttp.test_utils import TestClient, TestServer

from slonkd.core.coordinator_state import Attempts, CoordinatorState
from slonkd.core.health import Remediation, fail
from slonkd.core.kube_actions import FAILURE_TAINT
from slonkd.core.kube_objects import Taint, TaintEffect
from slonkd.runtime.coordinating.api import CoordinatorAPI
from slonkd.runtime.coordinating.reconciling import Coordinator
from tests.unit.coordinator_fakes import (
    AuditRecorder,
    FakeNodeWriter,
    FakeSlurm,
    FakeStore,
    coordinator_with,
    kube_node,
    marked_node,
    slurm_node,
)

T0 = 1_764_583_200.0

VENDOR = Taint(key="vendor.io/gpu-broken", effect=TaintEffect.NO_SCHEDULE, value="x")


async def _leader() -> tuple[Coordinator, FakeNodeWriter, FakeStore, AuditRecorder]:
    store = FakeStore()
    store.state = CoordinatorState(remediation={"kn-5": Attempts(attempts=1, last_at=T0)})
    writer = FakeNodeWriter()
    c = coordinator_with(
        FakeSlurm([slurm_node(0), slurm_node(1)], failing=set()),
        writer,
        [kube_node(0), kube_node(1)],
        store=store,
    )
    c.nodes._cache["kn-5"] = marked_node(
        "kn-5", cordon="health:gpu-xid-79 node=w-9", foreign=(VENDOR,)
    )
    audit = AuditRecorder()
    c.auditor.log = audit  # type: ignore[assignment]
    c.audit = audit  # type: ignore[assignment]
    await c.reconcile_all()
    return c, writer, store, audit


async def _return(c: Coordinator, name: str, who: str) -> tuple[int, Any]:
    api = CoordinatorAPI(identity="c-0", holder=lambda: "c-0")
    api.leader = c
    async with TestClient(TestServer(api.app())) as client:
        response = await client.post(f"/v1/nodes/{name}/return", json={"by": who})
        return response.status, await response.json()


async def test_a_quarantined_machine_is_in_status_and_the_gauges() -> None:
    """kn-5 has slonkd's marks and no worker pod: listed with its rung, counted, timed."""
    c, *_ = await _leader()
    section = c.status_sections()["quarantined"]
    assert section["count"] == 1
    (entry,) = section["nodes"]
    assert (entry["kube_node"], entry["rung"], entry["why"]) == (
        "kn-5",
        "pod-evicted",
        "health:gpu-xid-79",
    )
    assert c.metrics.quarantined._value.get() == 1
    assert c.metrics.quarantined_longest._value.get() > 0


async def test_return_is_refused_while_a_check_fails_there_and_nothing_is_lifted() -> None:
    """A failing verdict measured on kn-5: 409 with the reason, no write, audited refused."""
    c, writer, store, audit = await _leader()
    c.health["w-9"] = ("kn-5", {"xid": fail("xid", "gpu-xid-79", Remediation.REBOOT)})
    before = list(writer.calls)
    status, body = await _return(c, "kn-5", "alice")
    assert status == 409
    assert "health check xid fails on kn-5" in body["error"]
    assert writer.calls == before
    assert store.state.remediation["kn-5"].returned_at == 0
    (record,) = [r for r in audit.records if r["action"] == "return"]
    assert record["outcome"].startswith("refused: health check xid")


async def test_return_lifts_only_slonkds_marks_audits_and_keeps_the_history() -> None:
    """slonkd's cordon, taint and condition go; the vendor's taint stays; history kept."""
    c, writer, store, audit = await _leader()
    before = len(writer.calls)
    with structlog.testing.capture_logs() as logs:
        status, body = await _return(c, "kn-5", "alice")
    assert status == 200, body
    assert writer.calls[before:] == [
        ("uncordon", "kn-5"),
        (f"untaint {FAILURE_TAINT}", "kn-5"),
        ("condition", "kn-5"),
    ]
    assert not any(VENDOR.key in what for what, _ in writer.calls)
    history = store.state.remediation["kn-5"]
    assert (history.attempts, history.returned_by) == (1, "alice")
    assert history.returned_at > 0
    (record,) = [r for r in audit.records if r["action"] == "return"]
    assert (record["cause"], record["outcome"]) == ("returned by alice", "returned")
    (line,) = [e for e in logs if e["event"] == "coordinator.node_returned"]
    assert line["cause"] == "returned by alice"


async def test_return_of_a_machine_with_a_worker_pod_is_refused() -> None:
    """kn-0 runs w-0: slonkd judges it itself; a name nobody knows is refused too."""
    c, *_ = await _leader()
    c.nodes._cache["kn-0"] = marked_node("kn-0")
    status, body = await _return(c, "kn-0", "bob")
    assert status == 409
    assert body["error"].startswith("worker pod w-0 runs on kn-0")
    status, body = await _return(c, "kn-404", "bob")
    assert (status, body["error"]) == (409, "no K8s node 'kn-404'")


async def test_a_leader_that_lost_its_lease_returns_nothing() -> None:
    """The lease is gone (a deposed leader): 503, no write, no history change."""
    c, writer, store, _ = await _leader()
    c.elector.valid = False  # type: ignore[attr-defined]
    before = list(writer.calls)
    status, _body = await _return(c, "kn-5", "alice")
    assert status == 503
    assert writer.calls == before
    assert store.state.remediation["kn-5"].returned_at == 0

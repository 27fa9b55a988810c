"""The leader's revalidation in a pass, with the fakes of ``test_coordinator_pass``.

A node held ``slonkd:revalidating`` gets one recheck per due judgement, the command is
recorded in the state, the answer to it releases the node once, and the record is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from slonkd.adapters.slurm.results import UpdateResult
from slonkd.core.health import Remediation, fail, ok, warn
from slonkd.core.messages import Command
from slonkd.core.reasons import Cause
from slonkd.core.revalidation import Answer
from slonkd.core.slurm_node import NodeName
from slonkd.runtime.coordinating.commands import CommandSender
from tests.unit.coordinator_fakes import (
    TOKEN,
    FakeNodeWriter,
    FakePodWriter,
    FakeSlurm,
    FakeStore,
    coordinator_with,
    kube_node,
    slurm_node,
)
from tests.unit.pods import running_pod


class FakeSender:
    """Records the commands it would publish."""

    def __init__(self) -> None:
        self.sent: list[Command] = []

    async def send(self, node: str, action: str, *, cause: str, detail: str = "") -> Command:
        """A command with a fresh id."""
        command = Command(
            id=f"cmd-{len(self.sent):05d}",
            node=node,
            action=action,
            cause=cause,
            fencing_token=TOKEN,
            detail=detail,
            at=0.0,  # the leader then records its own clock
        )
        self.sent.append(command)
        return command


async def test_a_revalidating_node_is_rechecked_recorded_and_released_on_a_pass() -> None:
    """One recheck per due judgement, its id recorded; only a passing answer resumes, once."""
    slurm = FakeSlurm([slurm_node(0, "IDLE+DRAIN", "slonkd:revalidating by slonkd")], failing=set())
    resumed = slurm.resumed
    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0)])
    sender = FakeSender()
    c.commands = cast(CommandSender, sender)
    c.policy = c.s.policy  # revalidation on (the fakes have no bus)
    c.revalidator = replace(c.revalidator, commands=cast(Any, sender))
    c.health["w-0"] = ("kn-0", {"gpu": ok("gpu")})

    await c.reconcile_all()
    assert [(s.node, s.action, s.cause) for s in sender.sent] == [
        ("w-0", "recheck", "revalidating")
    ]
    record = c.memory.state.revalidating["w-0"]
    assert (record.command, record.pod_uid) == ("cmd-00000", "u0")
    assert c.metrics.registry.get_sample_value("slonkd_revalidating_nodes") == 1

    await c.reconcile_all()  # inside recheck_s, no answer: nothing more
    assert len(sender.sent) == 1
    assert resumed == []

    c.observer.answers["w-0"] = Answer(
        command="cmd-00000", kube_node="kn-0", verdicts={"gpu": warn("gpu", "x")}
    )
    await c.reconcile_all()  # an answer that does not pass: held
    assert resumed == []

    c.observer.answers["w-0"] = Answer(
        command="cmd-00000", kube_node="kn-0", verdicts={"gpu": ok("gpu")}
    )
    await c.reconcile_all()
    assert resumed == [("revalidating", ["w-0"])]
    assert "w-0" not in c.memory.state.revalidating


async def test_a_node_slurm_returns_after_a_reboot_request_is_drained_revalidating() -> None:
    """The ladder asked for a reboot: SLURM puts the node back by itself, slonkd holds it.

    The reboot step records a revalidation without a recheck; the pass that sees the node
    idle again (no reason) drains it ``revalidating`` before anything else returns it.
    """
    held = slurm_node(0, "IDLE+DRAIN", "slonkd:health:gpu-xid-79 by slonkd agent")
    slurm = FakeSlurm([held], failing=set())

    async def request_reboot(names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        return UpdateResult(changed=tuple(NodeName(n) for n in names), calls=2)

    slurm.request_reboot = request_reboot  # type: ignore[attr-defined]
    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0)])
    sender = FakeSender()
    c.commands = cast(CommandSender, sender)
    c.policy = c.s.policy
    c.revalidator = replace(c.revalidator, commands=cast(Any, sender))
    c.health["w-0"] = ("kn-0", {"xid": fail("xid", "gpu-xid-79", Remediation.REBOOT)})
    await c.reconcile_all()
    record = c.memory.state.revalidating["w-0"]
    assert record.command == ""  # started, no recheck yet: the node is still held for health
    assert sender.sent == []

    slurm.nodes = [slurm_node(0)]  # rebooted: SLURM returned it and cleared slonkd's reason
    c.health["w-0"] = ("kn-0", {"xid": ok("xid")})
    await c.reconcile_all()
    assert ("revalidating", ["w-0"]) in slurm.drained


async def test_a_new_leader_continues_a_revalidation_from_the_state() -> None:
    """Failover: the new leader reads the record, keeps its start, accepts the answer to it.

    Without an answer it waits out ``recheck_s`` from the old leader's request (it does not
    recheck at once, nor restart the timeout); the retained answer to that command resumes.
    """
    node = slurm_node(0, "IDLE+DRAIN", "slonkd:revalidating by slonkd")

    def leader(sender: FakeSender, store: Any = None) -> Any:
        slurm = FakeSlurm([node], failing=set())
        resumed = slurm.resumed
        c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0)])
        if store is not None:
            c.memory.store = store
        c.commands = cast(CommandSender, sender)
        c.policy = c.s.policy
        c.revalidator = replace(c.revalidator, commands=cast(Any, sender))
        c.health["w-0"] = ("kn-0", {"gpu": ok("gpu")})
        return c, resumed

    old, _ = leader(FakeSender())
    await old.reconcile_all()
    began = old.memory.state.revalidating["w-0"]
    new_sender = FakeSender()
    new, resumed = leader(new_sender, store=old.memory.store)
    await new.reconcile_all()
    assert new_sender.sent == []  # the old leader's recheck is recent: wait for its answer
    assert new.memory.state.revalidating["w-0"] == began
    new.observer.answers["w-0"] = Answer(
        command=began.command, kube_node="kn-0", verdicts={"gpu": ok("gpu")}
    )
    await new.reconcile_all()
    assert resumed == [("revalidating", ["w-0"])]
    assert "w-0" not in new.memory.state.revalidating


async def test_a_node_evicted_for_a_slurm_failure_is_revalidated_when_it_returns() -> None:
    """SLURM's own failure: slonkd evicts the pod and records a revalidation (no recheck yet).

    SLURM's reason is SLURM's: slonkd writes nothing to the node while it holds. When SLURM
    (ReturnToService) or an operator puts the node back, the pass drains it ``revalidating``
    before it runs jobs again: the new pod's agent must prove its health first (issue 19
    item 2: "SLURM-reported or health").
    """
    slurm = FakeSlurm([slurm_node(0, "IDLE+FAIL", "Kill task failed")], failing=set())
    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0)])
    sender = FakeSender()
    c.commands = cast(CommandSender, sender)
    c.policy = c.s.policy
    c.revalidator = replace(c.revalidator, commands=cast(Any, sender))
    await c.reconcile_all()
    assert cast(FakePodWriter, c.executor.remediator.pods).evicted == ["w-0"]
    record = c.memory.state.revalidating["w-0"]
    assert record.command == ""
    assert slurm.drained == []  # SLURM's failure is left to SLURM and the operator

    slurm.nodes = [slurm_node(0)]  # resumed (by the operator or ReturnToService)
    await c.reconcile_all()
    assert ("revalidating", ["w-0"]) in slurm.drained


async def test_without_revalidation_an_eviction_records_nothing() -> None:
    """Revalidation off (no bus): the ladder's steps leave no record that would drain later."""
    slurm = FakeSlurm([slurm_node(0, "IDLE+FAIL", "Kill task failed")], failing=set())
    c = coordinator_with(slurm, FakeNodeWriter(), [kube_node(0)])
    assert not c.policy.revalidation.enabled  # no bus
    await c.reconcile_all()
    assert cast(FakePodWriter, c.executor.remediator.pods).evicted == ["w-0"]
    assert c.memory.state.revalidating == {}


async def test_returning_nodes_after_a_reset_open_no_breaker_and_revalidate_in_turn() -> None:
    """The sandbox's scenario of issue 37 item 4, pass by pass with the fakes.

    Four workers, limit 1. Two fail at once: a mass event opens the breaker (right). A person
    resets it: slonkd cordons and evicts them one after the other (right). Their new pods
    land on kn-4 and beside w-1 on kn-1; the operator resumes both SLURM nodes. Their
    revalidation is no new failure: w-0 is drained ``revalidating`` within the budget, w-2
    waits its turn, the breaker stays shut (on the old code: "mass event in pool default:
    3 of 4 nodes at once", w-1 counted for w-2's drain, and no revalidation until a second
    reset).
    """
    failed = [
        slurm_node(i, "IDLE+FAIL", "Kill task failed") if i in (0, 2) else slurm_node(i)
        for i in range(4)
    ]
    slurm = FakeSlurm(failed, failing=set())
    writer = FakeNodeWriter()
    c = coordinator_with(
        slurm,
        writer,
        [kube_node(i) for i in range(5)],
        max_out=10,
        max_out_percent=10,
        mass_percent=20,
    )
    del c.pods._cache["slonk/w-4"]  # five K8s nodes, four workers (as in the sandbox)
    sender = FakeSender()
    c.commands = cast(CommandSender, sender)
    c.policy = c.s.policy  # revalidation on (the fakes have no bus)
    c.revalidator = replace(c.revalidator, commands=cast(Any, sender))
    store = cast(FakeStore, c.memory.store)
    await c.reconcile_all()
    assert "mass event" in store.state.breaker_reason
    store.state = replace(store.state, breaker_open=False, breaker_reason="reset by alice")
    evicted = cast(FakePodWriter, c.executor.remediator.pods).evicted
    await c.reconcile_all()
    assert evicted == ["w-0"]
    c.pods._cache["slonk/w-0"] = running_pod(
        "w-0", uid="u0b", on="kn-4", ready_since="2026-01-01T00:00:00Z"
    )
    await c.reconcile_all()
    assert evicted == ["w-0", "w-2"]
    c.pods._cache["slonk/w-2"] = running_pod(
        "w-2", uid="u2b", on="kn-1", ready_since="2026-01-01T00:00:00Z"
    )
    await c.reconcile_all()
    assert not store.state.breaker_open
    assert set(store.state.revalidating) == {"w-0", "w-2"}  # the ladder's records

    slurm.nodes = [slurm_node(i) for i in range(4)]  # the operator resumes w-0 and w-2
    await c.reconcile_all()
    assert not store.state.breaker_open, store.state.breaker_reason
    assert slurm.drained == [("revalidating", ["w-0"])]
    assert c.snapshot is not None
    assert c.snapshot.admission.refused["w-2"].startswith("deferred: returning")
    assert "w-1" not in c.snapshot.admission.refused

    slurm.nodes[0] = slurm_node(0, "IDLE+DRAIN", "slonkd:revalidating by slonkd")
    await c.reconcile_all()
    assert not store.state.breaker_open, store.state.breaker_reason
    assert ("revalidating", ["w-2"]) not in slurm.drained  # w-0 holds the pool's one place

"""The fleet exporter on a coordinator's registry: families, ages at scrape, sdiag failures."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from slonkd.adapters.slurm.parsing_sdiag import RpcStats, SlurmctldStats, parse_sdiag
from slonkd.core.budget import Admission, PoolUse
from slonkd.core.errors import TransientError
from slonkd.core.plan import Action, Kind, NodeView, Plan, Writer
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.runtime.coordinating.fleet_metrics import FleetExporter
from slonkd.runtime.kit.metrics import Metrics
from tests.unit.recorded import recorded

SDIAG = recorded("22.05", "sdiag.txt")


class Clock:
    """A settable clock."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        """The time it was set to."""
        return self.now


def scrape(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on the registry, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }


def slurm(name: str, state: str, reason: str = "") -> SlurmNode:
    """A SLURM node from ``BASE+FLAG+...`` and a reason."""
    base, *flags = state.split("+")
    return SlurmNode(name=NodeName(name), state=NodeState.from_tokens(base, flags), reason=reason)


def one_pass(
    fleet: FleetExporter, nodes: list[SlurmNode], cordon: frozenset[str] = frozenset()
) -> None:
    """A pass over ``nodes``; those in ``cordon`` still want a cordon (disagree)."""
    views = [NodeView(node=n.name, now=0, slurm=n, pod=None, kube_node=None) for n in nodes]
    action = Action(kind=Kind.CORDON, writer=Writer.COORDINATOR, cause=Cause(name="slurm-failure"))
    plans = [Plan(node=n.name, actions=(action,) if n.name in cordon else ()) for n in nodes]
    use = PoolUse(pool="w", size=len(nodes), out=1, limit=2)
    fleet.observe_pass(nodes, views, plans, Admission(pools=(use,)))


def test_a_pass_and_its_outage_end_show_on_the_registry() -> None:
    """States, owners, pending, disagreement (with its age), budget, then the outage's duration."""
    clock, metrics = Clock(), Metrics(role="coordinator")
    fleet = FleetExporter(clock)
    fleet.register(metrics.registry)
    failed = slurm("a", "IDLE+FAIL", "Kill task failed")
    one_pass(fleet, [failed, slurm("b", "IDLE")], cordon=frozenset({"a"}))
    clock.now += 42
    got = scrape(metrics)
    assert got[("slonkd_fleet_nodes", (("state", "idle"),))] == 2
    assert got[("slonkd_fleet_nodes_flagged", (("flag", "fail"),))] == 1
    assert got[("slonkd_fleet_nodes_by_owner", (("cause", ""), ("owner", "slurm")))] == 1
    assert got[("slonkd_fleet_nodes_by_owner", (("cause", ""), ("owner", "none")))] == 1
    assert (
        got[("slonkd_fleet_pending_actions", (("kind", "cordon"), ("writer", "coordinator")))] == 1
    )
    assert got[("slonkd_fleet_disagreeing_nodes", ())] == 1
    assert got[("slonkd_fleet_disagreement_oldest_seconds", ())] == 42  # aged at scrape
    assert got[("slonkd_fleet_out_oldest_seconds", (("cause", ""), ("owner", "slurm")))] == 42
    assert got[("slonkd_budget_limit_nodes", (("group", "w"),))] == 2
    assert got[("slonkd_budget_out_nodes", (("group", "w"),))] == 1
    assert got[("slonkd_budget_group_nodes", (("group", "w"),))] == 2
    one_pass(fleet, [slurm("a", "IDLE"), slurm("b", "IDLE")])
    got = scrape(metrics)
    labels = (("cause", ""), ("owner", "slurm"))
    assert got[("slonkd_fleet_out_duration_seconds_count", labels)] == 1
    assert got[("slonkd_fleet_out_duration_seconds_sum", labels)] == 42
    assert got[("slonkd_fleet_disagreeing_nodes", ())] == 0
    assert got[("slonkd_fleet_disagreement_oldest_seconds", ())] == 0
    fleet.unregister()  # the term ended: a standby exports no fleet
    assert not any(name.startswith("slonkd_fleet") for name, _ in scrape(metrics))


def test_sdiag_families_and_failures_never_raise() -> None:
    """A good sdiag is exported; an error or a timeout is counted, the last good one kept."""
    clock, metrics = Clock(), Metrics(role="coordinator")
    fleet = FleetExporter(clock)
    fleet.register(metrics.registry)

    async def good() -> SlurmctldStats:
        return parse_sdiag(SDIAG)

    async def broken() -> SlurmctldStats:
        raise TransientError("sdiag: Unable to contact slurm controller")

    async def stuck() -> SlurmctldStats:
        await asyncio.sleep(60)
        return parse_sdiag(SDIAG)

    async def garbage() -> SlurmctldStats:
        return parse_sdiag("not sdiag")  # the port's ParseError

    async def run() -> None:
        await fleet.read_sdiag(good, timeout_s=5)
        for read in (broken, stuck, garbage):
            await fleet.read_sdiag(read, timeout_s=0.05)

    asyncio.run(run())
    got = scrape(metrics)
    assert got[("slonkd_slurmctld_sdiag_failures_total", ())] == 3
    assert got[("slonkd_slurmctld_server_threads", ())] == 3
    assert got[("slonkd_slurmctld_agent_queue_size", ())] == 0
    assert got[("slonkd_slurmctld_rpcs_total", (("rpc", "REQUEST_NODE_INFO"),))] == 14
    assert got[
        ("slonkd_slurmctld_rpc_duration_seconds_total", (("rpc", "REQUEST_NODE_INFO"),))
    ] == (0.003976)
    assert got[("slonkd_slurmctld_jobs", (("state", "pending"),))] == 0
    assert got[("slonkd_slurmctld_job_events_total", (("event", "submitted"),))] == 4
    assert got[("slonkd_slurmctld_sdiag_timestamp_seconds", ())] == clock.now


def test_the_exporter_takes_the_ports_typed_statistics_as_they_are() -> None:
    """Statistics that never were sdiag's text (another backend's) are exported unparsed.

    The port's ``diag`` answers :class:`SlurmctldStats`; the exporter used to parse text.
    """
    metrics = Metrics(role="coordinator")
    fleet = FleetExporter(Clock())
    fleet.register(metrics.registry)
    stats = SlurmctldStats(
        server_threads=7,
        agent_queue=2,
        agent_count=1,
        jobs={"submitted": 5},
        jobs_now={"running": 3},
        main_cycle_last_us=1500,
        rpcs={"REQUEST_NODE_INFO": RpcStats(count=9, total_us=2_000_000)},
    )

    async def read() -> SlurmctldStats:
        return stats

    asyncio.run(fleet.read_sdiag(read, timeout_s=5))
    got = scrape(metrics)
    assert got[("slonkd_slurmctld_sdiag_failures_total", ())] == 0
    assert got[("slonkd_slurmctld_server_threads", ())] == 7
    assert got[("slonkd_slurmctld_agent_queue_size", ())] == 2
    assert got[("slonkd_slurmctld_main_schedule_last_cycle_seconds", ())] == 0.0015
    assert got[("slonkd_slurmctld_jobs", (("state", "running"),))] == 3
    assert got[("slonkd_slurmctld_rpcs_total", (("rpc", "REQUEST_NODE_INFO"),))] == 9
    assert (
        got[("slonkd_slurmctld_rpc_duration_seconds_total", (("rpc", "REQUEST_NODE_INFO"),))] == 2.0
    )

"""The disruption budget: per pool, count and percent, mass events, the breaker."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.core.budget import (
    POOL_LABEL,
    Admission,
    BudgetPolicy,
    Request,
    WorkerGroups,
    admit,
    budget_group,
    out_of_service,
    statefulset_of,
)
from slonkd.core.kube_objects import (
    TAINTS_BY_ANNOTATION,
    KubeNodeName,
    Node,
    Taint,
    TaintEffect,
    encode_taint_record,
)
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode


def _admit(
    wanted: Sequence[str | Request],
    *,
    out: Iterable[str] = (),
    size: int = 100,
    policy: BudgetPolicy | None = None,
    breaker_open: bool = False,
    restarting: Iterable[str] | None = None,
    standing: frozenset[str] = frozenset(),
) -> Admission:
    """Admit ``wanted`` (node names, or requests) to the one pool gpu of ``size`` nodes."""
    return admit(
        [w if isinstance(w, Request) else Request(node=w, pool="gpu") for w in wanted],
        out_now={"gpu": frozenset(out)},
        pool_sizes={"gpu": size},
        restarting=None if restarting is None else {"gpu": frozenset(restarting)},
        policy=policy or BudgetPolicy(max_out=5, max_out_percent=10, mass_percent=20),
        breaker_open=breaker_open,
        standing=standing,
    )


def _units(**nodes: list[str]) -> list[Request]:
    """Requests of pool gpu, the nodes of each K8s node one unit: ``_units(c1=["a1", "a2"])``."""
    return [
        Request(node=n, pool="gpu", unit=f"k8s-node/{unit}")
        for unit, names in nodes.items()
        for n in names
    ]


def test_within_budget_all_admitted_and_breaker_stays_shut() -> None:
    """Requests inside the budget all go ahead."""
    result = _admit(["n1", "n2"])
    assert result.admitted == {"n1", "n2"}
    assert not result.refused
    assert not result.open_breaker


def test_nodes_already_out_count_against_the_budget() -> None:
    """Nodes out for any reason use the budget first."""
    result = _admit(["n1", "n2", "n3"], out={"x1", "x2", "x3", "x4"})
    assert result.admitted == {"n1"}
    assert set(result.refused) == {"n2", "n3"}
    assert "exhausted" in result.open_breaker


def test_a_node_already_out_costs_nothing_more() -> None:
    """Marking a node that is already out takes nothing more."""
    result = _admit(["x1"], out={"x1", "x2", "x3", "x4", "x5"})
    assert result.admitted == {"x1"}
    assert not result.open_breaker


def test_percent_wins_when_lower_but_at_least_one_node() -> None:
    """The lower limit wins; a small pool may still lose one node."""
    policy = BudgetPolicy(max_out=10, max_out_percent=10, mass_percent=50)
    assert policy.limit(30) == 3
    assert policy.limit(4) == 1
    assert _admit(["a", "b"], size=4, policy=policy).admitted == {"a"}


def test_mass_event_takes_nothing_and_opens_the_breaker() -> None:
    """30 of 100 nodes at once: more than 20 % -> none taken, not even the budget's 5."""
    result = _admit([f"n{i}" for i in range(30)])
    assert result.admitted == frozenset()
    assert len(result.refused) == 30
    assert "mass event" in result.open_breaker


def test_open_breaker_refuses_every_new_node_without_reopening() -> None:
    """An open breaker stops every new automated outage."""
    result = _admit(["n1"], breaker_open=True)
    assert not result.admitted
    assert result.refused["n1"].startswith("breaker open")
    assert result.open_breaker == ""


def test_pools_are_budgeted_apart() -> None:
    """One pool's outage does not use another pool's budget."""
    result = admit(
        [Request(node="a1", pool="a"), Request(node="b1", pool="b")],
        out_now={"a": frozenset({"a0"}), "b": frozenset()},
        pool_sizes={"a": 10, "b": 10},
        policy=BudgetPolicy(max_out=1, max_out_percent=100, mass_percent=100),
        breaker_open=False,
    )
    assert result.admitted == {"b1"}
    assert set(result.refused) == {"a1"}
    assert [p.pool for p in result.pools] == ["a", "b"]


def test_bad_policy_is_refused() -> None:
    """Impossible limits are refused with a clear error."""
    with pytest.raises(ValueError, match="max_out_percent"):
        BudgetPolicy(max_out_percent=150)
    with pytest.raises(ValueError, match="max_out"):
        BudgetPolicy(max_out=-1)


@given(
    wanted=st.sets(st.integers(0, 99), max_size=60),
    out=st.sets(st.integers(0, 99), max_size=30),
    max_out=st.integers(0, 20),
    percent=st.floats(0, 100),
    mass=st.floats(0, 100),
    breaker=st.booleans(),
)
def test_never_more_out_than_the_limit_unless_already_out(
    wanted: set[int], out: set[int], max_out: int, percent: float, mass: float, breaker: bool
) -> None:
    """Whatever the inputs: never past the limit, every request answered once."""
    policy = BudgetPolicy(max_out=max_out, max_out_percent=percent, mass_percent=mass)
    names = {f"n{i}" for i in wanted}
    out_names = {f"n{i}" for i in out}
    result = _admit(sorted(names), out=out_names, policy=policy, breaker_open=breaker)
    new = result.admitted - out_names
    assert len(out_names) + len(new) <= max(len(out_names), policy.limit(100))
    assert result.admitted | set(result.refused) == names
    assert not result.admitted & set(result.refused)
    if breaker:
        assert not new
    if result.refused and not breaker:
        assert result.open_breaker


def test_nodes_restarting_defer_a_request_without_opening_the_breaker() -> None:
    """A rollout holding the budget delays a failure's marking; the breaker stays shut."""
    restarting = {"r1", "r2", "r3", "r4", "r5"}
    result = _admit(["n1"], out=restarting, restarting=restarting)
    assert not result.admitted
    assert result.refused["n1"].startswith("deferred")
    assert result.open_breaker == ""


def test_budget_groups_by_pool_or_by_pool_and_block() -> None:
    """Per pool by default; per pool and topology block when a block label is set."""
    pod = {"slonk.dev/pool": "h100"}
    node = {"topology.slonk.dev/block": "nvl-3"}
    assert budget_group(pod, node) == "h100"
    assert budget_group(pod, node, block_label="topology.slonk.dev/block") == "h100/nvl-3"
    assert budget_group(pod, {}, block_label="topology.slonk.dev/block") == "h100/unlabelled"
    assert budget_group(None, None) == "default"


def test_standing_candidates_after_a_reset_are_admitted_within_the_budget() -> None:
    """After a human reset, failures standing since before it are no mass event.

    They are admitted up to the budget, the rest deferred, and the breaker stays shut
    (issue 15 item 12): only candidates that appeared after the reset count as a mass event.
    """
    standing = frozenset({"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"})
    policy = BudgetPolicy(max_out=2, max_out_percent=100, mass_percent=20)
    result = _admit(sorted(standing), size=20, policy=policy, standing=standing)
    assert result.admitted == {"n1", "n2"}
    assert set(result.refused) == standing - {"n1", "n2"}
    assert all("standing" in why for why in result.refused.values())
    assert not result.open_breaker


def test_new_candidates_after_a_reset_still_make_a_mass_event() -> None:
    """Candidates that are new since the reset follow the mass rule as before."""
    policy = BudgetPolicy(max_out=2, max_out_percent=100, mass_percent=20)
    fresh = [f"f{i}" for i in range(6)]
    result = _admit([*fresh, "n1"], size=20, policy=policy, standing=frozenset({"n1"}))
    assert "mass event" in result.open_breaker
    assert result.admitted == {"n1"}
    assert set(result.refused) == set(fresh)


def test_a_unit_goes_out_whole_or_not_at_all() -> None:
    """The pods of one K8s node are one unit: its cordon takes them all out.

    Room for 2: the first K8s node's two pods fit; the second's do not, so none of it goes
    (before units, one request per cordon admitted both: 4 out against a limit of 2).
    """
    policy = BudgetPolicy(max_out=2, max_out_percent=100, mass_percent=100)
    result = _admit(_units(c1=["a1", "a2"], c2=["b1", "b2"]), size=20, policy=policy)
    assert result.admitted == {"a1", "a2"}
    assert set(result.refused) == {"b1", "b2"}
    assert "exhausted" in result.open_breaker
    assert "4 more wanted" in result.open_breaker


def test_a_unit_spanning_two_pools_goes_out_whole_or_not_at_all() -> None:
    """A K8s node holding pods of two pools is one unit across both budgets.

    Found by the soak (bench/soak.py, seed 11): two declared nodes of pool ``d`` failed on
    K8s nodes that each also held a pod of pool ``w`` (limit 1). Pool ``d`` admitted both
    cordons; pool ``w`` had room for one of its pods only, yet both K8s nodes were cordoned:
    2 nodes of pool ``w`` out against a limit of 1. A cordon refused in one pool must not go
    ahead for the other.
    """
    policy = BudgetPolicy(max_out=3, max_out_percent=20, mass_percent=50)
    result = admit(
        [
            Request(node="d-11", pool="d", unit="k8s-node/k4"),
            Request(node="w-2", pool="w", unit="k8s-node/k4"),
            Request(node="d-9", pool="d", unit="k8s-node/k8"),
            Request(node="w-3", pool="w", unit="k8s-node/k8"),
        ],
        out_now={"d": frozenset(), "w": frozenset()},
        pool_sizes={"d": 16, "w": 4},
        policy=policy,
        breaker_open=False,
    )
    assert result.admitted == {"d-11", "w-2"}
    assert set(result.refused) == {"d-9", "w-3"}
    assert "budget of pool w exhausted" in result.refused["d-9"]


def test_a_unit_counts_every_node_toward_a_mass_event() -> None:
    """Six failing pods on three K8s nodes are six nodes at once, not three cordons."""
    policy = BudgetPolicy(max_out=2, max_out_percent=100, mass_percent=20)
    result = _admit(
        _units(c0=["n0", "n1"], c1=["n2", "n3"], c2=["n4", "n5"]), size=20, policy=policy
    )
    assert not result.admitted
    assert "mass event in pool gpu: 6 of 20" in result.open_breaker


def test_a_unit_partly_out_costs_only_its_nodes_still_in() -> None:
    """A unit whose other pod is already out costs one more node, and standing units fit first."""
    policy = BudgetPolicy(max_out=2, max_out_percent=100, mass_percent=100)
    result = _admit(
        _units(c1=["a1", "a2"], c2=["b1", "b2"]),
        out={"a1"},
        size=20,
        policy=policy,
        standing=frozenset({"b1", "b2"}),
    )
    assert result.admitted == {"a1", "a2"}  # c1 costs one: a2; c2 (two) does not fit the room
    assert result.refused["b1"].startswith("deferred: standing")
    assert not result.open_breaker


@given(
    wanted=st.sets(st.integers(0, 99), max_size=60),
    out=st.sets(st.integers(0, 99), max_size=30),
    per_unit=st.integers(1, 4),
    max_out=st.integers(0, 20),
    mass=st.floats(0, 100),
    standing=st.sets(st.integers(0, 99), max_size=20),
)
def test_units_never_split_nor_pass_the_limit(
    wanted: set[int], out: set[int], per_unit: int, max_out: int, mass: float, standing: set[int]
) -> None:
    """Whatever the inputs: a unit is admitted whole or refused whole, never past the limit."""
    policy = BudgetPolicy(max_out=max_out, max_out_percent=100, mass_percent=mass)
    out_names = frozenset(f"n{i}" for i in out)
    requests = [Request(node=f"n{i}", pool="gpu", unit=f"u{i // per_unit}") for i in wanted]
    result = _admit(
        requests, out=out_names, policy=policy, standing=frozenset(f"n{i}" for i in standing)
    )
    new = result.admitted - out_names
    assert len(out_names) + len(new) <= max(len(out_names), policy.limit(100))
    for unit in {r.unit for r in requests}:
        members = {r.node for r in requests if r.unit == unit} - out_names
        assert members <= result.admitted or not members & result.admitted


def test_out_of_service_is_drained_cordoned_or_tainted_by_slonkd() -> None:
    """The one rule of what uses a pool's room (the coordinator's pass and the rollout alike).

    A SLURM drain by anyone, a cordon by anyone, slonkd's own NoSchedule taint: out. A node
    SLURM alone marks DOWN, an operator's taint, a PreferNoSchedule taint of slonkd: not out.
    """

    def slurm(state: str) -> SlurmNode:
        base, *flags = state.split("+")
        return SlurmNode(name=NodeName("n"), state=NodeState.from_tokens(base, flags))

    def kube(*, cordoned: bool = False, taint: Taint | None = None, ours: bool = True) -> Node:
        record = encode_taint_record([taint.identity]) if taint and ours else None
        return Node(
            name=KubeNodeName("k"),
            uid="u",
            resource_version="1",
            unschedulable=cordoned,
            taints=(taint,) if taint else (),
            annotations={TAINTS_BY_ANNOTATION: record} if record else {},
        )

    no_schedule = Taint(key="slonk.dev/unhealthy", effect=TaintEffect.NO_SCHEDULE)
    prefer = Taint(key="slonk.dev/unhealthy", effect=TaintEffect.PREFER_NO_SCHEDULE)
    assert out_of_service(slurm("IDLE+DRAIN"), None)
    assert out_of_service(slurm("IDLE"), kube(cordoned=True))
    assert out_of_service(None, kube(taint=no_schedule))
    assert not out_of_service(slurm("DOWN"), kube())
    assert not out_of_service(slurm("IDLE"), kube(taint=no_schedule, ours=False))
    assert not out_of_service(slurm("IDLE"), kube(taint=prefer))
    assert not out_of_service(None, None)


def test_returning_nodes_are_admitted_within_the_budget_and_never_a_mass_event() -> None:
    """Nodes back from a failure (their ``revalidating`` drain) are no new failure (issue 37 #4).

    Three of four return at once: one fits the limit, the others wait, the breaker stays
    shut; a node new in the same pass still follows the mass and exhaustion rules.
    """
    policy = BudgetPolicy(max_out=10, max_out_percent=10, mass_percent=20)  # 4: limit 1, mass 1
    back = [Request(node=n, pool="gpu", returning=True) for n in ("r0", "r1", "r2")]
    result = _admit(back, size=4, policy=policy)
    assert result.admitted == {"r0"}
    assert all(why.startswith("deferred: returning") for why in result.refused.values())
    assert set(result.refused) == {"r1", "r2"}
    assert not result.open_breaker
    result = _admit([*back, "f0"], size=4, policy=policy)
    assert "budget of pool gpu exhausted" in result.open_breaker
    assert "f0" in result.refused


def test_a_sibling_that_wants_nothing_costs_room_but_is_no_candidate_of_a_mass_event() -> None:
    """One failing pod of a K8s node holding two: its cordon takes both, one wants out.

    Two such K8s nodes and a lone node are three candidates (no mass event in a pool of 20
    with mass 4), costing five nodes of room (4): on the old rule every pod of a unit counted
    toward the mass event (5 of 20).
    """
    policy = BudgetPolicy(max_out=4, max_out_percent=100, mass_percent=10)  # mass: 4
    requests = [
        Request(node="a1", pool="gpu", unit="k8s-node/c1"),
        Request(node="a2", pool="gpu", unit="k8s-node/c1", wants=False),
        Request(node="b1", pool="gpu", unit="k8s-node/c2"),
        Request(node="b2", pool="gpu", unit="k8s-node/c2", wants=False),
        Request(node="c1", pool="gpu"),
        Request(node="c2", pool="gpu"),
        Request(node="c3", pool="gpu"),
    ]
    result = _admit(requests, size=20, policy=policy)
    assert "mass event" in result.open_breaker  # five want out: past 4
    assert "5 of 20" in result.open_breaker
    result = _admit(requests[:5], size=20, policy=policy)
    assert not result.open_breaker.startswith("mass event"), result.open_breaker
    assert result.admitted == {"c1", "a1", "a2"}  # first fit by name; c2's two do not fit
    assert "budget of pool gpu exhausted" in result.open_breaker


@given(
    wanted=st.sets(st.integers(0, 99), max_size=60),
    out=st.sets(st.integers(0, 99), max_size=30),
    back=st.sets(st.integers(0, 99), max_size=30),
    idle=st.sets(st.integers(0, 99), max_size=30),
    max_out=st.integers(0, 20),
    mass=st.floats(0, 100),
)
def test_returning_and_idle_siblings_never_pass_the_limit(
    wanted: set[int], out: set[int], back: set[int], idle: set[int], max_out: int, mass: float
) -> None:
    """Whatever the flags: never past the limit; returning nodes alone never open the breaker."""
    policy = BudgetPolicy(max_out=max_out, max_out_percent=100, mass_percent=mass)
    out_names = frozenset(f"n{i}" for i in out)
    requests = [
        Request(
            node=f"n{i}",
            pool="gpu",
            unit=f"u{i // 2}",
            returning=i in back,
            wants=i not in idle,
        )
        for i in wanted
    ]
    result = _admit(requests, out=out_names, policy=policy)
    new = result.admitted - out_names
    assert len(out_names) + len(new) <= max(len(out_names), policy.limit(100))
    assert result.admitted | set(result.refused) == {r.node for r in requests}
    if all(i in back for i in wanted):
        assert not result.open_breaker


def test_a_worker_keeps_its_group_while_its_pod_is_gone() -> None:
    """The pod it last had names it; never seen, its StatefulSet siblings' pool (block unknown)."""
    groups = WorkerGroups(block_label="topo/block")
    pool = {POOL_LABEL: "w"}
    b1, b2 = {"topo/block": "b1"}, {"topo/block": "b2"}
    seen = groups.resolve([("w-0", pool, b1), ("w-1", pool, b2), ("x", None, None)])
    assert seen == ["w/b1", "w/b2", "default/unlabelled"]
    assert groups.resolve([("w-0", None, None), ("w-1", pool, b2)]) == [
        "w/b1",  # its last pod's group
        "w/b2",
    ]
    fresh = WorkerGroups(block_label="topo/block")
    assert fresh.resolve([("w-0", None, None), ("w-1", pool, None)]) == [
        "w/unlabelled",  # its siblings' pool, its block unknown
        "w/unlabelled",
    ]
    assert statefulset_of("w-12") == "w"
    assert statefulset_of("login") == ""

"""What `slonkd status` and `slonkd explain` show, from views and plans (pure)."""

from __future__ import annotations

from slonkd.cli.ops import render_table
from slonkd.core.decide import decide
from slonkd.core.status import explain, node_row
from tests.unit.test_decide import POLICY, knode, slurm, view


def test_an_operator_drain_shows_its_owner_and_no_drift() -> None:
    """A foreign drain: owner foreign, nothing slonkd would change."""
    v = view(slurm=slurm("IDLE+DRAIN", reason="rack 7 maintenance"))
    row = node_row(v, decide(v, POLICY), {})
    assert row["owner"] == "foreign"
    assert row["reason"] == "rack 7 maintenance"
    assert row["drift"] == []
    assert row["hold"] is False


def test_a_slurm_failure_shows_the_failure_the_drift_and_the_budget_refusal() -> None:
    """SLURM failed the node: the failure, what slonkd would do, and why it may not."""
    v = view(slurm=slurm("IDLE+FAIL", reason="Kill task failed"))
    plan = decide(v, POLICY)
    row = node_row(v, plan, {"w-0": "breaker open: a human must reset it"})
    assert row["failure"]
    assert any(d.startswith("coordinator:cordon:") for d in row["drift"])
    assert row["budget"].startswith("breaker open")
    assert row["owner"] == "slurm"


def test_explain_carries_the_view_and_the_notes() -> None:
    """A held node: the decision is empty and the note says why."""
    v = view(kube_node=knode(held=True), slurm=slurm("IDLE+FAIL", reason="Kill task failed"))
    body = explain(v, decide(v, POLICY), {})
    assert body["view"]["kube_node"]["hold"] is True
    assert body["decision"]["actions"] == []
    assert any("hold" in n for n in body["decision"]["notes"])
    assert body["hold"] is True


def test_the_table_names_pause_breaker_budget_and_every_node() -> None:
    """The human table: header lines, then one line a node; hostile text stays on its line."""
    v = view(slurm=slurm("IDLE+DRAIN", reason="evil\nreason"))
    body = {
        "identity": "coordinator-0",
        "fencing_token": 3,
        "state": {"paused": True, "pausedBy": "alice", "pausedReason": "fw", "breakerOpen": False},
        "budget": [{"pool": "gpu", "out": 1, "size": 10, "limit": 1}],
        "nodes": [node_row(v, decide(v, POLICY), {})],
    }
    text = render_table(body)
    lines = text.splitlines()
    assert lines[1] == "paused: yes, by alice: fw"
    assert lines[2] == "breaker: closed"
    assert "gpu 1/10 out (limit 1)" in lines[3]
    assert len(lines) == 6  # 4 header lines, the column names, one node
    assert "evil reason" in lines[-1]

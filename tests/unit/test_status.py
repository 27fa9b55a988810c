"""What `slonkd status` and `slonkd explain` show, from views and plans (pure)."""

from __future__ import annotations

import json

from slonkd.cli.ops import render_table
from slonkd.core.decide import decide
from slonkd.core.status import explain, node_row
from tests.unit.coordinator_fakes import POLICY, knode, slurm, view


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
    assert "evil\\nreason" in lines[-1]


HOSTILE = "ok\u202e\u2066gnp.exe\x1b[31m\r\x00\u2028\u200fend"


def _body(**extra: object) -> dict[str, object]:
    return {
        "identity": "coordinator-0",
        "fencing_token": 3,
        "state": {"paused": False, "breakerOpen": False},
        "budget": [{"pool": "gpu", "out": 0, "size": 10, "limit": 1}],
        "nodes": [],
        **extra,
    }


def test_the_table_escapes_control_and_bidi_characters_as_explain_does() -> None:
    r"""Reason, pause and breaker text show control and bidi characters as JSON escapes.

    A bidi override or a terminal escape in a reason would make the table lie to the reader;
    the table writes them as explain's JSON output does (``\u202e``, ``\u001b``), so every
    character printed is a printable one and the hostile text stays in its cell.
    """
    v = view(slurm=slurm("IDLE+DRAIN", reason=HOSTILE))
    body = _body(
        state={
            "paused": True,
            "pausedBy": "mallory\u202e",
            "pausedReason": HOSTILE,
            "breakerOpen": True,
            "breakerReason": HOSTILE,
        },
        nodes=[node_row(v, decide(v, POLICY), {})],
    )
    text = render_table(body)
    assert all(line.isprintable() for line in text.split("\n")), repr(text)
    assert len(text.split("\n")) == 6
    for ch in ("\u202e", "\u2066", "\x1b", "\r", "\x00", "\u2028", "\u200f"):
        assert json.dumps(ch)[1:-1] in text  # the very escape explain prints
    assert "paused: yes, by mallory\\u202e: ok\\u202e" in text
    assert "breaker: OPEN: ok\\u202e" in text
    assert "ok\\u202e\\u2066gnp.exe\\u001b[31m" in text.split("\n")[-1]


ROLLOUT = {
    "leading": True,
    "updated": 3,
    "outdated": 2,
    "in_progress": {"w-3": "draining", "w-4": "replacing"},
    "waiting": {"w-5": "budget: 1/1 out"},
    "blocked": {"w-3": "waiting for 2 job(s)"},
    "statefulsets": {
        "workers": {
            "update_revision": "workers-7c9",
            "on_delete": True,
            "replicas": 5,
            "updated": 3,
            "outdated": 2,
        }
    },
    "complete": False,
    "max_parallel": 1,
}
TOPOLOGY = {
    "plugin": "topology/block",
    "desired_sha256": "a" * 64,
    "slurmctld_copy_sha256": "b" * 64,
    "applied_sha256": "a" * 64,
    "waiting_for_copy_since": None,
    "last_reconfigure": {"at": 1764590400.0, "sha256": "a" * 64, "took_s": 1.25},
    "reconfigures": 4,
    "drift_count": 1,
    "drift": {"w-9": {"labels": "b1", "slurmctld": "b2"}},
    "error": "",
    "refused": "block b3: bad\u202e",
    "left_out_blocks": {"b7": 2},
}


def test_rollout_and_topology_sections_read_as_lines_not_json() -> None:
    """The rollout and topology sections are readable lines, one fact a line, never JSON."""
    text = render_table(_body(rollout=ROLLOUT, topology=TOPOLOGY))
    lines = text.split("\n")
    assert not any(line.lstrip().startswith(("rollout: {", "topology: {")) for line in lines)
    assert not any('{"' in line for line in lines), text
    assert "rollout: 3 updated, 2 outdated, 2 in progress (max parallel 1)" in lines
    assert "  in progress: w-3 draining, w-4 replacing" in lines
    assert "  waiting: w-5: budget: 1/1 out" in lines
    assert "  blocked: w-3: waiting for 2 job(s)" in lines
    assert "  statefulset workers: revision workers-7c9, 3/5 updated, 2 outdated, OnDelete" in lines
    assert "topology: topology/block, applied aaaaaaaaaaaa, 4 reconfigures" in lines
    assert "  slurmctld's copy: bbbbbbbbbbbb (desired aaaaaaaaaaaa)" in lines
    assert any(
        line.startswith("  last reconfigure: 2025-12-01") and "took 1.2 s" in line for line in lines
    )
    assert "  drift: 1 node(s): w-9: labels b1, slurmctld b2" in lines
    assert "  refused: block b3: bad\\u202e" in lines
    assert "  left out blocks: b7 (2 nodes)" in lines
    done = render_table(
        _body(
            rollout={
                "leading": True,
                "updated": 5,
                "outdated": 0,
                "in_progress": {},
                "complete": True,
                "max_parallel": 1,
            }
        )
    )
    assert "rollout: 5 updated, complete" in done.split("\n")


def test_a_deferred_reconfigure_says_when_it_may_run() -> None:
    """A changed topology waiting for min_reconfigure_interval_s says until when."""
    deferred = {**TOPOLOGY, "reconfigure_deferred_until": 1764590460.0}
    lines = render_table(_body(topology=deferred)).split("\n")
    assert "  next reconfigure not before 2025-12-01T12:01:00Z" in lines
    assert not any(
        "not before" in line for line in render_table(_body(topology=TOPOLOGY)).split("\n")
    )


def test_a_paused_rollout_says_why_it_writes_nothing() -> None:
    """slonkd paused (or its state corrupt): the rollout's section says so under its head."""
    text = render_table(_body(rollout={**ROLLOUT, "paused": "slonkd is paused: maint\u202e"}))
    lines = text.split("\n")
    head = lines.index("rollout: 3 updated, 2 outdated, 2 in progress (max parallel 1)")
    assert lines[head + 1] == "  paused: slonkd is paused: maint\\u202e"


def test_the_table_names_the_slurm_backend_and_why() -> None:
    """``slurm_backend`` and its why (issue 39), beside the poll's backend; none without them."""
    passes = {
        "slurm_backend": "pyslurm",
        "slurm_backend_why": "pyslurm 22.5.3 matches SLURM 22.05.8",
        "slurm_poll_backend": "libslurm",
    }
    lines = render_table(_body(passes=passes)).splitlines()
    assert lines[4] == "slurm: pyslurm (pyslurm 22.5.3 matches SLURM 22.05.8); poll: libslurm"
    assert not any(line.startswith("slurm:") for line in render_table(_body()).splitlines())

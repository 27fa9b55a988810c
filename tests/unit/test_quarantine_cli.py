"""``slonkd status``'s quarantined block and ``slonkd return``'s command line (no service)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from slonkd.cli import quarantine
from slonkd.cli.ops import render_table

ENTRY = {
    "kube_node": "gpu-node-17",
    "rung": "manual-repair",
    "attempts": 3,
    "since": "2026-12-01T10:00:00+00:00",
    "for_s": 27 * 3600.0,
    "why": "health:dcgm-pcie",
    "slurm_node": "w-9",
    "marks": ["cordon", "taint:slonk.dev/manual-repair"],
    "hold": False,
}


def _body(quarantined: Any) -> dict[str, Any]:
    return {
        "identity": "c-0",
        "fencing_token": 3,
        "state": {"paused": False, "breakerOpen": False},
        "budget": [],
        "nodes": [],
        "quarantined": quarantined,
    }


def test_status_shows_each_quarantined_machine_with_rung_since_and_why() -> None:
    """One header line, one line a machine: rung, attempt, since, how long, why, for whom."""
    text = render_table(_body({"count": 1, "longest_s": 97200.0, "nodes": [ENTRY]}))
    lines = text.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("quarantined")))
    assert lines[at].startswith("quarantined (waiting for a person): 1")
    assert lines[at + 1] == (
        "  gpu-node-17: manual-repair (attempt 3) since 2026-12-01T10:00:00+00:00 (27.0 h):"
        " health:dcgm-pcie, for w-9"
    )


def test_status_without_quarantined_machines_shows_no_block_and_escapes_hostile_text() -> None:
    """No machine: no block. A hostile name stays on its line, escaped."""
    assert "quarantined" not in render_table(_body({"count": 0, "nodes": []}))
    hostile = {**ENTRY, "kube_node": "evil\nname\u202e"}
    text = render_table(_body({"count": 1, "nodes": [hostile]}))
    assert "evil\\nname\\u202e" in text


def _args(node: str = "gpu-node-17") -> argparse.Namespace:
    return argparse.Namespace(node=node, by="alice", url="http://127.0.0.1:1")


def test_return_prints_the_leaders_refusal_on_one_line_and_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """409: exit 1 and the reason, one line; the body carries who."""
    sent: list[Any] = []

    async def refused(method: str, url: str, **kw: Any) -> tuple[int, Any]:
        sent.append((method, url, kw.get("json_body")))
        return 409, {"error": "health check gpu fails on gpu-node-17 (w-9's agent): fix it first"}

    monkeypatch.setattr(quarantine, "call", refused)
    assert quarantine.main(_args()) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("slonkd return: refused (409): health check gpu fails")
    assert sent == [("POST", "http://127.0.0.1:1/v1/nodes/gpu-node-17/return", {"by": "alice"})]


def test_return_prints_what_was_lifted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """200: exit 0 and the leader's answer as JSON."""

    async def done(method: str, url: str, **kw: Any) -> tuple[int, Any]:
        return 200, {"kube_node": "gpu-node-17", "outcome": "returned", "lifted": ["uncordon"]}

    monkeypatch.setattr(quarantine, "call", done)
    assert quarantine.main(_args()) == 0
    assert '"outcome": "returned"' in capsys.readouterr().out

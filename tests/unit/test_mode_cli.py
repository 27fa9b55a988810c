"""``slonkd mode POOL MODE`` (:mod:`slonkd.cli.mode`): bad input is one line and exit 2.

An unknown mode, a name no pool can have, or a pool the leader does not know are refused
before anything is written (a misspelt pool left in ``full`` while the operator thinks it
observes would be worse than a refusal); ``slonkd status`` shows each pool's mode.
Neighbours: ``test_modes`` (the rules), ``test_status`` (the status table).
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from slonkd.cli import mode
from slonkd.cli.main import main
from slonkd.cli.ops import render_table


def _args(pool: str, wanted: str) -> argparse.Namespace:
    return argparse.Namespace(
        pool=pool, mode=wanted, by="alice", url="http://127.0.0.1:1", namespace="slonk",
        state="slonkd-state",
    )  # fmt: skip


async def _leader(method: str, url: str, **kw: Any) -> tuple[int, Any]:
    return 200, {"budget": [{"pool": "gpu/b1"}], "modes": {"cpu": {"mode": "full"}}}


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["mode", "gpu", "ful"], "unknown mode 'ful'"),
        (["mode", "gpu pool", "observe"], "unknown pool 'gpu pool'"),
        (["mode", "-", "observe"], "unknown pool '-'"),
    ],
)
def test_a_bad_mode_or_pool_name_is_one_line_and_exit_2(
    argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before the leader is asked or the state written."""

    async def never(*_a: Any, **_kw: Any) -> tuple[int, Any]:
        raise AssertionError("asked the leader")

    monkeypatch.setattr(mode, "call", never)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"slonkd mode: {named}")


def test_a_pool_the_leader_does_not_know_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The leader knows gpu (its workers) and cpu (given a mode): gpux is refused by name."""

    async def writes(*_a: Any, **_kw: Any) -> Any:
        raise AssertionError("wrote the state")

    monkeypatch.setattr(mode, "call", _leader)
    monkeypatch.setattr(mode, "_write", writes)
    assert mode.main(_args("gpux", "observe")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("slonkd mode: unknown pool 'gpux' (the leader knows cpu, gpu)")


def test_a_known_pool_is_switched_in_the_state(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state is written with the mode, who and when (what the leader audits)."""
    from slonkd.core.coordinator_state import CoordinatorState, PoolMode

    written: list[tuple[str, str]] = []

    async def writes(args: argparse.Namespace, pool: str, wanted: Any) -> CoordinatorState:
        written.append((pool, wanted.value))
        return CoordinatorState(pool_modes={pool: PoolMode(mode=wanted.value, by=args.by)})

    monkeypatch.setattr(mode, "call", _leader)
    monkeypatch.setattr(mode, "_write", writes)
    assert mode.main(_args("gpu", "quarantine")) == 0
    assert written == [("gpu", "quarantine")]
    assert capsys.readouterr().out.startswith("slonkd mode: gpu is quarantine")


def test_status_shows_each_pools_mode() -> None:
    """One line: each pool, its mode, where it comes from and what it holds back."""
    body = {
        "modes": {
            "cpu": {"mode": "full", "source": "default", "would": 0},
            "gpu": {"mode": "observe", "source": "slonkd mode, by alice", "would": 3},
        }
    }
    lines = render_table(body).splitlines()
    assert "modes: cpu full (default); gpu observe (slonkd mode, by alice, 3 held back)" in lines

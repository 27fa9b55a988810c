"""``slonkd sandbox --accounting``: the opt-in reaches the sandbox (off by default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slonkd.cli.main import main
from slonkd_sandbox.sandbox import ctl as sandbox_ctl
from slonkd_sandbox.sandbox import run as sandbox


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Records the sandbox entry points' keyword arguments instead of starting anything."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def record(name: str) -> Any:
        def fake(root: Path, **kwargs: Any) -> int:
            seen.append((name, kwargs))
            return 0

        return fake

    monkeypatch.setattr(sandbox, "run_sandbox", record("run"))
    monkeypatch.setattr(sandbox_ctl, "up", record("up"))
    return seen


@pytest.mark.parametrize("action", ["run", "up"])
def test_accounting_flag_reaches_the_sandbox(
    action: str, calls: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    """``--accounting`` turns slurmdbd on for ``run`` and ``up``; without it, it stays off."""
    assert main(["sandbox", action, "--dir", str(tmp_path), "--accounting"]) == 0
    assert main(["sandbox", action, "--dir", str(tmp_path)]) == 0
    assert [(name, kw["accounting"]) for name, kw in calls] == [(action, True), (action, False)]

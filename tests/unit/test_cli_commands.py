"""Commands other distributions add to ``slonkd`` (:mod:`slonkd.cli.commands`).

``slonkd sandbox`` comes from the harness distribution through the entry point group
``slonkd.commands``, or from the checkout's own ``pyproject.toml`` files where no installer
registered it; without the harness it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import slonkd
import slonkd_sandbox
from slonkd.cli import commands
from slonkd.cli.main import main

ROOT = Path(slonkd.__file__).resolve().parents[1]


def _checkout(root: Path, *, name: str = "slonkd", declared: str = "") -> Path:
    (root / "slonkd").mkdir(parents=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "{name}"\n')
    (root / "extra").mkdir()
    (root / "extra" / "pyproject.toml").write_text(
        f'[project]\nname = "extra"\n[project.entry-points."slonkd.commands"]\n{declared}'
    )
    (root / "other").mkdir()
    (root / "other" / "pyproject.toml").write_text('[project]\nname = "other"\n')
    return root / "slonkd"


def test_a_checkout_s_distributions_declare_their_commands(tmp_path: Path) -> None:
    """Next to slonkd's own pyproject, each distribution's ``slonkd.commands`` are found."""
    package = _checkout(tmp_path, declared='hello = "extra.hello"\n')
    assert commands.checkout_entry_points(package) == [
        EntryPoint("hello", "extra.hello", commands.GROUP)
    ]


def test_a_tree_that_is_not_slonkd_s_checkout_declares_nothing(tmp_path: Path) -> None:
    """An installed slonkd (no pyproject next to it) or another project's tree: no commands."""
    assert commands.checkout_entry_points(tmp_path / "site-packages" / "slonkd") == []
    package = _checkout(tmp_path, name="someone-else", declared='hello = "extra.hello"\n')
    assert commands.checkout_entry_points(package) == []


def test_this_checkout_declares_sandbox_in_the_harness() -> None:
    """The repository's harness distribution declares ``sandbox`` = ``slonkd_sandbox.command``."""
    found = commands.discover()
    assert found["sandbox"].value == "slonkd_sandbox.command"
    assert found["sandbox"].load() is sys.modules["slonkd_sandbox.command"]


def test_sandbox_comes_from_the_harness(capsys: pytest.CaptureFixture[str]) -> None:
    """With the harness importable, ``slonkd sandbox up --help`` is the harness's parser."""
    with pytest.raises(SystemExit) as done:
        main(["sandbox", "up", "--help"])
    assert done.value.code == 0
    assert "--accounting" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv", [["sandbox"], ["sandbox", "up", "--workers", "3"], ["sandbox", "--help"]]
)
def test_without_the_harness_sandbox_says_so_in_one_line(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No distribution declares ``sandbox``: one line on stderr naming where it comes from, 2."""
    monkeypatch.setattr(commands, "discover", dict)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1
    assert "not installed here" in err
    assert "slonkd-sandbox" in err


def test_a_declared_module_that_does_not_import_is_not_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A declared ``sandbox`` whose module is missing gets the same one-line answer."""
    parser = argparse.ArgumentParser(prog="slonkd")
    sub = parser.add_subparsers(dest="command")
    missing = {"sandbox": EntryPoint("sandbox", "no_such_harness.command", commands.GROUP)}
    assert commands.add_parsers(sub, missing) == {}
    assert parser.parse_known_args(["sandbox", "up"])[0].command == "sandbox"
    assert commands.absent("sandbox") == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_product_commands_still_reject_unknown_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An argument no command knows is argparse's usage error, exit 2, as before."""
    with pytest.raises(SystemExit) as done:
        main(["status", "--no-such-flag"])
    assert done.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_python_m_slonkd_sandbox_is_slonkd_sandbox() -> None:
    """``python -m slonkd_sandbox ARGS`` parses as ``slonkd sandbox ARGS`` (no installer needed)."""
    done = subprocess.run(
        [sys.executable, "-m", "slonkd_sandbox", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: slonkd sandbox demo")
    assert Path(slonkd_sandbox.__file__).resolve().parent == ROOT / "slonkd_sandbox"


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (["check", "-o", "json"], {"aiohttp", "slonkd.cli.agent", "slonkd.runtime.prestop"}),
        (
            ["config", "schema", "agent"],
            {"slonkd.cli.ops", "slonkd.cli.recheck", "slonkd.cli.check"},
        ),
    ],
)
def test_a_subcommand_imports_only_its_own_module(argv: list[str], absent: set[str]) -> None:
    """``slonkd check`` (run by kubelets and operators) loads no bus, HTTP or preStop code.

    Before, every run imported every subcommand: aiohttp alone was a fifth of a check's run.
    """
    probe = (
        "import sys, contextlib, io\n"
        "from slonkd.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main({argv!r})\n"
        f"print(rc, sorted(m for m in {sorted(absent)!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "0 []", (done.stdout, done.stderr[-2000:])


def test_help_and_an_unknown_command_still_list_every_subcommand() -> None:
    """The whole parser when no built-in subcommand is named: help lists all, the harness's too."""
    for argv, code in ((["--help"], 0), (["no-such-command"], 2)):
        done = subprocess.run(
            [sys.executable, "-m", "slonkd.cli.main", *argv],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == code, done.stderr
        shown = done.stdout + done.stderr
        for command in ("sandbox", "agent", "check", "coordinator", "config", "status", "recheck"):
            assert command in shown, (command, shown)

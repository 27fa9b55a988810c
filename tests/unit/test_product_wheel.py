"""The product's wheel, and so its images, carry no harness: read from the files that build them.

``container/build.sh`` runs ``pip wheel`` on the repository root, whose ``pyproject.toml``
names the product's packages; the Dockerfiles install that one distribution, ``slonkd``, from
those wheels. The harness (``slonkd_sandbox/``) is a distribution of its own, with its own
``pyproject.toml``. Here the root's package patterns are matched the way setuptools' finder
matches them (every directory below the root, ``fnmatchcase``), so the check needs no build;
``tests/contract/test_image.py`` looks inside a built image.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = ROOT / "container"


def _project(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def _packages(include: list[str]) -> list[str]:
    """Like setuptools' ``find_namespace_packages(ROOT, include=...)``: dotted directory names."""
    found = []
    for top, dirs, _ in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d.isidentifier())  # no .venv, .git, a-b
        for d in dirs:
            name = ".".join(Path(top, d).relative_to(ROOT).parts)
            if any(fnmatchcase(name, pattern) for pattern in include):
                found.append(name)
    return found


def test_the_product_wheel_packages_slonkd_only() -> None:
    """The root's package patterns take slonkd and its subpackages, none of the harness."""
    find = _project(ROOT / "pyproject.toml")["tool"]["setuptools"]["packages"]["find"]
    found = _packages(find["include"])
    assert "slonkd_sandbox" in _packages(["slonkd*"])  # what the old pattern took
    assert "slonkd" in found
    assert "slonkd.cli" in found
    assert (ROOT / "slonkd_sandbox" / "__init__.py").is_file()  # the harness is there to leave out
    assert [p for p in found if p != "slonkd" and not p.startswith("slonkd.")] == []
    assert not (ROOT / "slonkd" / "testing").exists()


def test_the_product_declares_no_harness_data_or_command() -> None:
    """The root's pyproject names no harness package data, extra, script or entry point."""
    config = _project(ROOT / "pyproject.toml")
    build = json.dumps([config["project"], config["tool"]["setuptools"]])
    assert "sandbox" not in build
    assert "testing" not in build
    assert "package-data" not in config["tool"]["setuptools"]


def test_the_harness_is_its_own_distribution_with_the_sandbox_command() -> None:
    """slonkd_sandbox/pyproject.toml builds ``slonkd-sandbox``, declaring ``slonkd sandbox``."""
    project = _project(ROOT / "slonkd_sandbox" / "pyproject.toml")
    assert project["project"]["name"] == "slonkd-sandbox"
    assert "slonkd" in project["project"]["dependencies"]
    assert project["project"]["entry-points"]["slonkd.commands"] == {
        "sandbox": "slonkd_sandbox.command"
    }
    assert project["tool"]["setuptools"]["package-dir"] == {"slonkd_sandbox": "."}
    harness = ROOT / "slonkd_sandbox"
    subpackages = sorted(
        ".".join(("slonkd_sandbox", *p.parent.relative_to(harness).parts))
        for p in harness.rglob("__init__.py")
        if "build" not in p.relative_to(harness).parts
    )
    assert project["tool"]["setuptools"]["packages"] == subpackages
    assert project["tool"]["setuptools"]["package-data"] == {"slonkd_sandbox": ["stages/*.yaml"]}
    assert sorted(p.name for p in (ROOT / "slonkd_sandbox" / "stages").glob("*.yaml"))


def test_build_sh_wheels_the_repository_root_only() -> None:
    """The images' wheels come from one ``pip wheel`` of the repository root."""
    script = (CONTAINER / "build.sh").read_text()
    wheels = re.findall(r"-m pip wheel [^\n]*", script)
    assert len(wheels) == 1
    assert wheels[0].rstrip().endswith('"$repo"')
    assert "sandbox" not in script


@pytest.mark.parametrize("image", ["slonkd", "slurm"])
def test_the_images_install_the_slonkd_distribution_alone(image: str) -> None:
    """Each Dockerfile that installs Python packages installs ``slonkd`` and nothing else."""
    text = (CONTAINER / image / "Dockerfile").read_text()
    installs = re.findall(r"pip install ([^\\\n]*)", text)
    assert installs
    for line in installs:
        targets = [word for word in line.split() if not word.startswith("-")]
        assert targets == ["slonkd"], line
    assert "sandbox" not in text

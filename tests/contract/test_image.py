"""The slonkd container image, built with buildah from this tree and run with ``buildah run``.

``container/build.sh base slonkd`` makes the Debian base with debootstrap (cached under
``~/.cache/slonkd/rootfs``) and the slonkd image from wheels of this tree. The test takes
the image the real node's pods run: :func:`slonkd_sandbox.chart.images.ensure_chart_images`
builds it with build.sh when this tree's content key has no archive yet (``scripts/bootstrap``
did so ahead of the tests), so it is the image of exactly these files, built once and not
again here. It runs ``slonkd --version`` and ``slonkd check -o json`` inside it, and looks
for the test harness there (``slonkd_sandbox``, a distribution of its own: the image must
hold none of it; ``tests/unit/test_product_wheel.py`` checks the same from the build files,
without a build). The SLURM, login and mosquitto images are exercised by ``container/smoke.sh`` (not
in CI: minutes more, see container/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

import slonkd
from slonkd_sandbox.chart.images import SPECS, ensure_chart_images
from slonkd_sandbox.procs import HarnessError

pytestmark = pytest.mark.real

DRIVER = ["--storage-driver", os.environ.get("BUILDAH_STORAGE_DRIVER", "vfs")]
# what `buildah run` itself adds to stderr when the command exits non-zero
BUILDAH_SAYS = ("subprocess exited with status", "Error: exit status")
# Run by the image's Python: what of the harness it can import or find on disk.
HARNESS_PROBE = """
import importlib.metadata as md, importlib.util as u, json, pathlib, slonkd
site = pathlib.Path(slonkd.__file__).parents[1]
names = [d.metadata["Name"] for d in md.distributions()]
files = [p for p in pathlib.Path("/opt").rglob("*") if p.name.startswith("slonkd_sandbox")]
print(json.dumps({
    "slonkd_sandbox": u.find_spec("slonkd_sandbox") is not None,
    "slonkd.testing": u.find_spec("slonkd.testing") is not None,
    "commands": sorted(ep.name for ep in md.entry_points(group="slonkd.commands")),
    "distributions": sorted(n for n in names if "slonkd" in n),
    "files": sorted(map(str, files + list(pathlib.Path("/opt").rglob("slonkd/testing")))),
    "site": str(site),
}))
"""


def _buildah(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["buildah", *DRIVER, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """A working container of the slonkd image built from this tree."""
    try:
        [image] = ensure_chart_images([s for s in SPECS if s.build_name == "slonkd"])
    except HarnessError as exc:
        pytest.fail(str(exc))
    assert shutil.which("buildah"), "build.sh installs buildah; it must be on PATH now"
    made = _buildah("from", f"oci-archive:{image.archive}")
    assert made.returncode == 0, made.stderr
    name = made.stdout.strip().splitlines()[-1]
    image_id = _buildah("inspect", "--format", "{{.FromImageID}}", name).stdout.strip()
    try:
        yield name
    finally:
        _buildah("rm", name)
        _buildah("rmi", image_id or image.ref)


def _run(container: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return _buildah("run", "--isolation", "chroot", "--", container, *argv, timeout_s=120)


def test_the_image_runs_slonkd_as_its_non_root_user(container: str) -> None:
    """`slonkd --version` in the image is this tree's version, run as SLURM's uid."""
    version = _run(container, "slonkd", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"slonkd {slonkd.__version__}"
    who = _run(container, "id", "-u")
    assert who.stdout.strip() == "64030"


def test_check_in_the_image_reports_json_and_never_ok_for_what_it_cannot_see(
    container: str,
) -> None:
    """`slonkd check -o json` inside the image: valid JSON; no GPU here is `unknown`, not ok."""
    checked = _run(container, "slonkd", "check", "-o", "json", "--expected-gpus", "8")
    assert checked.returncode in (0, 1), checked.stderr[-2000:]
    by_check = {r["check"]: r for r in json.loads(checked.stdout)["results"]}
    assert by_check["nvidia-smi"]["verdict"] == "unknown"  # no GPU tool here: never "ok"
    assert by_check["nvidia-smi"]["evidence"]
    assert by_check["dcgm-diag"]["verdict"] == "unknown"
    assert by_check["disk:/"]["verdict"] in ("ok", "warn", "fail")  # measured in the image


def test_the_image_holds_no_harness_module(container: str) -> None:
    """No slonkd_sandbox (nor the old slonkd.testing) in the image; `slonkd sandbox` says so."""
    probe = _run(container, "python3", "-c", HARNESS_PROBE)
    assert probe.returncode == 0, probe.stderr[-2000:]
    found = json.loads(probe.stdout)
    assert found["site"].startswith("/opt/slonkd/"), found  # the product's venv, probed
    assert found["distributions"] == ["slonkd"], found
    assert not found["slonkd_sandbox"], found
    assert not found["slonkd.testing"], found
    assert found["commands"] == [], found
    assert found["files"] == [], found
    sandbox = _run(container, "slonkd", "sandbox", "up")
    assert sandbox.returncode == 2, sandbox.stderr
    assert sandbox.stdout == ""
    said = [ln for ln in sandbox.stderr.splitlines() if not ln.startswith(BUILDAH_SAYS)]
    assert len(said) == 1, sandbox.stderr  # one line from slonkd; buildah adds its own
    assert "not installed here" in sandbox.stderr

"""The chart's container images on the real node: built once per content, imported with ``ctr``.

``container/build.sh`` builds slonkd, slurm-controller, slurm-worker, slurm-login and
mosquitto with buildah (no registry, no daemon). This module gives each image a content key,
the hash of everything its build reads from this tree: its Dockerfile and build target,
``build.sh``, ``slonk-init`` for the SLURM images, the base image's ID and, for the two
images that carry slonkd (slonkd and slurm-worker), every file of the ``slonkd`` wheel
(``pyproject.toml`` and ``slonkd/``; the harness, ``slonkd_sandbox``, is a distribution of its
own and not in it, so editing a test or the harness rebuilds no image). An image whose key
has an OCI archive in the cache (``$HOME/.cache/slonkd/images/chart-<image>-<key>.tar``,
``SLONKD_IMAGES_CACHE``) is neither rebuilt nor re-exported; the archive names it
``localhost/slonk/<image>:<key>``, so a pod spec names exactly the content built from this
tree. :func:`import_images` skips an image the node's containerd already holds under that
reference.

The chart selects these references with ``imagePullPolicy: Never`` (the node has no
registry): ``deploy/helm/slonk/ci/local-images-values.yaml`` plus :func:`image_values`.
``scripts/bootstrap`` builds them ahead of the tests (``python -m slonkd_sandbox.chart.images``;
cold: about 4 minutes of ``build.sh`` and 1.5 of export on 2 cores); the newest
:data:`KEEP_ARCHIVES` archives of each image are kept.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slonkd_sandbox.procs import HarnessError
from slonkd_sandbox.realnode.images import images_cache
from slonkd_sandbox.realnode.node import RealNode
from slonkd_sandbox.toolchain import cache_lock

REPO = Path(__file__).resolve().parents[2]
CONTAINER = REPO / "container"
BASE_IMAGE = "localhost/slonk/debian:bookworm"
BUILD_TIMEOUT_S = 3600.0
_CMD_TIMEOUT_S = 600.0
DRIVER = os.environ.get("BUILDAH_STORAGE_DRIVER", "vfs")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageSpec:
    """One image of ``container/build.sh``: its build.sh name and what its build reads."""

    build_name: str
    """The argument of build.sh (slonkd, controller, worker, login, mosquitto)."""
    repository: str
    """``localhost/slonk/<...>``, as build.sh tags it and the chart's values name it."""
    values_key: str
    """The key under the chart's ``images``."""
    dockerfile: str
    target: str = ""
    slurm: bool = False
    """Reads container/init/slonk-init."""
    wheel: bool = False
    """Carries slonkd (its wheel)."""
    inputs: tuple[str, ...] = ()
    """More files under container/ its build copies in."""


SPECS: tuple[ImageSpec, ...] = (
    ImageSpec(
        build_name="slonkd",
        repository="localhost/slonk/slonkd",
        values_key="slonkd",
        dockerfile="slonkd/Dockerfile",
        wheel=True,
    ),
    ImageSpec(
        build_name="controller",
        repository="localhost/slonk/slurm-controller",
        values_key="controller",
        dockerfile="slurm/Dockerfile",
        target="controller",
        slurm=True,
    ),
    ImageSpec(
        build_name="worker",
        repository="localhost/slonk/slurm-worker",
        values_key="worker",
        dockerfile="slurm/Dockerfile",
        target="worker",
        slurm=True,
        wheel=True,
    ),
    ImageSpec(
        build_name="login",
        repository="localhost/slonk/slurm-login",
        values_key="login",
        dockerfile="slurm/Dockerfile",
        target="login",
        slurm=True,
    ),
    ImageSpec(
        build_name="mosquitto",
        repository="localhost/slonk/mosquitto",
        values_key="mosquitto",
        dockerfile="mosquitto/Dockerfile",
    ),
)


ACCOUNTING_SPECS: tuple[ImageSpec, ...] = (
    ImageSpec(
        build_name="slurmdbd",
        repository="localhost/slonk/slurm-slurmdbd",
        values_key="slurmdbd",
        dockerfile="slurmdbd/Dockerfile",
        slurm=True,
    ),
    ImageSpec(
        build_name="mariadb",
        repository="localhost/slonk/mariadb",
        values_key="mariadb",
        dockerfile="mariadb/Dockerfile",
        inputs=("mariadb/slonk-mariadb",),
    ),
)
"""The images of the chart's ``accounting.enabled`` (built only where a test asks for them)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChartImage:
    """One built image: its reference (``repository:key``) and its cached OCI archive."""

    spec: ImageSpec
    key: str
    archive: Path

    @property
    def ref(self) -> str:
        """The image reference pods name."""
        return f"{self.spec.repository}:{self.key}"


def _log(message: str) -> None:
    print(f"[chart-images] {message}", file=sys.stderr, flush=True)


def _run(argv: Sequence[str], *, timeout_s: float = _CMD_TIMEOUT_S, **kw: object) -> str:
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        **kw,  # type: ignore[call-overload]
    )
    if proc.returncode != 0:
        raise HarnessError(
            f"{' '.join(argv[:4])} failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
        )
    return str(proc.stdout)


def _buildah(*args: str, timeout_s: float = _CMD_TIMEOUT_S) -> str:
    return _run(["buildah", "--storage-driver", DRIVER, *args], timeout_s=timeout_s)


def _wheel_files() -> list[Path]:
    """The files the slonkd wheel is built from (see the module doc)."""
    out = _run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "--", "slonkd"],
        timeout_s=60,
    )
    # README.md is the wheel's long description only: an edit to it need not rebuild images.
    files = [REPO / "pyproject.toml"]
    for name in sorted(out.split("\n")):
        if name and (REPO / name).is_file():
            files.append(REPO / name)
    return files


def content_key(spec: ImageSpec, base_id: str) -> str:
    """The hash of every input of ``spec``'s build (16 hex digits)."""
    digest = hashlib.sha256()
    digest.update(f"{spec.build_name}\0{spec.target}\0{base_id}\0".encode())
    inputs = [CONTAINER / "build.sh", CONTAINER / spec.dockerfile]
    if spec.slurm:
        inputs.append(CONTAINER / "init" / "slonk-init")
    inputs += [CONTAINER / name for name in spec.inputs]
    if spec.wheel:
        inputs += _wheel_files()
    for path in inputs:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _build_sh(*images: str, tag: str = "dev") -> None:
    started = time.monotonic()
    _log(f"container/build.sh {' '.join(images)} (TAG={tag})")
    proc = subprocess.run(
        [str(CONTAINER / "build.sh"), *images],
        env={**os.environ, "TAG": tag},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise HarnessError(f"container/build.sh {' '.join(images)} failed: {proc.stderr[-3000:]}")
    _log(f"built {' '.join(images)} in {time.monotonic() - started:.0f} s")


def ensure_chart_images(specs: Sequence[ImageSpec] = SPECS) -> list[ChartImage]:
    """The chart's images as cached OCI archives, building and exporting only what is missing."""
    cache = images_cache()
    with cache_lock(cache / ".chart-images.lock"):
        _build_sh("base")
        base_id = _buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", BASE_IMAGE)
        images = []
        for spec in specs:
            key = content_key(spec, base_id.strip())
            images.append(ChartImage(spec=spec, key=key, archive=cache / _archive_name(spec, key)))
        missing = [img for img in images if not img.archive.exists()]
        if not missing:
            return images
        # One build.sh run (one wheel build) under a scratch tag, then each under its key.
        scratch = f"build-{os.getpid()}"
        _build_sh(*(img.spec.build_name for img in missing), tag=scratch)
        for img in missing:
            started = time.monotonic()
            built = f"{img.spec.repository}:{scratch}"
            _buildah("tag", built, img.ref)
            tmp = img.archive.with_suffix(f".tmp{os.getpid()}")
            tmp.unlink(missing_ok=True)
            _buildah("push", "--disable-compression", img.ref, f"oci-archive:{tmp}:{img.ref}")
            tmp.replace(img.archive)
            _buildah("rmi", built, img.ref)
            _log(f"exported {img.ref} in {time.monotonic() - started:.0f} s")
            _prune(cache, img.spec)
        return images


KEEP_ARCHIVES = 4
"""Archives kept per image (the newest; other worktrees may still use an older key)."""


def _archive_name(spec: ImageSpec, key: str) -> str:
    """The cache's file name of ``spec``'s archive for ``key`` (``*``: a glob of every key)."""
    return f"chart-{spec.build_name}-{key}.tar"


def _prune(cache: Path, spec: ImageSpec) -> None:
    archives = sorted(
        cache.glob(_archive_name(spec, "*")), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for old in archives[KEEP_ARCHIVES:]:
        old.unlink(missing_ok=True)


def import_images(node: RealNode, images: Sequence[ChartImage]) -> list[str]:
    """Import into ``node``'s containerd every image it lacks; return the refs imported."""
    have = set(node.ctr("images", "ls", "-q").split())
    done = []
    for img in images:
        if img.ref in have:
            continue
        node.ctr("images", "import", str(img.archive), timeout_s=_CMD_TIMEOUT_S)
        if img.ref not in set(node.ctr("images", "ls", "-q").split()):
            raise HarnessError(f"ctr images import {img.archive} did not create {img.ref}")
        done.append(img.ref)
    return done


def image_values(images: Sequence[ChartImage]) -> list[str]:
    """``--set-json`` arguments naming these images in the chart."""
    return [
        f'images.{img.spec.values_key}={{"repository":"{img.spec.repository}","tag":"{img.key}"}}'
        for img in images
    ]


def main() -> None:
    """Build and export the images ahead of time: ``python -m slonkd_sandbox.chart.images``."""
    for img in ensure_chart_images():
        print(f"{img.ref} {img.archive}")


if __name__ == "__main__":
    main()

__all__ = [
    "SPECS",
    "ChartImage",
    "ImageSpec",
    "content_key",
    "ensure_chart_images",
    "image_values",
    "import_images",
]

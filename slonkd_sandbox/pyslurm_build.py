"""pyslurm built for each SLURM release the harness runs, as a user builds it, and cached.

    python -m slonkd_sandbox.pyslurm_build 22.05 24.11

prints the directory to put on ``PYTHONPATH`` for each release it could build (stdout, one a
line); for a release it could not, one line on stderr says why (``[bootstrap] pyslurm 24.11:
no source (...); pyslurm tests will skip``) and the same reason goes to ``STATUS-<release>``
in the cache, where :func:`pyslurm_status` reads it for the tests' skip reason. With
``SLONKD_REQUIRE_PYSLURM=1`` (CI) a missing build is a failure (exit 1).

The recipe (docs/architecture.md, "The test harness"):

- Source: ``$SLONKD_VENDOR_DIR/<archive>`` whose sha256 must equal the pin in
  :data:`slonkd_sandbox.versions.PYSLURM`, else upstream's archive of the pinned commit by
  curl (its sha256 is recorded, not pinned: GitHub's bytes may differ from ``git archive``).
- A build venv per release outside ``.venv`` with the requirements of
  :data:`slonkd_sandbox.versions.PYSLURM_BUILD_REQUIREMENTS`, then ``setup.py build_ext -j 2
  bdist_wheel`` with ``CFLAGS=-g0`` and ``pip install --no-deps --target SITE`` of the wheel.
  pyslurm is never installed into ``.venv``: ``import pyslurm`` runs ``slurm_init``, which
  ends the process without a configuration source, so only a child process may load it.
- 22.05 (Debian 12's SLURM on the host): ``libslurm-dev``'s ``/usr/include`` and
  ``/usr/lib/x86_64-linux-gnu`` (pyslurm's setup.py looks in /usr/lib64 by default).
- 24.11 (the trixie root of :mod:`slonkd_sandbox.slurm.root`, ``libslurm-dev`` added by
  ``ensure_dev``): an include directory holding only ``slurm -> ROOT/usr/include/slurm`` (the
  root's newer glibc headers never reach the host's gcc), ``SLURM_LIB_DIR`` the root's
  library directory (setup.py finds ``slurm-wlm/libslurmfull.so`` below it and puts that
  directory into the modules' RUNPATH). Built with the venv's Python 3.11 and the host's gcc;
  loaded under the root's loader and C library, as
  :meth:`slonkd_sandbox.slurm.chroot.ChrootSlurmCluster.libslurm_argv` runs a program.

Cache: ``~/.cache/slonkd/pyslurm/`` (``SLONKD_PYSLURM_CACHE``), one directory per
``<release>-<libslurm-dev's exact version>-<archive sha256[:16]>-cp311-r<RECIPE>`` whose
``site/`` is the install and whose ``.slonkd-complete`` (JSON: source, commit, build seconds)
is written last; builds of one release are serialised by a lock. Neighbours:
:mod:`slonkd_sandbox.versions` (pins), :mod:`slonkd_sandbox.slurm.root` (the release root),
:mod:`slonkd_sandbox.toolchain` (cache and lock), scripts/bootstrap (runs it),
tests/contract/test_pyslurm_build.py (loads each build against its release's cluster).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slonkd_sandbox import versions
from slonkd_sandbox.slurm.root import SUITES, ensure_dev, slurm_root_path
from slonkd_sandbox.toolchain import cache_lock, user_cache

RECIPE = 1
"""Bumped whenever the recipe changes what is built, so every cached build is rebuilt."""

VENDOR_ENV = "SLONKD_VENDOR_DIR"
"""A directory holding the pinned source archives (CI: ``../shared/vendor``)."""
REQUIRE_ENV = "SLONKD_REQUIRE_PYSLURM"
"""``1``: a release without a build is a failure (the module exits 1, the tests fail)."""
CACHE_ENV = "SLONKD_PYSLURM_CACHE"
UPSTREAM_URL = "https://github.com/PySlurm/pyslurm/archive/{commit}.tar.gz"
HOST_RELEASE = "22.05"
"""The SLURM of the host (Debian 12); the other releases are roots (``slurm.root.SUITES``)."""
LIB_SUBDIR = "usr/lib/x86_64-linux-gnu"
DEV_PACKAGE = "libslurm-dev"
COMPLETE = ".slonkd-complete"

FETCH_TIMEOUT_S = 120
PIP_TIMEOUT_S = 600
BUILD_TIMEOUT_S = 1800
QUERY_TIMEOUT_S = 60

Fetch = Callable[[str, Path], str | None]
"""Download a URL to a path; ``None`` when done, else why not."""


class BuildError(RuntimeError):
    """A step of the build failed (the message says which, and where its log is)."""


@dataclass(frozen=True, slots=True)
class Source:
    """A source archive of pyslurm, checked: where it is, its sha256, where it came from."""

    archive: Path
    sha256: str
    origin: str


def cache_dir() -> Path:
    """Where builds, build venvs, logs and STATUS files live."""
    return user_cache("pyslurm", CACHE_ENV)


def python_tag() -> str:
    """The interpreter's wheel tag (``cp311``): builds are per interpreter."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def upstream_url(commit: str) -> str:
    """Upstream's archive of ``commit`` (what a user's ``pip install pyslurm @ URL`` fetches)."""
    return UPSTREAM_URL.format(commit=commit)


def cache_key(release: str, slurm_version: str, sha256: str, tag: str | None = None) -> str:
    """The cache directory's name of one build (the exact SLURM version: the suite may move)."""
    safe = slurm_version.replace(":", "_").replace("/", "_")
    return f"{release}-{safe}-{sha256[:16]}-{tag or python_tag()}-r{RECIPE}"


def sha256_of(path: Path) -> str:
    """The file's sha256 (hex)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def curl(url: str, dest: Path) -> str | None:
    """Fetch ``url`` to ``dest`` with curl, bounded in time; ``None`` or why it failed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    argv = ["curl", "-fsSL", "--connect-timeout", "10", "--max-time", str(FETCH_TIMEOUT_S)]
    try:
        proc = subprocess.run(
            [*argv, "-o", str(dest), url],
            capture_output=True,
            text=True,
            timeout=FETCH_TIMEOUT_S + 10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        dest.unlink(missing_ok=True)
        return f"curl: {exc}"
    if proc.returncode != 0:
        dest.unlink(missing_ok=True)
        said = proc.stderr.strip().splitlines()
        return said[-1] if said else f"curl exited {proc.returncode}"
    return None


def find_source(
    release: str, work: Path, *, vendor_dir: str | None, fetch: Fetch = curl
) -> Source | str:
    """The source archive of ``release``'s pinned commit, or why there is none.

    First ``vendor_dir/<archive>`` when its sha256 equals the pin; else upstream's archive of
    the commit, fetched into ``work``.
    """
    archive, commit, pinned = versions.PYSLURM[release]
    reasons: list[str] = []
    if not vendor_dir:
        reasons.append(f"${VENDOR_ENV} not set")
    else:
        candidate = Path(vendor_dir) / archive
        if not candidate.is_file():
            reasons.append(f"no ${VENDOR_ENV}/{archive}")
        else:
            got = sha256_of(candidate)
            if got == pinned:
                return Source(candidate, got, "vendor")
            reasons.append(f"${VENDOR_ENV}/{archive} has sha256 {got[:16]}, pinned {pinned[:16]}")
    url = upstream_url(commit)
    dest = work / f"pyslurm-{commit}.tar.gz"
    failed = fetch(url, dest)
    if failed is None and dest.is_file():
        return Source(dest, sha256_of(dest), "upstream")
    reasons.append(f"{url}: {failed or 'nothing fetched'}")
    return "no source (" + "; ".join(reasons) + ")"


def release_root(release: str) -> Path | None:
    """The root holding ``release``'s SLURM, or ``None`` for the host's (22.05)."""
    if release == HOST_RELEASE:
        return None
    if release not in SUITES:
        raise ValueError(f"no SLURM {release} known to the harness")
    return slurm_root_path(release)


def slurm_version(release: str) -> str | None:
    """The exact version of ``libslurm-dev`` that ``release``'s build uses, if installed."""
    root = release_root(release)
    argv = ["dpkg-query", "-W", "-f=${db:Status-Status} ${Version}", DEV_PACKAGE]
    if root is not None:
        if not (root / "var/lib/dpkg").is_dir():
            return None
        argv.insert(1, f"--admindir={root / 'var/lib/dpkg'}")
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    status, _, version = proc.stdout.strip().partition(" ")
    if proc.returncode != 0 or status != "installed" or not version:
        return None
    return version


def _marker(directory: Path) -> dict[str, object] | None:
    try:
        got = json.loads((directory / COMPLETE).read_text())
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def pick_build(cache: Path, release: str, slurm: str, *, tag: str | None = None) -> Path | None:
    """The complete build of ``release``'s pinned commit for ``slurm`` in ``cache``, if any.

    The pinned archive's build first; else one of upstream's archive of the same commit.
    A build whose SLURM library directory has gone (another root cache) does not count.
    """
    _archive, commit, pinned = versions.PYSLURM[release]
    preferred = cache / cache_key(release, slurm, pinned, tag)
    pattern = cache_key(release, slurm, "*", tag)
    candidates = [preferred, *sorted(p for p in cache.glob(pattern) if p != preferred)]
    for directory in candidates:
        marker = _marker(directory)
        if marker is None or marker.get("commit") != commit:
            continue
        if not Path(str(marker.get("slurm_lib_dir", ""))).is_dir():
            continue
        if (directory / "site" / "pyslurm").is_dir():
            return directory / "site"
    return None


def pyslurm_site(release: str) -> Path | None:
    """The directory holding ``release``'s built pyslurm (for ``PYTHONPATH``), or ``None``."""
    if release not in versions.PYSLURM:
        return None
    slurm = slurm_version(release)
    if slurm is None:
        return None
    return pick_build(cache_dir(), release, slurm)


def status_path(release: str) -> Path:
    """Where the reason for ``release``'s missing build is kept."""
    return cache_dir() / f"STATUS-{release}"


def pyslurm_status(release: str) -> str:
    """Why ``release`` has no pyslurm build (the last build's reason), for a skip message."""
    try:
        said = status_path(release).read_text().strip()
    except OSError:
        said = ""
    return said or (
        f"pyslurm {release}: not built (python -m slonkd_sandbox.pyslurm_build {release}; "
        "scripts/bootstrap runs it)"
    )


def _log(message: str) -> None:
    print(f"[pyslurm] {message}", file=sys.stderr, flush=True)


def _run(
    argv: Sequence[str],
    *,
    log: Path,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run ``argv`` with its output appended to ``log``; a failure names the log's last line."""
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        try:
            proc = subprocess.run(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
                cwd=cwd,
                env=None if env is None else dict(env),
            )
        except subprocess.TimeoutExpired as exc:
            raise BuildError(f"{argv[0]} ran past {timeout:.0f} s (log {log})") from exc
    if proc.returncode != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        last = lines[-1][:300] if lines else ""
        raise BuildError(f"{Path(argv[0]).name} exited {proc.returncode}: {last} (log {log})")
    shown = " ".join([Path(argv[0]).name, *argv[1:4]])
    _log(f"  {shown} ... {time.monotonic() - started:.0f} s")


def build_venv(release: str, cache: Path, log: Path) -> Path:
    """The build venv of ``release`` (its Python), made or remade when its requirements changed."""
    venv = cache / f"buildenv-{release}-{python_tag()}"
    wanted = list(versions.PYSLURM_BUILD_REQUIREMENTS[release])
    stamp = venv / ".slonkd-requirements"
    python = venv / "bin" / "python"
    if python.exists() and stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return python
    _log(f"build venv {venv} ({' '.join(wanted)})")
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], log=log, timeout=PIP_TIMEOUT_S)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, *wanted], log=log, timeout=PIP_TIMEOUT_S)
    stamp.write_text(json.dumps(wanted) + "\n")
    return python


def _extract(archive: Path, into: Path) -> Path:
    """Unpack ``archive`` (one top directory, as ``git archive`` and GitHub make) into ``into``."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    tops = [p for p in into.iterdir() if p.is_dir()]
    if len(tops) != 1 or not (tops[0] / "setup.py").is_file():
        raise BuildError(f"{archive} is not one pyslurm source tree: {[p.name for p in tops]}")
    return tops[0]


def slurm_dirs(release: str, root: Path | None, stage: Path) -> tuple[Path, Path]:
    """(SLURM_INCLUDE_DIR, SLURM_LIB_DIR) for ``release``'s build.

    On the host Debian's own; for a root, ``stage`` gets only a ``slurm`` link to the root's
    headers (so ``-I`` brings in no glibc header of the root) and the library directory is the
    root's (setup.py looks in its ``slurm-wlm/`` too).
    """
    if root is None:
        return Path("/usr/include"), Path("/") / LIB_SUBDIR
    stage.mkdir(parents=True, exist_ok=True)
    link = stage / "slurm"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(root / "usr/include/slurm")
    return stage, root / LIB_SUBDIR


def _loader_list(root: Path | None, module: Path) -> list[str]:
    """argv listing ``module``'s libraries as the process that imports it resolves them."""
    if root is None:
        return ["ldd", str(module)]
    libdirs = [
        str(sysconfig.get_config_var("LIBDIR")),
        str(root / "lib/x86_64-linux-gnu"),
        str(root / LIB_SUBDIR),
    ]
    loader = root / "lib64/ld-linux-x86-64.so.2"
    return [str(loader), "--library-path", ":".join(libdirs), "--list", str(module)]


def _check_links(root: Path | None, site: Path, log: Path) -> None:
    """Every pyslurm module resolves all its libraries, SLURM's among them."""
    modules = sorted((site / "pyslurm" / "core").glob("node*.so"))
    if not modules:
        raise BuildError(f"no pyslurm/core/node*.so in {site}")
    argv = _loader_list(root, modules[0])
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False
    )
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0 or "not found" in proc.stdout or "libslurm" not in proc.stdout:
        raise BuildError(f"{modules[0].name} does not resolve libslurm (log {log})")


def build_env(release: str, include: Path, lib: Path) -> dict[str, str]:
    """The build's environment: SLURM's directories, no debug info, 2 jobs."""
    return {
        **os.environ,
        "SLURM_INCLUDE_DIR": str(include),
        "SLURM_LIB_DIR": str(lib),
        "CFLAGS": "-g0",
        "PYSLURM_BUILD_JOBS": "2",
    }


def ensure_pyslurm(release: str, *, vendor_dir: str | None, fetch: Fetch = curl) -> Path | str:
    """``release``'s built pyslurm (its site directory), building it if needed; else why not."""
    if release not in versions.PYSLURM:
        raise ValueError(f"no pyslurm pinned for SLURM {release}")
    site = pyslurm_site(release)
    if site is not None:
        return site
    root = release_root(release)
    if root is not None:
        ensure_dev(release)
    slurm = slurm_version(release)
    if slurm is None:
        where = "the host" if root is None else str(root)
        return f"{DEV_PACKAGE} is not installed on {where} (apt-get install {DEV_PACKAGE})"
    cache = cache_dir()
    with cache_lock(cache / f".{release}.lock"):
        site = pick_build(cache, release, slurm)
        if site is not None:
            return site
        return _build(release, root, slurm, cache, vendor_dir=vendor_dir, fetch=fetch)


def _build(
    release: str,
    root: Path | None,
    slurm: str,
    cache: Path,
    *,
    vendor_dir: str | None,
    fetch: Fetch,
) -> Path | str:
    started = time.monotonic()
    work = cache / f".build-{release}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    source = find_source(release, work, vendor_dir=vendor_dir, fetch=fetch)
    if isinstance(source, str):
        shutil.rmtree(work, ignore_errors=True)
        return source
    key = cache_key(release, slurm, source.sha256)
    out = cache / key
    log = cache / f"build-{release}.log"
    log.write_text(f"pyslurm {release} against SLURM {slurm}, {source.origin} {source.archive}\n")
    _log(f"building {key} from {source.archive} (cold; cached afterwards; log {log})")
    shutil.rmtree(out, ignore_errors=True)
    tree = _extract(source.archive, work / "src")
    python = build_venv(release, cache, log)
    include, lib = slurm_dirs(release, root, out / "inc")
    wheels = work / "wheel"
    _run(
        [str(python), "setup.py", "build_ext", "-j", "2", "bdist_wheel", "-d", str(wheels)],
        log=log,
        timeout=BUILD_TIMEOUT_S,
        cwd=tree,
        env=build_env(release, include, lib),
    )
    built = sorted(wheels.glob("pyslurm-*.whl"))
    if len(built) != 1:
        raise BuildError(f"expected one pyslurm wheel in {wheels}, found {built}")
    site = out / "site"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(
        [*pip, "--no-deps", "--no-index", "--target", str(site), str(built[0])],
        log=log,
        timeout=PIP_TIMEOUT_S,
    )
    _check_links(root, site, log)
    seconds = round(time.monotonic() - started)
    _archive, commit, _pinned = versions.PYSLURM[release]
    marker = {
        "release": release,
        "slurm": slurm,
        "commit": commit,
        "sha256": source.sha256,
        "origin": source.origin,
        "slurm_lib_dir": str(lib),
        "wheel": built[0].name,
        "build_s": seconds,
    }
    (out / COMPLETE).write_text(json.dumps(marker, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    status_path(release).unlink(missing_ok=True)
    _log(f"pyslurm {release} built in {seconds} s -> {site}")
    return site


def main(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> int:
    """Build (or find) pyslurm for each release in ``argv``; print each site directory."""
    releases = list(argv) or list(versions.PYSLURM)
    unknown = [r for r in releases if r not in versions.PYSLURM]
    if unknown:
        print(f"[pyslurm] no pyslurm pinned for {unknown}", file=sys.stderr)
        return 2
    require = env.get(REQUIRE_ENV) == "1"
    rc = 0
    for release in releases:
        try:
            got = ensure_pyslurm(release, vendor_dir=env.get(VENDOR_ENV) or None)
        except (RuntimeError, OSError, subprocess.SubprocessError, tarfile.TarError) as exc:
            got = f"build failed: {exc}"
        if isinstance(got, Path):
            print(got, flush=True)
            continue
        why = f"pyslurm {release}: {got}"
        status_path(release).parent.mkdir(parents=True, exist_ok=True)
        status_path(release).write_text(why + "\n")
        then = f"{REQUIRE_ENV}=1: failing" if require else "pyslurm tests will skip"
        print(f"[bootstrap] {why}; {then}", file=sys.stderr, flush=True)
        if require:
            rc = 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

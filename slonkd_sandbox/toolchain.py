"""Build (or find in the cache) the Go-built binaries of the Kubernetes harness.

kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok, helm, and the
real node's kubelet and CoreDNS are built from Go modules through the Go module proxy, with the
recipe described in docs/architecture.md ("The test harness"). Each tool lands in
``$HOME/.cache/slonkd/tools/<tool>-<version>/`` (override with ``SLONKD_TOOLS_CACHE``), so a
warm start builds nothing. A cold build takes about 13 minutes on 2 cores (plus the kubelet's
and CoreDNS's, see :func:`ensure_node_tools`) and prints every step with its duration.

This module only builds; starting the services is ``slonkd_sandbox.kube.cluster``'s job. It also
says where the harness's caches live (:func:`user_cache`, :func:`cache_lock`), for
:mod:`slonkd_sandbox.realnode.images`, :mod:`slonkd_sandbox.slurm.root` and
:mod:`slonkd_sandbox.chart.images` too.

Run ``python -m slonkd_sandbox.toolchain`` to build everything ahead of time.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from slonkd_sandbox import versions

BUILD_TIMEOUT_S = 3600.0
"""Upper bound for any single go command; a cold kube build takes about 6 minutes."""


class ToolchainError(RuntimeError):
    """A tool could not be built or found."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tools:
    """Paths of every built binary, plus kwok's directory of stage files."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path
    kwok: Path
    helm: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeTools:
    """Binaries of the real node (see :mod:`slonkd_sandbox.realnode.node`): kubelet and CoreDNS."""

    kubelet: Path
    coredns: Path


def user_cache(name: str, override_env: str) -> Path:
    """A cache of the harness: ``$HOME/.cache/slonkd/<name>``, or what ``override_env`` names."""
    override = os.environ.get(override_env)
    if override:
        return Path(override)
    return Path.home() / ".cache" / "slonkd" / name


def cache_root() -> Path:
    """Where built tools live, keyed by version below it."""
    return user_cache("tools", "SLONKD_TOOLS_CACHE")


def _log(message: str) -> None:
    print(f"[toolchain] {message}", file=sys.stderr, flush=True)


def _run(argv: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    started = time.monotonic()
    _log(f"$ {' '.join(argv)}")
    proc = subprocess.run(
        list(argv),
        cwd=cwd,
        env={**os.environ, "CGO_ENABLED": "0", **(env or {})},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-4000:]
        raise ToolchainError(f"{argv[0]} {argv[1]} failed (rc {proc.returncode}): {tail}")
    _log(f"  done in {time.monotonic() - started:.1f} s")
    return proc.stdout


@contextmanager
def cache_lock(path: Path) -> Iterator[None]:
    """Serialise builds of one cached thing across processes (parallel runs share the cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ready(directory: Path, names: Sequence[str]) -> bool:
    return (directory / ".complete").exists() and all((directory / n).exists() for n in names)


def _finish(directory: Path, started: float, what: str) -> None:
    (directory / ".complete").write_text(f"{time.time()}\n")
    _log(f"{what} built in {time.monotonic() - started:.0f} s -> {directory}")


def _kube_ldflags(version: str) -> str:
    major, minor, _patch = version.split(".")
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion=v{version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


_STAGING_RE = re.compile(r"^\s*(k8s\.io/[\w.\-/]+)\s+v0\.0\.0\s*$", re.MULTILINE)


KUBE_CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


def _build_kube(out: Path, cmds: Sequence[str] = KUBE_CONTROL_PLANE) -> None:
    """Commands of k8s.io/kubernetes (by default the control plane) in one scratch module.

    The kubelet is built the same way into a directory of its own, so adding it did not
    invalidate the control plane's cache; the Go build cache makes its build incremental.
    """
    version = versions.KUBERNETES
    staging_version = "v0." + version.split(".", 1)[1]
    work = out.parent / f".build-{out.name}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.monotonic()
    _run(["go", "mod", "init", "slonkd.local/kubebuild"], cwd=work)
    info = json.loads(
        _run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@v{version}"], cwd=work)
    )
    gomod = Path(info["GoMod"]).read_text()
    staging = sorted(set(_STAGING_RE.findall(gomod)))
    if not staging:
        raise ToolchainError("no k8s.io staging requirements found in kubernetes' go.mod")
    edit = ["go", "mod", "edit", f"-require=k8s.io/kubernetes@v{version}"]
    edit += [f"-replace={m}={m}@{staging_version}" for m in staging]
    edit += [f"-tool=k8s.io/kubernetes/cmd/{c}" for c in cmds]
    _run(edit, cwd=work)
    _run(["go", "mod", "tidy"], cwd=work)
    out.mkdir(parents=True, exist_ok=True)
    _run(
        ["go", "build", "-trimpath", "-ldflags", _kube_ldflags(version), "-o", f"{out}/"]
        + [f"k8s.io/kubernetes/cmd/{c}" for c in cmds],
        cwd=work,
    )
    shutil.rmtree(work, ignore_errors=True)
    _finish(out, started, f"{', '.join(cmds)} {version}")


def _build_go_command(out: Path, *, name: str, pkg: str, version: str, ldflags: str) -> None:
    """The Go command ``pkg`` at ``version``, built in a scratch module as ``out/name``."""
    work = out.parent / f".build-{name}-{version}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.monotonic()
    _run(["go", "mod", "init", f"slonkd.local/{name}build"], cwd=work)
    _run(["go", "mod", "edit", f"-require={pkg}@v{version}", f"-tool={pkg}"], cwd=work)
    _run(["go", "mod", "tidy"], cwd=work)
    out.mkdir(parents=True, exist_ok=True)
    _run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(out / name), pkg], cwd=work)
    shutil.rmtree(work, ignore_errors=True)
    _finish(out, started, f"{name} {version}")


def _build_etcd(out: Path) -> None:
    _build_go_command(
        out, name="etcd", pkg="go.etcd.io/etcd/server/v3", version=versions.ETCD, ldflags="-s -w"
    )


def _build_coredns(out: Path) -> None:
    """CoreDNS in a scratch module (its default plugin set includes ``kubernetes``)."""
    version = versions.COREDNS
    _build_go_command(
        out,
        name="coredns",
        pkg="github.com/coredns/coredns",
        version=version,
        ldflags=f"-s -w -X github.com/coredns/coredns/coremain.GitCommit=v{version}",
    )


def _go_install(out: Path, module_cmd: str, version: str, what: str, ldflags: str = "") -> None:
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    _run(
        [
            "go",
            "install",
            "-trimpath",
            "-ldflags",
            f"-s -w {ldflags}".strip(),
            f"{module_cmd}@v{version}",
        ],
        cwd=out,
        env={"GOBIN": str(out)},
    )
    _finish(out, started, what)


def ensure_tools() -> Tools:
    """Return the tools, building whatever the cache lacks (idempotent, process-safe)."""
    root = cache_root()
    kube = root / f"kubernetes-{versions.KUBERNETES}"
    etcd = root / f"etcd-{versions.ETCD}"
    kwok = root / f"kwok-{versions.KWOK}"
    helm = root / f"helm-{versions.HELM}"
    plan: list[tuple[Path, list[str], Callable[[Path], None]]] = [
        (kube, list(KUBE_CONTROL_PLANE), _build_kube),
        (etcd, ["etcd"], _build_etcd),
        (
            kwok,
            ["kwok"],
            lambda o: _go_install(o, "sigs.k8s.io/kwok/cmd/kwok", versions.KWOK, "kwok"),
        ),
        (
            helm,
            ["helm"],
            lambda o: _go_install(
                o,
                "helm.sh/helm/v4/cmd/helm",
                versions.HELM,
                "helm",
                # helm reports only major.minor unless told its full version at link time
                f"-X helm.sh/helm/v4/internal/version.version=v{versions.HELM}",
            ),
        ),
    ]
    _build_missing(root, plan)
    return Tools(
        kube_apiserver=kube / "kube-apiserver",
        kube_controller_manager=kube / "kube-controller-manager",
        kube_scheduler=kube / "kube-scheduler",
        kubectl=kube / "kubectl",
        etcd=etcd / "etcd",
        kwok=kwok / "kwok",
        helm=helm / "helm",
    )


def ensure_node_tools() -> NodeTools:
    """Return the real node's kubelet and CoreDNS, building what the cache lacks.

    Separate from :func:`ensure_tools` so that tests without a real node never wait for
    them on a cold cache (the bootstrap builds both sets).
    """
    root = cache_root()
    kubelet = root / f"kubelet-{versions.KUBERNETES}"
    coredns = root / f"coredns-{versions.COREDNS}"
    _build_missing(
        root,
        [
            (kubelet, ["kubelet"], lambda o: _build_kube(o, ("kubelet",))),
            (coredns, ["coredns"], _build_coredns),
        ],
    )
    return NodeTools(kubelet=kubelet / "kubelet", coredns=coredns / "coredns")


def _build_missing(
    root: Path, plan: Sequence[tuple[Path, list[str], Callable[[Path], None]]]
) -> None:
    for directory, names, build in plan:
        with cache_lock(root / f".{directory.name}.lock"):
            if _ready(directory, names):
                continue
            if shutil.which("go") is None:
                raise ToolchainError("go is not installed; it is needed to build the harness")
            _log(f"building {directory.name} (cold; cached afterwards)")
            build(directory)


def main() -> int:
    """Build every tool and print where they are."""
    started = time.monotonic()
    try:
        tools = ensure_tools()
        node_tools = ensure_node_tools()
    except ToolchainError as exc:
        _log(f"error: {exc}")
        return 1
    for field in Tools.__dataclass_fields__:
        _log(f"{field}: {getattr(tools, field)}")
    for field in NodeTools.__dataclass_fields__:
        _log(f"{field}: {getattr(node_tools, field)}")
    _log(f"all tools ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The pyslurm build's pure parts: its cache key, where its source comes from, which build counts.

Nothing is compiled or fetched here: the fetch is a stand-in, the archives a few bytes
(slonkd_sandbox/pyslurm_build.py; the real build is tests/contract/test_pyslurm_build.py's).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from slonkd_sandbox import pyslurm_build, versions
from slonkd_sandbox.pyslurm_build import RECIPE, Source, cache_key, find_source, pick_build

COMMIT = "c" * 40


def _pin(monkeypatch: pytest.MonkeyPatch, payload: bytes, commit: str = COMMIT) -> str:
    """Pin release "24.11" to an archive of ``payload``; its sha256."""
    sha = hashlib.sha256(payload).hexdigest()
    monkeypatch.setitem(versions.PYSLURM, "24.11", ("pyslurm-24.11.x.tar.gz", commit, sha))
    return sha


class Fetcher:
    """A stand-in for curl: writes ``payload`` (or fails with ``error``) and records the URLs."""

    def __init__(self, payload: bytes | None = None, error: str = "") -> None:
        self.payload = payload
        self.error = error
        self.urls: list[str] = []

    def __call__(self, url: str, dest: Path) -> str | None:
        """Fetch ``url`` to ``dest`` as told."""
        self.urls.append(url)
        if self.payload is None:
            return self.error
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(self.payload)
        return None


def test_the_pins_name_an_archive_a_commit_and_a_sha256_per_release() -> None:
    """Every pinned release has its archive, a full commit, a sha256 and build requirements."""
    assert set(versions.PYSLURM) == {"22.05", "24.11"}
    for release, (archive, commit, sha) in versions.PYSLURM.items():
        assert archive.endswith(".tar.gz")
        assert re.fullmatch(r"[0-9a-f]{40}", commit), release
        assert re.fullmatch(r"[0-9a-f]{64}", sha), release
        assert versions.PYSLURM_BUILD_REQUIREMENTS[release]
    assert "libslurm-dev" in versions.DEBIAN_PACKAGES


def test_the_cache_key_holds_release_exact_slurm_archive_interpreter_and_recipe() -> None:
    """A new Debian revision, another archive or another interpreter is another build."""
    sha = "d7ab159dcc340a09f6dceaa7fb5499407db50972cba2d94b5b243e2002c42ba8"
    key = cache_key("24.11", "24.11.5-4+deb13u1", sha, "cp311")
    assert key == f"24.11-24.11.5-4+deb13u1-d7ab159dcc340a09-cp311-r{RECIPE}"
    assert cache_key("24.11", "24.11.5-4+deb13u2", sha, "cp311") != key
    assert cache_key("24.11", "24.11.5-4+deb13u1", "0" * 64, "cp311") != key
    assert cache_key("24.11", "24.11.5-4+deb13u1", sha, "cp312") != key
    assert "/" not in cache_key("26.05", "1:26.05.5-1", sha, "cp311")
    assert cache_key("22.05", "22.05.8-4", sha).endswith(f"-{pyslurm_build.python_tag()}-r{RECIPE}")


def test_the_vendored_archive_is_taken_when_its_sha256_is_the_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the pinned bytes in the vendor directory nothing is fetched."""
    sha = _pin(monkeypatch, b"pinned bytes")
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "pyslurm-24.11.x.tar.gz").write_bytes(b"pinned bytes")
    fetch = Fetcher(error="unreachable")
    got = find_source("24.11", tmp_path / "work", vendor_dir=str(tmp_path / "vendor"), fetch=fetch)
    assert got == Source(tmp_path / "vendor" / "pyslurm-24.11.x.tar.gz", sha, "vendor")
    assert fetch.urls == []


def test_an_archive_with_other_bytes_is_refused_and_upstream_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vendored archive that is not the pin is never built; upstream's is, its sha recorded."""
    _pin(monkeypatch, b"pinned bytes")
    (tmp_path / "pyslurm-24.11.x.tar.gz").write_bytes(b"tampered")
    fetch = Fetcher(payload=b"github's bytes")
    got = find_source("24.11", tmp_path / "work", vendor_dir=str(tmp_path), fetch=fetch)
    assert fetch.urls == [f"https://github.com/PySlurm/pyslurm/archive/{COMMIT}.tar.gz"]
    assert isinstance(got, Source)
    assert got.origin == "upstream"
    assert got.sha256 == hashlib.sha256(b"github's bytes").hexdigest()
    assert got.archive.parent == tmp_path / "work"


def test_without_either_source_the_reason_names_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one line says what was missing and what the fetch said."""
    _pin(monkeypatch, b"pinned bytes")
    fetch = Fetcher(error="curl: (6) Could not resolve host: github.com")
    unset = find_source("24.11", tmp_path / "w", vendor_dir=None, fetch=fetch)
    assert isinstance(unset, str)
    assert unset.startswith("no source ($SLONKD_VENDOR_DIR not set; https://github.com/")
    assert unset.endswith("Could not resolve host: github.com)")
    absent = find_source("24.11", tmp_path / "w", vendor_dir=str(tmp_path), fetch=fetch)
    assert isinstance(absent, str)
    assert "no $SLONKD_VENDOR_DIR/pyslurm-24.11.x.tar.gz" in absent
    bad = (tmp_path / "pyslurm-24.11.x.tar.gz", b"other")
    bad[0].write_bytes(bad[1])
    refused = find_source("24.11", tmp_path / "w", vendor_dir=str(tmp_path), fetch=fetch)
    assert isinstance(refused, str)
    assert "has sha256 " + hashlib.sha256(b"other").hexdigest()[:16] in refused


def _build(cache: Path, key: str, *, commit: str, lib: Path, complete: bool = True) -> Path:
    site = cache / key / "site"
    (site / "pyslurm").mkdir(parents=True)
    if complete:
        marker = {"commit": commit, "slurm_lib_dir": str(lib)}
        (cache / key / pyslurm_build.COMPLETE).write_text(json.dumps(marker))
    return site


def test_the_pinned_archives_build_is_found_first_then_upstreams_of_the_same_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only complete builds of the pinned commit whose SLURM library is still there count."""
    sha = _pin(monkeypatch, b"pinned bytes")
    cache, lib, slurm = tmp_path / "cache", tmp_path / "lib", "24.11.5-4+deb13u1"
    lib.mkdir()
    assert pick_build(cache, "24.11", slurm, tag="cp311") is None
    _build(cache, cache_key("24.11", slurm, "a" * 64, "cp311"), commit="0" * 40, lib=lib)
    _build(
        cache, cache_key("24.11", slurm, "b" * 64, "cp311"), commit=COMMIT, lib=lib, complete=False
    )
    _build(
        cache, cache_key("24.11", slurm, "e" * 64, "cp311"), commit=COMMIT, lib=tmp_path / "gone"
    )
    assert pick_build(cache, "24.11", slurm, tag="cp311") is None
    upstream = _build(cache, cache_key("24.11", slurm, "f" * 64, "cp311"), commit=COMMIT, lib=lib)
    assert pick_build(cache, "24.11", slurm, tag="cp311") == upstream
    assert pick_build(cache, "24.11", "24.11.5-4+deb13u2", tag="cp311") is None
    assert pick_build(cache, "24.11", slurm, tag="cp312") is None
    pinned = _build(cache, cache_key("24.11", slurm, sha, "cp311"), commit=COMMIT, lib=lib)
    assert pick_build(cache, "24.11", slurm, tag="cp311") == pinned


def test_a_missing_build_is_one_line_a_status_file_and_a_failure_only_when_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """stdout names the built sites; the reason goes to stderr and STATUS-<release>."""
    monkeypatch.setenv("SLONKD_PYSLURM_CACHE", str(tmp_path))
    built = tmp_path / "22.05-x" / "site"
    answers: dict[str, Path | str] = {"22.05": built, "24.11": "no source (offline)"}

    def ensure(release: str, *, vendor_dir: str | None) -> Path | str:
        assert vendor_dir == "/vendor"
        return answers[release]

    monkeypatch.setattr(pyslurm_build, "ensure_pyslurm", ensure)
    assert "not built" in pyslurm_build.pyslurm_status("24.11")
    env = {"SLONKD_VENDOR_DIR": "/vendor"}
    assert pyslurm_build.main(["22.05", "24.11"], env) == 0
    out, err = capsys.readouterr()
    assert out == f"{built}\n"
    assert err == ("[bootstrap] pyslurm 24.11: no source (offline); pyslurm tests will skip\n")
    assert pyslurm_build.pyslurm_status("24.11") == "pyslurm 24.11: no source (offline)"
    assert pyslurm_build.main(["24.11"], {**env, "SLONKD_REQUIRE_PYSLURM": "1"}) == 1
    assert "SLONKD_REQUIRE_PYSLURM=1: failing" in capsys.readouterr().err
    assert pyslurm_build.main(["25.11"], env) == 2

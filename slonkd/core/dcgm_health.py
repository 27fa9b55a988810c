"""DCGM diagnostic parser: ``dcgmi diag -r 1 -j`` JSON to a :class:`CheckResult`.

DCGM 3.x writes ``{"DCGM GPU Diagnostic": {"test_categories": [{"category": ..., "tests":
[{"name": ..., "results": [{"gpu_ids": "0" | 0 | "0,1,...", "status": "Pass" | "Fail" |
"Warn" | "Skip", "warnings": [{"warning": ..., "error_id": ...}], "info": [...]}]}]}],
"version": ...}}``; older releases spell the statuses ``PASS``/``FAIL``/``WARN``/``SKIPPED``
and DCGM 4 names the root ``"DCGM Diagnostic"`` (results may carry ``gpu_id`` or
``entity_id``). A diagnostic that could not run has a ``runtime_error``. The document may
be preceded by noise lines, which are skipped up to the first ``{``.

Anything the parser does not understand (truncated or hostile JSON, a shape it does not
know, a status word it has never seen, no test that actually ran) raises
:class:`DcgmParseError`, which :func:`judge_dcgm_diag` turns into ``unknown``: a diagnostic
that cannot be read never passes. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from slonkd.core.health import CheckResult, Remediation, fail, ok, unknown, warn, worst

CHECK: Final = "dcgm-diag"
MAX_DOCUMENT: Final = 4 << 20
"""Larger answers are refused unread (a level 1 run of 8 GPUs is a few KiB)."""
MAX_RESULTS: Final = 10_000
_ROOTS: Final = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
_HOSTENGINE_RE: Final = re.compile(r"host ?engine|unable to (establish a )?connect", re.IGNORECASE)

_REMEDIATION_BY_TEST: Final[Mapping[str, Remediation]] = {
    "page retirement/row remap": Remediation.REBOOT,
    "pcie": Remediation.REBOOT,
    "memory": Remediation.REBOOT,
    "inforom": Remediation.MANUAL,
}
"""Tests whose failure a reboot (GPU reset) may fix; every other failure (deployment checks:
libraries, permissions, persistence mode, environment) needs a person."""


class DcgmParseError(ValueError):
    """The output is not a DCGM diagnostic document this parser understands."""


class DiagStatus(StrEnum):
    """One result's status, whatever the DCGM release spelt it as."""

    PASS = "pass"  # noqa: S105 - a status word, not a password
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"


_STATUS_WORDS: Final = {
    "pass": DiagStatus.PASS,
    "passed": DiagStatus.PASS,
    "fail": DiagStatus.FAIL,
    "failed": DiagStatus.FAIL,
    "warn": DiagStatus.WARN,
    "warning": DiagStatus.WARN,
    "skip": DiagStatus.SKIP,
    "skipped": DiagStatus.SKIP,
    "not run": DiagStatus.SKIP,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class DiagResult:
    """One test's result on one GPU (or on the group, for deployment tests)."""

    category: str
    test: str
    gpus: str
    status: DiagStatus
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DiagReport:
    """A parsed diagnostic run."""

    version: str
    results: tuple[DiagResult, ...]


def _text(value: Any, limit: int = 300) -> str:
    """A short printable rendering of a JSON scalar, list of them, or warning objects."""
    if value is None:
        return ""
    if isinstance(value, str):
        return re.sub(r"\s+", " ", value).strip()[:limit]
    if isinstance(value, bool | int | float):
        return str(value)[:limit]
    if isinstance(value, list):
        return "; ".join(t for t in (_text(v, limit) for v in value[:20]) if t)[:limit]
    if isinstance(value, dict):
        for key in ("warning", "message", "msg"):
            if key in value:
                return _text(value[key], limit)
        return ""
    return ""


def _status(raw: Any) -> DiagStatus:
    if not isinstance(raw, str):
        raise DcgmParseError(f"status is {type(raw).__name__}, not a string")
    word = " ".join(raw.split()).lower()
    if word not in _STATUS_WORDS:
        raise DcgmParseError(f"unknown status {raw[:40]!r}")
    return _STATUS_WORDS[word]


def _gpus(result: Mapping[str, Any]) -> str:
    for key in ("gpu_ids", "gpu_id", "entity_id"):
        if key in result:
            value = result[key]
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise DcgmParseError(f"{key} is {type(value).__name__}")
            text = str(value).strip()
            if not re.fullmatch(r"\d{1,4}(\s*,\s*\d{1,4}){0,255}", text):
                raise DcgmParseError(f"{key} {text[:40]!r} is not a GPU id list")
            return re.sub(r"\s+", "", text)
    return "all"


def parse_dcgm_diag(stdout: str) -> DiagReport:
    """The results of one ``dcgmi diag -j`` run; DcgmParseError when it cannot be read."""
    if len(stdout) > MAX_DOCUMENT:
        raise DcgmParseError(f"output of {len(stdout)} characters is too large")
    start = stdout.find("{")
    if start < 0:
        raise DcgmParseError("no JSON object in the output")
    try:
        document = json.loads(stdout[start:])
    except (ValueError, RecursionError) as exc:
        raise DcgmParseError(f"not JSON: {str(exc)[:120]}") from None
    if not isinstance(document, dict):
        raise DcgmParseError("the document is not an object")
    root = next((document[k] for k in _ROOTS if k in document), None)
    if not isinstance(root, dict):
        raise DcgmParseError(f"no {_ROOTS[0]!r} object")
    error = root.get("runtime_error") or document.get("runtime_error")
    if error:
        raise DcgmParseError(f"diagnostic did not run: {_text(error)}")
    categories = root.get("test_categories")
    if not isinstance(categories, list):
        raise DcgmParseError("no test_categories list")
    results: list[DiagResult] = []
    for category in categories:
        if category is None:  # DCGM 3.1 writes nulls between tests
            continue
        if not isinstance(category, dict) or not isinstance(category.get("tests"), list):
            raise DcgmParseError("a category without a tests list")
        category_name = _text(category.get("category"), 60) or "?"
        for test in category["tests"]:
            if test is None:
                continue
            if not isinstance(test, dict) or not isinstance(test.get("results"), list):
                raise DcgmParseError(f"a test of {category_name} without a results list")
            test_name = _text(test.get("name"), 80) or "?"
            for result in test["results"]:
                if result is None:
                    continue
                if not isinstance(result, dict):
                    raise DcgmParseError(f"a result of {test_name} is not an object")
                if len(results) >= MAX_RESULTS:
                    raise DcgmParseError("too many results")
                results.append(
                    DiagResult(
                        category=category_name,
                        test=test_name,
                        gpus=_gpus(result),
                        status=_status(result.get("status")),
                        message=_text(result.get("warnings")) or _text(result.get("info")),
                    )
                )
    return DiagReport(version=_text(root.get("version"), 20), results=tuple(results))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "test"


def judge_dcgm_diag(stdout: str, stderr: str, rc: int) -> CheckResult:
    """Judge one ``dcgmi diag -r 1 -j`` run: a failed test fails, a warning warns.

    A document that cannot be read, a diagnostic that did not run, or one where every
    test was skipped is ``unknown``; so is a non-zero exit that no failed test explains.
    """
    if "{" not in stdout and _HOSTENGINE_RE.search(f"{stdout}\n{stderr}"):
        line = next(ln for ln in f"{stdout}\n{stderr}".splitlines() if _HOSTENGINE_RE.search(ln))
        return unknown(CHECK, "dcgm-hostengine-unreachable", line.strip()[:300])
    try:
        report = parse_dcgm_diag(stdout)
    except DcgmParseError as exc:
        hint = stderr.strip().splitlines()[-1][:200] if stderr.strip() else ""
        return unknown(CHECK, "dcgm-unreadable", f"rc {rc}: {exc}" + (f"; {hint}" if hint else ""))
    findings: list[CheckResult] = []
    for r in report.results:
        where = f"{r.category}/{r.test} on GPU {r.gpus}" + (f": {r.message}" if r.message else "")
        if r.status is DiagStatus.FAIL:
            remediation = _REMEDIATION_BY_TEST.get(r.test.lower(), Remediation.MANUAL)
            findings.append(fail(CHECK, f"dcgm-{_slug(r.test)}", remediation, where))
        elif r.status is DiagStatus.WARN:
            findings.append(warn(CHECK, f"dcgm-{_slug(r.test)}-warn", where))
    ran = [r for r in report.results if r.status is not DiagStatus.SKIP]
    if not ran:
        return unknown(CHECK, "dcgm-nothing-ran", "every test was skipped or none reported")
    result = worst(CHECK, findings)
    if result.verdict.value == "fail":
        return result
    if rc != 0:
        why = f"rc {rc} without a failed test: {stderr.strip()[:200]}"
        return unknown(CHECK, "dcgm-error", why)
    if result.verdict.value == "ok":
        return ok(CHECK, f"{len(ran)} results passed (DCGM {report.version or '?'})")
    return result

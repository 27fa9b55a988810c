"""The pyslurm child: the only process that imports pyslurm (``python -m`` this module CONF).

``import pyslurm`` runs ``slurm_init``, and libslurm ends its process (``fatal()``) where its
configuration does not fit or the controller's name does not resolve, so slonkd never imports
pyslurm itself: this child does, started and asked by
:class:`~slonkd.adapters.slurm.pyslurm_link.PyslurmChild` over its pipes, one JSON line each
way (the start, last words and restart waits are :mod:`slonkd.adapters.slurm.slurm_child`'s,
shared with the libslurm change poll's child).

- Before the import, a slurm.conf it cannot read ends it (exit 2, one line), as
  :func:`~slonkd.adapters.slurm.libslurm.child_main` does; CONF (when not empty) becomes
  ``SLURM_CONF``, which ``slurm_init(NULL)`` reads. An import that fails ends it (exit 3).
- Hello: ``{"ready": {"pyslurm", "library", "api", "pid"}}``: pyslurm's version, the path of
  the libslurm it loaded (``/proc/self/maps``) and that library's ``slurm_api_version()``
  (its API number, e.g. ``38.0.0``: not the release, which ``versions`` asks slurmctld).
- Request: ``{"id": n, "op": ..., "args": {...}}``; answer ``{"id": n, "ok": ..., "rpcs": k}``
  or ``{"id": n, "error": kind, "errno": e, "detail": ...}``, kind by
  :func:`~slonkd.adapters.slurm.parsing_pyslurm.error_kind`. One request at a time: pyslurm's
  calls block and hold the GIL.
- Ops (reads only; the writes, ``diag``, ``topology`` and ``changed_since`` come later):
  ``versions``, ``nodes{names, with_jobs}``, ``node{name}``, ``reasons``, ``jobs_on{name}``,
  ``finished``. Rows are arrays of :data:`~slonkd.adapters.slurm.parsing_pyslurm.NODE_FIELDS`
  and :data:`~slonkd.adapters.slurm.parsing_pyslurm.JOB_FIELDS`, built into slonkd's types by
  the parent (:mod:`slonkd.adapters.slurm.parsing_pyslurm`); the child filters, never parses.

The object API (``pyslurm.Nodes``/``Node``/``Jobs``) is the same in the 22.5 and 24.11
branches; only the controller's version differs (24.11: ``slurmctld.Config.load().version``;
22.5: the old ``pyslurm.config().get()["version"]``).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from slonkd.adapters.slurm.libslurm import unreadable_conf
from slonkd.adapters.slurm.parsing_finished import FINISHED_STATES
from slonkd.adapters.slurm.parsing_pyslurm import (
    ESLURM_INVALID_NODE_NAME,
    JOB_FIELDS,
    NODE_FIELDS,
    error_kind,
)

MODULE = "slonkd.adapters.slurm.pyslurm_child"
_FINISHED = frozenset(s.value for s in FINISHED_STATES)
_Op = Callable[[Any, Mapping[str, Any]], tuple[object, int]]


def library_path(maps: str = "/proc/self/maps") -> str:
    """The path of the libslurm this process loaded ("" when none is)."""
    with contextlib.suppress(OSError), open(maps, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) == 6 and Path(parts[5].strip()).name.startswith("libslurm"):
                return parts[5].strip()
    return ""


def api_version(path: str) -> str:
    """``slurm_api_version()`` of the already loaded library at ``path``, e.g. ``38.0.0``.

    That is the library's API (its soname's number: 38 for 22.05's ``libslurm.so.38``), not
    the SLURM release: the release is slurmctld's (op ``versions``) and pyslurm's own.
    """
    if not path:
        return ""
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        lib.slurm_api_version.restype = ctypes.c_long
        num = int(lib.slurm_api_version())
    except (OSError, AttributeError):
        return ""
    return f"{num >> 16}.{(num >> 8) & 0xFF}.{num & 0xFF}"


def _value(obj: Any, field: str) -> object:
    try:
        return getattr(obj, field)
    except KeyError:  # reason_user: a uid this host's passwd does not know
        return None


def node_row(node: Any) -> list[object]:
    """A node's row (:data:`NODE_FIELDS`)."""
    return [_value(node, f) for f in NODE_FIELDS]


def job_row(job: Any) -> list[object]:
    """A job's row (:data:`JOB_FIELDS`)."""
    return [_value(job, f) for f in JOB_FIELDS]


def _job_rows(py: Any, keep: Callable[[Any], bool]) -> list[list[object]]:
    return [job_row(j) for j in py.Jobs.load().values() if keep(j)]


def _versions(py: Any, _args: Mapping[str, Any]) -> tuple[object, int]:
    try:
        ctld = py.slurmctld.Config.load().version  # 24.11
    except AttributeError:
        ctld = py.config().get()["version"]  # 22.5: its object Config has no version
    path = library_path()
    said = {"pyslurm": py.__version__, "library": path, "api": api_version(path)}
    return {**said, "slurmctld": ctld}, 1


def _nodes(py: Any, args: Mapping[str, Any]) -> tuple[object, int]:
    names = set(args.get("names") or ())
    rows = [
        node_row(n)
        for n in py.Nodes.load().values()
        if n.name and (not names or n.name in names)  # 22.5 keeps name-less records
    ]
    if not args.get("with_jobs"):
        return {"nodes": rows, "jobs": None}, 2
    return {"nodes": rows, "jobs": _job_rows(py, lambda j: bool(j.allocated_nodes))}, 3


def _node(py: Any, args: Mapping[str, Any]) -> tuple[object, int]:
    try:
        return node_row(py.Node.load(str(args["name"]))), 2
    except py.RPCError as exc:
        if getattr(exc, "errno", None) == ESLURM_INVALID_NODE_NAME or "does not exist" in str(exc):
            return None, 2
        raise


def _reasons(py: Any, _args: Mapping[str, Any]) -> tuple[object, int]:
    return [node_row(n) for n in py.Nodes.load().values() if n.name and n.reason], 2


def _jobs_on(py: Any, _args: Mapping[str, Any]) -> tuple[object, int]:
    return _job_rows(py, lambda j: bool(j.allocated_nodes)), 1


def _finished(py: Any, _args: Mapping[str, Any]) -> tuple[object, int]:
    return _job_rows(py, lambda j: j.state in _FINISHED), 1


OPS: dict[str, _Op] = {
    "versions": _versions,
    "nodes": _nodes,
    "node": _node,
    "reasons": _reasons,
    "jobs_on": _jobs_on,
    "finished": _finished,
}


def _errno(py: Any, exc: Exception) -> int | None:
    """The SLURM error number of a pyslurm exception (None: not a SLURM error)."""
    if isinstance(exc, py.RPCError):
        errno = getattr(exc, "errno", None)
        return errno if isinstance(errno, int) else None
    if isinstance(exc, ValueError) and len(exc.args) > 1 and isinstance(exc.args[1], int):
        return exc.args[1]  # the old API: ValueError(text, errno)
    return None


def answer(py: Any, request: Mapping[str, Any]) -> dict[str, object]:
    """The answer line to one request (never raises for an op's failure)."""
    rid = request.get("id")
    op = OPS.get(str(request.get("op")))
    if op is None:
        return {"id": rid, "error": "terminal", "errno": None, "detail": "unknown op"}
    try:
        ok, rpcs = op(py, request.get("args") or {})
    except Exception as exc:  # noqa: BLE001 (every failure is answered, typed by errno)
        errno = _errno(py, exc)
        detail = f"{type(exc).__name__}: {exc}"[:300]
        return {"id": rid, "error": error_kind(errno), "errno": errno, "detail": detail}
    return {"id": rid, "ok": ok, "rpcs": rpcs}


def main(argv: list[str]) -> None:
    """Check the configuration, import pyslurm, say hello, answer until stdin closes."""
    conf = argv[0] if argv else ""
    problem = unreadable_conf(conf or None)
    if problem:
        print(f"pyslurm child: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    if conf:
        os.environ["SLURM_CONF"] = conf
    try:
        py: Any = importlib.import_module("pyslurm")
    except ImportError as exc:
        print(f"pyslurm child: import pyslurm: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None
    path = library_path()
    hello = {"pyslurm": py.__version__, "library": path, "api": api_version(path)}
    print(json.dumps({"ready": {**hello, "pid": os.getpid()}}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            said: dict[str, object] = {"id": None, "error": "terminal", "detail": str(exc)}
        else:
            said = answer(py, request)
        print(json.dumps(said, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

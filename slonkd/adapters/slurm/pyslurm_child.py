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
- Reads: ``versions``, ``nodes{names, with_jobs}``, ``node{name}``, ``reasons``,
  ``jobs_on{name}``, ``finished``, ``diag``, ``topology`` (by ctypes: pyslurm has no such
  read, :mod:`slonkd.adapters.slurm.libslurm_extra`). Rows are arrays of
  :data:`~slonkd.adapters.slurm.parsing_pyslurm.NODE_FIELDS` and
  :data:`~slonkd.adapters.slurm.parsing_pyslurm.JOB_FIELDS`, built into slonkd's types by the
  parent (:mod:`slonkd.adapters.slurm.parsing_pyslurm`); the child filters, never parses.
- Writes (:data:`WRITES`), one SLURM request each except ``requeue`` (one a job):
  ``update{expr, state, reason, extra}`` (the compare-and-set's update: the parent read and
  planned; a hostlist expression names every node of it), ``comment{expr, comment}``,
  ``requeue{job_ids}``, ``signal{job_id, signal}`` (to the batch shell), ``reconfigure``.
  Right before each request leaves, the child says ``{"id": n, "sending": what}``: a child
  that dies after that line may have been heard (an unknown outcome), one that dies before
  it was not. A lost answer is ``outcome-unknown``, never ``transient``, for a write. An empty
  text is refused (pyslurm sends it as "unchanged", never as "clear").

The object API (``pyslurm.Nodes``/``Node``/``Jobs``) is the same in the 22.5 and 24.11
branches; only the controller's version differs (24.11: ``slurmctld.Config.load().version``;
22.5: the old ``pyslurm.config().get()["version"]``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from slonkd.adapters.slurm.libslurm import unreadable_conf
from slonkd.adapters.slurm.libslurm_extra import (
    SlurmCallError,
    api_version,
    library_path,
    topology_text,
)
from slonkd.adapters.slurm.parsing_finished import FINISHED_STATES
from slonkd.adapters.slurm.parsing_pyslurm import (
    ESLURM_INVALID_NODE_NAME,
    JOB_FIELDS,
    NODE_FIELDS,
    NOT_REQUEUEABLE_ERRNOS,
    error_kind,
)

MODULE = "slonkd.adapters.slurm.pyslurm_child"
KILL_JOB_BATCH = 1
"""slurm.h's ``KILL_JOB_BATCH``: the signal goes to the batch shell alone."""
_FINISHED = frozenset(s.value for s in FINISHED_STATES)
Say = Callable[[str], None]
"""Says ``sending`` for the request in hand (writes call it right before each RPC)."""
_Op = Callable[[Any, Mapping[str, Any], Say], tuple[object, int]]


def _value(obj: Any, field: str) -> object:
    try:
        return getattr(obj, field)
    except KeyError:  # reason_user: a uid this host's passwd does not know
        return None


_REASON_USER = NODE_FIELDS.index("reason_user")


def node_row(node: Any) -> list[object]:
    """A node's row (:data:`NODE_FIELDS`); ``reason_user`` only where there is a reason.

    pyslurm names that user through the passwd database on every read (100-150 ms of a
    5,000-node read); without a reason there is no setter to name, and the parent drops it.
    """
    reason = bool(_value(node, "reason"))
    return [
        None if i == _REASON_USER and not reason else _value(node, f)
        for i, f in enumerate(NODE_FIELDS)
    ]


def job_row(job: Any) -> list[object]:
    """A job's row (:data:`JOB_FIELDS`)."""
    return [_value(job, f) for f in JOB_FIELDS]


def _job_rows(py: Any, keep: Callable[[Any], bool]) -> list[list[object]]:
    return [job_row(j) for j in py.Jobs.load().values() if keep(j)]


def _versions(py: Any, _args: Mapping[str, Any], _say: Say) -> tuple[object, int]:
    try:
        ctld = py.slurmctld.Config.load().version  # 24.11
    except AttributeError:
        ctld = py.config().get()["version"]  # 22.5: its object Config has no version
    path = library_path()
    said = {"pyslurm": py.__version__, "library": path, "api": api_version(path)}
    return {**said, "slurmctld": ctld}, 1


def _nodes(py: Any, args: Mapping[str, Any], _say: Say) -> tuple[object, int]:
    names = set(args.get("names") or ())
    rows = [
        node_row(n)
        for n in py.Nodes.load().values()
        if n.name and (not names or n.name in names)  # 22.5 keeps name-less records
    ]
    if not args.get("with_jobs"):
        return {"nodes": rows, "jobs": None}, 2
    return {"nodes": rows, "jobs": _job_rows(py, lambda j: bool(j.allocated_nodes))}, 3


def _node(py: Any, args: Mapping[str, Any], _say: Say) -> tuple[object, int]:
    try:
        return node_row(py.Node.load(str(args["name"]))), 2
    except py.RPCError as exc:
        if getattr(exc, "errno", None) == ESLURM_INVALID_NODE_NAME or "does not exist" in str(exc):
            return None, 2
        raise


def _reasons(py: Any, _args: Mapping[str, Any], _say: Say) -> tuple[object, int]:
    return [node_row(n) for n in py.Nodes.load().values() if n.name and n.reason], 2


def _jobs_on(py: Any, _args: Mapping[str, Any], _say: Say) -> tuple[object, int]:
    return _job_rows(py, lambda j: bool(j.allocated_nodes)), 1


def _finished(py: Any, _args: Mapping[str, Any], _say: Say) -> tuple[object, int]:
    return _job_rows(py, lambda j: j.state in _FINISHED), 1


STATS = (
    "server_thread_count",
    "agent_queue_size",
    "agent_count",
    "dbd_agent_queue_size",
    "jobs_submitted",
    "jobs_started",
    "jobs_completed",
    "jobs_canceled",
    "jobs_failed",
    "jobs_pending",
    "jobs_running",
    "schedule_cycle_last",
)
"""The statistics sdiag prints that slonkd keeps (the same names in both APIs)."""


def _diag(py: Any, _args: Mapping[str, Any], _say: Say) -> tuple[object, int]:
    """slurmctld's statistics: :data:`STATS` and each RPC type's count and total time (us)."""
    try:
        got = py.slurmctld.Statistics.load()  # 24.11
    except AttributeError:
        old = py.statistics().get()  # 22.5: the old API's dict
        rpcs = {k: [v["count"], v["total_time"]] for k, v in old["rpc_type_stats"].items()}
        return {**{k: old.get(k, 0) for k in STATS}, "rpcs": rpcs}, 1
    rpcs = {k: [v.count, v.time] for k, v in got.rpcs_by_type.items()}
    return {**{k: getattr(got, k, 0) for k in STATS}, "rpcs": rpcs}, 1


def _text(args: Mapping[str, Any], key: str) -> str | None:
    """A text field of a write: None leaves it; "" cannot be sent (pyslurm: "unchanged")."""
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key}: pyslurm cannot send {value!r} (an empty text is 'unchanged')")
    return value


def _update(py: Any, args: Mapping[str, Any], say: Say) -> tuple[object, int]:
    expr = str(args["expr"])
    changes = {k: v for k in ("state", "reason", "extra") if (v := _text(args, k)) is not None}
    target, delta = py.Node(expr), py.Node(**changes)
    say(expr)
    target.modify(delta)
    return True, 1


def _comment(py: Any, args: Mapping[str, Any], say: Say) -> tuple[object, int]:
    expr = str(args["expr"])
    target, delta = py.Node(expr), py.Node(comment=_text(args, "comment"))
    say(expr)
    target.modify(delta)
    return True, 1


def _requeue(py: Any, args: Mapping[str, Any], say: Say) -> tuple[object, int]:
    """Each job in turn; one that ended, pends or cannot be requeued is reported, not raised."""
    done: list[int] = []
    refused: dict[str, str] = {}
    for job_id in args["job_ids"]:
        say(str(job_id))
        try:
            py.Job(int(job_id)).requeue()
        except py.RPCError as exc:
            if getattr(exc, "errno", None) not in NOT_REQUEUEABLE_ERRNOS:
                raise
            refused[str(job_id)] = str(exc)[:200]
        else:
            done.append(int(job_id))
    return {"requeued": done, "refused": refused}, len(args["job_ids"])


def _signal(py: Any, args: Mapping[str, Any], say: Say) -> tuple[object, int]:
    job_id, number = int(args["job_id"]), int(args["signal"])
    say(str(job_id))
    py.slurm_kill_job(job_id, number, KILL_JOB_BATCH)  # raises on a refusal, with its errno
    return True, 1


def _topology(_py: Any, _args: Mapping[str, Any], _say: Say) -> tuple[object, int]:
    return topology_text(library_path()), 1


def _reconfigure(py: Any, _args: Mapping[str, Any], say: Say) -> tuple[object, int]:
    say("reconfigure")
    try:
        again = py.slurmctld.reconfigure  # 24.11
    except AttributeError:
        again = py.slurm_reconfigure  # 22.5
    again()
    return True, 1


OPS: dict[str, _Op] = {
    "versions": _versions,
    "nodes": _nodes,
    "node": _node,
    "reasons": _reasons,
    "jobs_on": _jobs_on,
    "finished": _finished,
    "diag": _diag,
    "topology": _topology,
    "update": _update,
    "comment": _comment,
    "requeue": _requeue,
    "signal": _signal,
    "reconfigure": _reconfigure,
}
WRITES = frozenset({"update", "comment", "requeue", "signal", "reconfigure"})
"""Ops that change slurmctld's state: a lost answer is an unknown outcome."""


def _errno(py: Any, exc: Exception) -> int | None:
    """The SLURM error number of a pyslurm exception (None: not a SLURM error)."""
    if isinstance(exc, SlurmCallError):  # a libslurm call of libslurm_extra.py
        return exc.errno
    if isinstance(exc, py.RPCError):
        errno = getattr(exc, "errno", None)
        return errno if isinstance(errno, int) else None
    if isinstance(exc, ValueError) and len(exc.args) > 1 and isinstance(exc.args[1], int):
        return exc.args[1]  # the old API: ValueError(text, errno)
    return None


def _say(rid: object) -> Say:
    def say(what: str) -> None:
        print(json.dumps({"id": rid, "sending": what}), flush=True)

    return say


def answer(py: Any, request: Mapping[str, Any], say: Say | None = None) -> dict[str, object]:
    """The answer line to one request (never raises for an op's failure).

    ``say``: how a write says ``sending`` (default: a line on stdout for this request's id).
    """
    rid = request.get("id")
    name = str(request.get("op"))
    op = OPS.get(name)
    if op is None:
        return {"id": rid, "error": "terminal", "errno": None, "detail": "unknown op"}
    try:
        ok, rpcs = op(py, request.get("args") or {}, say or _say(rid))
    except Exception as exc:  # noqa: BLE001 (every failure is answered, typed by errno)
        errno = _errno(py, exc)
        detail = f"{type(exc).__name__}: {exc}"[:300]
        kind = error_kind(errno, write=name in WRITES)
        return {"id": rid, "error": kind, "errno": errno, "detail": detail}
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

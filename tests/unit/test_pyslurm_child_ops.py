"""The pyslurm child's ops (pyslurm_child.py) on a stand-in for the pyslurm module.

The real module is only ever imported in the child against a real cluster
(tests/contract/test_pyslurm_reads.py); here its object API is imitated to check what each op
asks, filters, counts and answers, and how its errors are typed.
"""

from __future__ import annotations

import importlib
import io
import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from slonkd.adapters.slurm import pyslurm_child
from slonkd.adapters.slurm.parsing_pyslurm import JOB_FIELDS, NODE_FIELDS


class RPCError(Exception):
    """pyslurm.RPCError: a message and a SLURM error number."""

    def __init__(self, errno: int = -1, msg: str = "") -> None:
        super().__init__(msg)
        self.errno = errno


def _node(name: str | None, reason: str | None = None) -> SimpleNamespace:
    values: dict[str, Any] = dict.fromkeys(NODE_FIELDS)
    values.update(name=name, state="IDLE", reason=reason, available_features=["a"])
    return SimpleNamespace(**values)


def _job(job_id: int, state: str, nodes: str | None) -> SimpleNamespace:
    values: dict[str, Any] = dict.fromkeys(JOB_FIELDS)
    values.update(id=job_id, state=state, allocated_nodes=nodes)
    return SimpleNamespace(**values)


class _Map(dict[Any, Any]):
    """pyslurm's collections: ``values()`` iterates the records."""


def _pyslurm(**fail: Exception) -> SimpleNamespace:
    nodes = _Map(a=_node("n1"), b=_node("n2", "maint"), c=_node(None))
    jobs = _Map(
        {1: _job(1, "RUNNING", "n1"), 2: _job(2, "PENDING", None), 3: _job(3, "FAILED", "n2")}
    )

    def load(what: str, value: Any) -> Any:
        if what in fail:
            raise fail[what]
        return value

    def node_load(name: str) -> Any:
        if "node" in fail:
            raise fail["node"]
        if name not in ("n1", "n2"):
            raise RPCError(msg=f"Node '{name}' does not exist")
        return _node(name)

    return SimpleNamespace(
        __version__="22.5.3",
        RPCError=RPCError,
        Nodes=SimpleNamespace(load=lambda: load("nodes", nodes)),
        Node=SimpleNamespace(load=node_load),
        Jobs=SimpleNamespace(load=lambda: load("jobs", jobs)),
        slurmctld=SimpleNamespace(Config=SimpleNamespace(load=lambda: SimpleNamespace())),
        config=lambda: SimpleNamespace(get=lambda: {"version": "22.05.8"}),
    )


def _ask(py: Any, op: str, **args: Any) -> dict[str, Any]:
    return pyslurm_child.answer(py, {"id": 7, "op": op, "args": args})


def test_nodes_skips_nameless_records_filters_names_and_adds_jobs() -> None:
    """22.5 keeps name-less node records: never answered; names filter; jobs on nodes only."""
    said = _ask(_pyslurm(), "nodes", names=["n2", "x"], with_jobs=True)
    assert said["id"] == 7
    assert said["rpcs"] == 3
    assert [r[0] for r in said["ok"]["nodes"]] == ["n2"]
    assert said["ok"]["nodes"][0][NODE_FIELDS.index("available_features")] == ["a"]
    assert [r[0] for r in said["ok"]["jobs"]] == [1, 3]
    said = _ask(_pyslurm(), "nodes")
    assert [r[0] for r in said["ok"]["nodes"]] == ["n1", "n2"]
    assert said["ok"]["jobs"] is None
    assert said["rpcs"] == 2


def test_a_node_slurmctld_does_not_know_is_none() -> None:
    """Node.load's "does not exist" (or ESLURM_INVALID_NODE_NAME) answers null."""
    assert _ask(_pyslurm(), "node", name="n1")["ok"][0] == "n1"
    assert _ask(_pyslurm(), "node", name="nosuch")["ok"] is None
    missing = _pyslurm(node=RPCError(2018, "Invalid node name specified"))
    assert _ask(missing, "node", name="n1")["ok"] is None


def test_reasons_finished_and_jobs_on_keep_what_they_need() -> None:
    """reasons: nodes with a reason; finished: ended states; jobs_on: jobs with nodes."""
    assert [r[0] for r in _ask(_pyslurm(), "reasons")["ok"]] == ["n2"]
    assert [r[0] for r in _ask(_pyslurm(), "finished")["ok"]] == [3]
    assert [r[0] for r in _ask(_pyslurm(), "jobs_on", name="n1")["ok"]] == [1, 3]


def test_versions_reads_the_old_config_where_the_object_one_has_none() -> None:
    """22.5's slurmctld.Config has no version: pyslurm.config().get() gives it."""
    ok = _ask(_pyslurm(), "versions")["ok"]
    assert ok["slurmctld"] == "22.05.8"
    assert ok["pyslurm"] == "22.5.3"


@pytest.mark.parametrize(
    ("exc", "kind", "errno"),
    [
        (RPCError(1800, "Unable to contact slurm controller"), "not-reached", 1800),
        (RPCError(1802, "receive failure"), "transient", 1802),
        (RPCError(1005, "Protocol version has changed"), "terminal", 1005),
        (RPCError(2002, "Access/permission denied"), "denied", 2002),
        (ValueError("old API", 2027), "not-reached", 2027),
        (AttributeError("no such property"), "terminal", None),
    ],
)
def test_errors_are_answered_with_their_kind_and_number(
    exc: Exception, kind: str, errno: int | None
) -> None:
    """By errno as the plan's table says; a Python error is terminal (a build that differs)."""
    said = _ask(_pyslurm(nodes=exc), "nodes")
    assert (said["error"], said["errno"]) == (kind, errno)
    assert said["detail"].startswith(type(exc).__name__)
    assert "ok" not in said


def test_an_unknown_op_is_terminal() -> None:
    """A parent newer than its child says so, rather than hanging."""
    assert _ask(_pyslurm(), "cas")["error"] == "terminal"


def test_main_refuses_an_unreadable_conf_before_importing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No slurm.conf: exit 2 and one line naming it (libslurm would fall back to DNS)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(SystemExit) as ended:
        pyslurm_child.main(["/nonexistent/slurm.conf"])
    assert ended.value.code == 2
    assert "cannot read slurm.conf /nonexistent/slurm.conf" in capsys.readouterr().err


def test_main_answers_each_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Hello first (version, pid), then one answer a request line, bad lines answered too."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lab\n")
    monkeypatch.setattr(importlib, "import_module", lambda _name: _pyslurm())
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"id": 1, "op": "reasons"}\nnot json\n'))
    monkeypatch.setenv("SLURM_CONF", "/before")  # main sets it: restored after the test
    pyslurm_child.main([str(conf)])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["ready"]["pyslurm"] == "22.5.3"
    assert lines[1]["id"] == 1
    assert [r[0] for r in lines[1]["ok"]] == ["n2"]
    assert lines[2]["error"] == "terminal"


def test_a_node_without_a_reason_never_looks_up_its_reason_user() -> None:
    """pyslurm turns ``reason_user`` into a name through the passwd database on each read.

    At 5,000 nodes that lookup was 100-150 ms of the child's 130-280 ms for the rows (the
    whole read: 482 ms against scontrol's 78): a node without a reason has no setter to name.
    """

    class _Watched(SimpleNamespace):
        looked_up = 0

        @property
        def reason_user(self) -> str:
            type(self).looked_up += 1
            return "root"

    values: dict[str, Any] = dict.fromkeys(f for f in NODE_FIELDS if f != "reason_user")
    idle = _Watched(**{**values, "name": "n1", "state": "IDLE", "reason": None})
    held = _Watched(**{**values, "name": "n2", "state": "IDLE+DRAIN", "reason": "maint"})
    user = NODE_FIELDS.index("reason_user")
    assert pyslurm_child.node_row(idle)[user] is None
    assert pyslurm_child.node_row(held)[user] == "root"
    assert _Watched.looked_up == 1

"""The pyslurm child's writes and statistics (pyslurm_child.py) on a stand-in for pyslurm.

What each write sends (one ``Node.modify`` for a whole hostlist; a requeue a job), that it says
``sending`` right before the request and not before a refusal of its own, that an empty text
is refused (pyslurm would send it as "unchanged"), how a refused requeue is reported, and that
a lost answer of a write is an unknown outcome. The real module runs only in the child against
real clusters (tests/contract/).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from slonkd.adapters.slurm import pyslurm_child
from slonkd.adapters.slurm.parsing_pyslurm import ESLURM_ALREADY_DONE, ESLURM_INVALID_NODE_STATE


class RPCError(Exception):
    """pyslurm.RPCError: a message and a SLURM error number."""

    def __init__(self, errno: int = -1, msg: str = "") -> None:
        super().__init__(msg)
        self.errno = errno


class _Fake:
    """Records every request the child makes, in order, beside the ``sending`` lines."""

    def __init__(self, **fail: Exception) -> None:
        self.log: list[tuple[str, Any]] = []
        self.fail = fail
        fake = self

        class Node:
            def __init__(self, name: str | None = None, **changes: Any) -> None:
                self.name, self.changes = name, changes

            def modify(self, delta: Node) -> None:
                fake.log.append(("modify", (self.name, delta.changes)))
                if "modify" in fake.fail:
                    raise fake.fail["modify"]

        class Job:
            def __init__(self, job_id: int) -> None:
                self.id = job_id

            def requeue(self) -> None:
                fake.log.append(("requeue", self.id))
                if f"requeue{self.id}" in fake.fail:
                    raise fake.fail[f"requeue{self.id}"]

        def kill(job_id: int, signal: int, flags: int) -> int:
            fake.log.append(("kill", (job_id, signal, flags)))
            return 0

        self.py = SimpleNamespace(
            RPCError=RPCError,
            Node=Node,
            Job=Job,
            slurm_kill_job=kill,
            slurm_reconfigure=lambda: fake.log.append(("reconfigure", None)),
            slurmctld=SimpleNamespace(),  # 22.5: no object reconfigure, no Statistics
            statistics=lambda: SimpleNamespace(get=lambda: STATS_22),
        )

    def ask(self, op: str, **args: Any) -> dict[str, Any]:
        return pyslurm_child.answer(
            self.py,
            {"id": 3, "op": op, "args": args},
            lambda what: self.log.append(("sending", what)),
        )


STATS_22 = {
    "server_thread_count": 3,
    "agent_queue_size": 1,
    "jobs_submitted": 5,
    "jobs_running": 2,
    "schedule_cycle_last": 40,
    "rpc_type_stats": {"REQUEST_NODE_INFO": {"count": 9, "total_time": 900, "ave_time": 100}},
}


def test_an_update_is_one_modify_of_the_whole_hostlist_after_sending() -> None:
    """state, reason and extra go in one request; None fields are not sent at all."""
    fake = _Fake()
    said = fake.ask("update", expr="n[1-3]", state="DRAIN", reason="slonkd: x", extra=None)
    assert said == {"id": 3, "ok": True, "rpcs": 1}
    assert fake.log == [
        ("sending", "n[1-3]"),
        ("modify", ("n[1-3]", {"state": "DRAIN", "reason": "slonkd: x"})),
    ]


def test_an_empty_text_is_refused_before_anything_is_sent() -> None:
    """pyslurm sends "" as NULL ("unchanged"): the child refuses it instead of writing nothing."""
    fake = _Fake()
    said = fake.ask("update", expr="n1", state="RESUME", reason=None, extra="")
    assert said["error"] == "terminal"
    assert "extra" in str(said["detail"])
    said = fake.ask("comment", expr="n1", comment="")
    assert said["error"] == "terminal"
    assert fake.log == []


def test_a_refused_update_is_typed_and_a_lost_answer_is_an_unknown_outcome() -> None:
    """Invalid node state: refused (the parent judges node by node); a lost answer: unknown."""
    fake = _Fake(modify=RPCError(ESLURM_INVALID_NODE_STATE, "Invalid node state specified"))
    assert fake.ask("update", expr="n1", state="RESUME")["error"] == "refused"
    fake = _Fake(modify=RPCError(1802, "Socket timed out"))
    assert fake.ask("update", expr="n1", state="DRAIN", reason="r")["error"] == "outcome-unknown"
    assert fake.ask("comment", expr="n1", comment="c")["error"] == "outcome-unknown"


def test_requeue_reports_a_job_that_ended_and_raises_anything_else() -> None:
    """Job 2 ended meanwhile: refused, the others requeued; a lost answer is an unknown outcome."""
    fake = _Fake(requeue2=RPCError(ESLURM_ALREADY_DONE, "Job/step already completing"))
    said = fake.ask("requeue", job_ids=[1, 2, 3])
    assert said["ok"] == {"requeued": [1, 3], "refused": {"2": "Job/step already completing"}}
    assert said["rpcs"] == 3
    assert [e for e in fake.log if e[0] == "sending"] == [
        ("sending", "1"),
        ("sending", "2"),
        ("sending", "3"),
    ]
    fake = _Fake(requeue1=RPCError(1801, "lost"))
    assert fake.ask("requeue", job_ids=[1, 2])["error"] == "outcome-unknown"
    assert ("requeue", 2) not in fake.log


def test_the_signal_goes_to_the_batch_shell_and_reconfigure_by_the_old_api_on_22_5() -> None:
    """``slurm_kill_job`` with KILL_JOB_BATCH; 22.5's reconfigure is the old API's."""
    fake = _Fake()
    assert fake.ask("signal", job_id=12, signal=10)["ok"] is True
    assert fake.ask("reconfigure")["ok"] is True
    assert fake.log == [
        ("sending", "12"),
        ("kill", (12, 10, pyslurm_child.KILL_JOB_BATCH)),
        ("sending", "reconfigure"),
        ("reconfigure", None),
    ]


def test_diag_of_22_5_takes_the_old_dict_and_missing_fields_are_0() -> None:
    """22.5's object API has no statistics: the old dict, as sdiag's fields."""
    said = _Fake().ask("diag")["ok"]
    assert said["server_thread_count"] == 3
    assert said["agent_count"] == 0  # 22.5 has none
    assert said["rpcs"] == {"REQUEST_NODE_INFO": [9, 900]}


def test_diag_of_24_11_takes_the_statistics_object() -> None:
    """24.11's ``slurmctld.Statistics``: its fields and each RPC type's count and time."""
    fake = _Fake()
    fields: dict[str, int] = {**dict.fromkeys(pyslurm_child.STATS, 1), "agent_count": 4}
    pings = SimpleNamespace(count=2, time=30)
    stats = SimpleNamespace(**fields, rpcs_by_type={"REQUEST_PING": pings})
    fake.py.slurmctld = SimpleNamespace(Statistics=SimpleNamespace(load=lambda: stats))
    said = fake.ask("diag")["ok"]
    assert said["agent_count"] == 4
    assert said["rpcs"] == {"REQUEST_PING": [2, 30]}


WRITE_ARGS: dict[str, dict[str, object]] = {
    "update": {"expr": "n1", "state": "DRAIN", "reason": "r"},
    "comment": {"expr": "n1", "comment": "c"},
    "requeue": {"job_ids": [1]},
    "signal": {"job_id": 1, "signal": 10},
    "reconfigure": {},
}


@pytest.mark.parametrize("op", sorted(pyslurm_child.WRITES))
def test_every_write_is_known_and_says_sending(op: str) -> None:
    """Each write op says sending before its request (the parent's unknown-outcome rule)."""
    fake = _Fake()
    assert "ok" in fake.ask(op, **WRITE_ARGS[op])
    assert fake.log[0][0] == "sending"

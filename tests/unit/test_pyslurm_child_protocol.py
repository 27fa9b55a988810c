"""The parent's side of the pyslurm child (pyslurm_link.py) against a fake child script.

No pyslurm and no SLURM: the fake speaks the child's JSON lines (hello, ids, ok/error) and
dies, hangs or chatters on cue. The start, restart waits and last words are slurm_child.py's.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog

from slonkd.adapters.slurm import slurm_child
from slonkd.adapters.slurm.pyslurm_link import PyslurmChild, child_env
from slonkd.adapters.slurm.runner import NodeNotFoundError, NotReachedError
from slonkd.core.errors import OutcomeUnknownError, TerminalError, TransientError
from slonkd.core.fencing import guard_writes

FAKE = """
import json, sys, time
print("noise before hello", file=sys.stderr, flush=True)
print(json.dumps({"ready": {"pyslurm": "24.11.0", "library": "/x/libslurmfull.so",
                            "api": "42.0.0", "pid": 1}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    op, args = req["op"], req["args"]
    if op == "die":
        print("Name or service not known", file=sys.stderr, flush=True)
        sys.exit(40)
    if op.startswith("send-"):
        print(json.dumps({"id": req["id"], "sending": "n1"}), flush=True)
        op = op[5:]
    if op == "crash":
        sys.exit(41)
    if op == "unresolved":
        print("error: slurm_set_addr: Unable to resolve 'ctld'", file=sys.stderr, flush=True)
        sys.exit(42)
    if op == "hang":
        time.sleep(60)
    if op == "chatter":
        print("not json", flush=True)
        print(json.dumps({"id": -1, "ok": "stale"}), flush=True)
    if op == "missing":
        print(json.dumps({"id": req["id"], "error": "not-found", "errno": 2018,
                          "detail": "RPCError: Invalid node name specified"}), flush=True)
        continue
    if op == "unreached":
        print(json.dumps({"id": req["id"], "error": "not-reached", "errno": 1800,
                          "detail": "RPCError: Unable to contact slurm controller"}), flush=True)
        continue
    print(json.dumps({"id": req["id"], "ok": {"op": op, "args": args}, "rpcs": 2}), flush=True)
"""


@pytest.fixture
async def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[PyslurmChild]:
    """A PyslurmChild whose child is FAKE (restart waits of 0.3 s); closed after the test."""
    script = tmp_path / "child.py"
    script.write_text(FAKE)
    monkeypatch.setattr(slurm_child, "RESTART_S", 0.3)
    child = PyslurmChild(conf="/etc/slurm/slurm.conf", prefix=(sys.executable, str(script)))
    try:
        yield child
    finally:
        await child.aclose()


async def test_an_op_is_answered_by_id_and_its_rpcs_counted(fake: PyslurmChild) -> None:
    """The hello is kept; ok comes back; the RPCs the child reports are summed."""
    assert await fake.ask("nodes", {"names": ["n1"]}, timeout_s=10) == {
        "op": "nodes",
        "args": {"names": ["n1"]},
    }
    assert fake.hello["pyslurm"] == "24.11.0"
    assert fake.hello["library"].endswith("libslurmfull.so")
    await fake.ask("reasons", timeout_s=10)
    assert fake.rpcs == 4
    assert fake.starts == 1


async def test_error_words_become_slonkds_errors(fake: PyslurmChild) -> None:
    """not-found is NodeNotFoundError, not-reached NotReachedError; the child lives on."""
    with pytest.raises(NodeNotFoundError, match="Invalid node name"):
        await fake.ask("missing", timeout_s=10)
    with pytest.raises(NotReachedError, match="Unable to contact"):
        await fake.ask("unreached", timeout_s=10)
    assert (await fake.ask("ping", timeout_s=10))["op"] == "ping"
    assert fake.starts == 1


async def test_lines_that_are_not_the_answer_are_dropped(fake: PyslurmChild) -> None:
    """A line that is not JSON, or answers another id, is not taken for the answer."""
    assert (await fake.ask("chatter", timeout_s=10))["op"] == "chatter"


async def test_a_child_that_dies_on_an_op_is_transient_and_started_again(
    fake: PyslurmChild,
) -> None:
    """Its last words are said; no new child before the wait; then a new one answers."""
    await fake.ask("ping", timeout_s=10)
    with (
        structlog.testing.capture_logs() as logs,
        pytest.raises(TransientError, match="exited 40: Name or service not known"),
    ):
        await fake.ask("die", timeout_s=10)
    assert [e["rc"] for e in logs if e["event"] == "slurm.pyslurm_child_exited"] == [40]
    with pytest.raises(TransientError, match="next start in"):
        await fake.ask("ping", timeout_s=10)
    await asyncio.sleep(0.35)
    assert (await fake.ask("ping", timeout_s=10))["op"] == "ping"
    assert fake.starts == 2


async def test_an_op_past_its_timeout_kills_the_child(fake: PyslurmChild) -> None:
    """The op is a TransientError at its timeout, the child is killed, a new one serves."""
    await fake.ask("ping", timeout_s=10)
    pid = fake._proc.pid if fake._proc else 0
    began = time.monotonic()
    with pytest.raises(TransientError, match=r"no answer to hang in 0\.5 s"):
        await fake.ask("hang", timeout_s=0.5)
    assert time.monotonic() - began < 5
    assert fake._proc is not None
    assert fake._proc.returncode is not None
    await asyncio.sleep(0.35)
    assert (await fake.ask("ping", timeout_s=10))["op"] == "ping"
    assert fake._proc is not None
    assert fake._proc.pid != pid


async def test_ops_wait_for_the_one_in_flight(fake: PyslurmChild) -> None:
    """Two ops at once are sent one after the other (the child is serial)."""
    got = await asyncio.gather(*(fake.ask(f"op{i}", timeout_s=10) for i in range(5)))
    assert [g["op"] for g in got] == [f"op{i}" for i in range(5)]


async def test_a_child_that_dies_before_hello_is_terminal_on_the_first_start(
    tmp_path: Path,
) -> None:
    """An import error (this build cannot serve): TerminalError with its last words."""
    script = tmp_path / "broken.py"
    script.write_text("import sys\nprint('undefined symbol: slurm_xfree', file=sys.stderr)\n")
    child = PyslurmChild(prefix=(sys.executable, str(script)))
    with pytest.raises(TerminalError, match="exited 0: undefined symbol: slurm_xfree"):
        await child.ask("ping", timeout_s=10)
    with pytest.raises(TransientError, match="next start in"):  # then waits, transient
        await child.ask("ping", timeout_s=10)
    await child.aclose()


async def test_a_first_start_that_cannot_reach_the_controller_is_transient(
    tmp_path: Path,
) -> None:
    """A controller name that does not resolve says nothing of the build: a retry later."""
    script = tmp_path / "unresolved.py"
    script.write_text(
        "import sys\nprint('error: Unable to resolve \"ctld\"', file=sys.stderr)\nsys.exit(1)\n"
    )
    child = PyslurmChild(prefix=(sys.executable, str(script)))
    with pytest.raises(TransientError, match="Unable to resolve") as caught:
        await child.ask("ping", timeout_s=10)
    assert not isinstance(caught.value, TerminalError)
    await child.aclose()


async def test_a_child_slow_to_start_is_a_retry_not_a_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No hello within CHILD_START_S: killed, TransientError."""
    monkeypatch.setattr(slurm_child, "CHILD_START_S", 0.3)
    child = PyslurmChild(prefix=(sys.executable, "-c", "import time; time.sleep(5)"))
    began = time.monotonic()
    with pytest.raises(TransientError, match=r"not ready in 0\.3 s"):
        await child.ask("ping", timeout_s=10)
    assert time.monotonic() - began < 3
    await child.aclose()


def test_the_childs_environment_leads_with_the_pyslurm_site(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PYTHONPATH: the build's site first, then what this process had; settings' env over."""
    monkeypatch.setenv("PYTHONPATH", "/work/src")
    env = child_env({"SLURM_CONF": "/c/slurm.conf"}, "/cache/site")
    assert env["PYTHONPATH"] == "/cache/site:/work/src"
    assert env["SLURM_CONF"] == "/c/slurm.conf"
    monkeypatch.delenv("PYTHONPATH")
    assert child_env({}, "/cache/site")["PYTHONPATH"] == "/cache/site"
    assert "PYTHONPATH" not in child_env({}, "")


@pytest.mark.parametrize(
    ("op", "error"),
    [
        ("crash", NotReachedError),  # died before it said sending: nothing left
        ("send-crash", OutcomeUnknownError),  # after: it may have been applied
        ("send-unresolved", NotReachedError),  # libslurm's end before any byte left
        ("hang", NotReachedError),
        ("send-hang", OutcomeUnknownError),
    ],
)
async def test_a_write_whose_child_dies_is_not_reached_or_unknown_by_sending(
    fake: PyslurmChild, op: str, error: type[Exception]
) -> None:
    """A write is never a plain TransientError: resent only when it cannot have arrived."""
    with pytest.raises(error):
        await fake.ask(op, timeout_s=0.5, write=True)


async def test_a_write_runs_the_fencing_check_before_its_request(fake: PyslurmChild) -> None:
    """A leader that lost its lease sends nothing: the guard's error, no request line."""
    await fake.ask("ping", timeout_s=10)

    class Fenced(Exception):
        pass

    def refuse() -> None:
        raise Fenced("lease lost")

    async def fenced_write() -> None:  # a task of its own: the guard stays in its context
        guard_writes(refuse)
        await fake.ask("write", timeout_s=10, write=True)

    starts, rpcs = fake.starts, fake.rpcs
    with pytest.raises(Fenced):
        await asyncio.create_task(fenced_write())
    assert (await fake.ask("ping", timeout_s=10))["op"] == "ping"
    assert fake.rpcs == rpcs + 2  # the ping's alone: the write never reached the child
    assert fake.starts == starts

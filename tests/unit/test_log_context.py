"""Context, not arguments, for logs: the term's token, the pass's number, the agent's node.

Issue 38 item 5. The coordinator passed its fencing token by hand to every log line it wrote
(22 places) and the agent a bound logger to its write. Now the term binds ``fencing_token``
in structlog's context once (:func:`~slonkd.runtime.coordinating.leading.lead`), each pass
its ``pass_id`` (``term.Term.one_pass``) and the agent's reconcile its node, pod and reconcile id;
the processors merge them into every line (``merge_contextvars``, as
:func:`slonkd.runtime.kit.logging.configure_logging` sets up). The writes still take the token
explicitly. :func:`lead` runs over the fakes of ``test_coordinator_pass``, as in
``test_coordinator_term_start``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog

from slonkd.core.plan import Policy
from slonkd.runtime.coordinating.leading import lead
from tests.unit.coordinator_fakes import (
    TOKEN,
    FakeNodeWriter,
    FakeSlurm,
    coordinator_with,
    kube_node,
    listed_at_once,
    slurm_node,
)


@contextmanager
def _lines() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every line logged meanwhile, with the context merged as the daemons' logging does."""
    cap = structlog.testing.LogCapture()
    old = structlog.get_config()["processors"]
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, cap])
    try:
        yield cap.entries
    finally:
        structlog.configure(processors=old)


async def test_a_terms_lines_carry_its_token_and_a_pass_its_number() -> None:
    """The cordon of w-1's failure and the pass's own line: token 7, pass 1; none after."""
    slurm = FakeSlurm(
        [slurm_node(0), slurm_node(1, "IDLE+FAIL", "Kill task failed")], failing=set()
    )
    writer = FakeNodeWriter()
    c = coordinator_with(
        slurm, writer, [kube_node(0), kube_node(1)], policy=Policy(remediate=False), sdiag_s=0
    )
    c.nodes.run = listed_at_once(c.nodes)  # type: ignore[method-assign]
    c.pods.run = listed_at_once(c.pods)  # type: ignore[method-assign]
    with _lines() as lines:
        term = asyncio.create_task(lead(c, TOKEN))
        for _ in range(500):
            if c.passes:
                break
            await asyncio.sleep(0.01)
        term.cancel()
        await asyncio.gather(term, return_exceptions=True)
        structlog.get_logger("test").info("test.after_the_term")
    assert ("cordon", "kn-1") in writer.calls
    by_event = {line["event"]: line for line in lines}
    assert by_event["coordinator.leading"]["fencing_token"] == TOKEN
    for event in ("coordinator.pass", "kube.cordon"):
        assert by_event[event]["fencing_token"] == TOKEN, by_event[event]
        assert by_event[event]["pass_id"] == 1, by_event[event]
    assert "fencing_token" not in by_event["test.after_the_term"]
    assert "pass_id" not in by_event["test.after_the_term"]

"""The leader's half of proof of health before return: rechecks sent, records kept.

``decide`` judges each node held ``slonkd:revalidating`` (:mod:`slonkd.core.revalidation`)
and puts the judgement on the plan. After a pass's actions, :class:`Revalidator` sends the
fenced ``recheck`` command to the agent of the node's current pod where the judgement asks
for one (:class:`~slonkd.runtime.coordinating.commands.CommandSender`: the lease is checked right
before
publishing), records what was sent in the state ConfigMap (:mod:`.remembering`, so a new
leader knows since when and which command an answer must name), drops the record once the
answer passed, and sets the two gauges ``slonkd_revalidating_nodes`` and
``slonkd_revalidation_oldest_seconds``. The agents' answers are read by :mod:`.observing`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import structlog

from slonkd.adapters.kube.lease import Superseded
from slonkd.core.command_gate import RECHECK
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.errors import SlonkdError
from slonkd.core.plan import NodeView, Plan
from slonkd.core.revalidation import Pending, Step
from slonkd.runtime.coordinating.commands import CommandSender
from slonkd.runtime.coordinating.remembering import Memory
from slonkd.runtime.kit.metrics import Metrics

log = structlog.get_logger("slonkd.coordinator")


@dataclass(frozen=True, slots=True, kw_only=True)
class Revalidator:
    """Sends the rechecks a pass's judgements ask for and keeps the records."""

    memory: Memory
    commands: CommandSender | None
    """None: no bus, so no recheck can be sent (revalidation is then off, see settings)."""
    metrics: Metrics
    required: tuple[str, ...] = ()
    dry_run: bool = False
    check_valid: Callable[[], int]

    async def after_pass(self, views: Sequence[NodeView], plans: Sequence[Plan]) -> None:
        """Send the due rechecks, record them, drop the records of nodes that passed."""
        now = time.time()
        sent: dict[str, Pending] = {}
        passed: set[str] = set()
        oldest = 0.0
        held = 0
        for view, plan in zip(views, plans, strict=True):
            judgement, node = plan.revalidation, str(view.node)
            record = self.memory.state.revalidating.get(node)
            if judgement is None and record is not None and record.command:
                passed.add(node)  # its hold was lifted by someone else: the record is stale
                continue
            if judgement is None or view.pod is None:
                continue
            if judgement.step is Step.PASSED:
                passed.add(node)
                if record is not None:
                    log.info("coordinator.revalidated", node=node, command=judgement.command)
                continue
            held += 1
            oldest = max(oldest, now - judgement.since)
            if not judgement.send or self.dry_run or self.commands is None:
                continue
            if view.pod.terminating:
                continue  # its successor gets the recheck
            try:
                command = await self.commands.send(
                    node, RECHECK, cause="revalidating", detail=",".join(self.required)[:200]
                )
            except Superseded:
                raise
            except SlonkdError as exc:
                self.check_valid()  # a lost lease ends the term; a broker hiccup waits
                log.warning("coordinator.recheck_not_sent", node=node, error=str(exc)[:200])
                continue
            sent[node] = Pending(
                since=judgement.since,
                pod_uid=view.pod.uid,
                command=command.id,
                requested_at=command.at or now,
            )
            log.info(
                "coordinator.revalidating",
                node=node,
                command=command.id,
                pending=list(judgement.pending),
                since=judgement.since,
                why=judgement.why,
            )
        self.metrics.revalidating.set(held)
        self.metrics.revalidation_oldest.set(round(oldest, 1))
        stale = passed & set(self.memory.state.revalidating)
        if (not sent and not stale) or self.dry_run:
            return

        def change(st: CoordinatorState) -> CoordinatorState:
            records = {k: v for k, v in st.revalidating.items() if k not in stale}
            return replace(st, revalidating={**records, **sent})

        try:
            await self.memory.update(self.check_valid(), change)
        except Superseded:
            raise  # a newer leader wrote: this term ends
        except SlonkdError as exc:
            log.warning("coordinator.revalidation_not_recorded", error=str(exc)[:200])
            self.check_valid()

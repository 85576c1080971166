"""Execute one item: claim → submitted (durable) → gateway → outcome. At most once, always."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from pacer_common import tracing
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.requests import expired
from pacer_common.domain.status import ItemStatus
from pacer_common.logs import bind
from pacer_sender.domain.decisions import Decision, after_failure
from pacer_sender.ports import Gateway, ItemRepository

log = logging.getLogger(__name__)

Outcome = Literal[
    "confirmed", "retry", "failed", "in_doubt", "rate_limited", "expired", "duplicate",
    "not_pending", "fenced", "guid_lost", "deadline_missed", "held",
    "needs_human",
]


@dataclass(frozen=True)
class Executed:
    outcome: Outcome
    called_gateway: bool
    # For metrics, not part of the result's identity:
    error: SendError | None = field(default=None, compare=False)  # the gateway's refusal or transport failure
    claimed_at: datetime | None = field(default=None, compare=False)  # when this sender claimed it (submitted)
    answered_at: datetime | None = field(default=None, compare=False)  # when the gateway call ended
    first_claim: bool = field(default=False, compare=False)  # no attempt at the item before this one
    # When the gateway call began (time.monotonic()): the moment the recipient's side sees the
    # send, so the guid's next send is spaced from it, not from the end of the confirmation.
    called_at: float | None = field(default=None, compare=False)


class Executor:
    def __init__(self, repo: ItemRepository, gateway: Gateway, owner: str, retry: RetryPolicy,
                 rng: random.Random | None = None, send_deadline_s: float = 10.0,
                 expire_margin_s: float = 1.0) -> None:
        self.repo = repo
        self.gateway = gateway
        self.owner = owner
        self.retry = retry
        self.rng = rng or random.Random()
        # Never call the gateway later than this after claiming: well inside the lease.
        self.send_deadline_s = send_deadline_s
        # An item this close to its expire_at is not begun: claim, submit and the call could
        # land after it. Expired instead, never sent late.
        self.expire_margin = timedelta(seconds=expire_margin_s)

    async def execute(self, cmd: ItemCommand) -> Executed:
        # The item's trace (the job request's, kept on its row and command), else a new one.
        with (tracing.span("send item", tracing.parent(cmd.traceparent), "consumer", item_id=cmd.item_id),
              bind(item_id=cmd.item_id, job_id=cmd.job_id, guid=cmd.guid, shard_id=cmd.shard_id)):
            return await self._execute(cmd)

    async def _execute(self, cmd: ItemCommand) -> Executed:
        now = datetime.now(UTC)
        if expired(cmd.expire_at, now + self.expire_margin):
            await self.repo.expire(cmd)
            return Executed("expired", False)
        started = time.monotonic()
        begun = await self.repo.begin_send(cmd, self.owner)
        if begun.outcome == "guid_lost":
            return Executed("guid_lost", False)
        if begun.outcome == "held":
            # Its job, shard or guid is on hold: the item stays pending (marked held) and the
            # reconciler re-publishes it when the hold is lifted.
            log.info("item held: %s", begun.holder)
            return Executed("held", False)
        if begun.outcome == "not_pending":
            # Already taken, finished or cancelled: a redelivered command is not an error.
            return Executed("not_pending", False)
        if begun.outcome == "duplicate":
            log.warning("duplicate send intercepted: idempotency key held by item %s", begun.holder)
            return Executed("duplicate", False)
        assert begun.epoch is not None and begun.attempts is not None
        # The item's lease runs from its claim, which is no earlier than the moment the
        # claiming statement was sent (time spent queued for a batched statement is not
        # lease time).
        started = max(started, begun.sent_at or started)
        claimed_at = datetime.now(UTC)
        first = begun.attempts == 0
        if time.monotonic() - started > self.send_deadline_s:
            # Paused (GC, SIGSTOP, overload) between submitted and the call: our lease may be
            # gone and the item re-sent by someone else. Do not send; it goes round again.
            d = Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", FailureClass.NOT_SENT.value,
                         "send deadline passed before the gateway call", datetime.now(UTC), release_ledger=True)
            await self.repo.settle(cmd, begun.epoch, d)
            return Executed("deadline_missed", False, None, claimed_at, first_claim=first)
        called_at = time.monotonic()
        try:
            receipt = await self.gateway.send_text(cmd.guid, cmd.to_id, cmd.content, cmd.idem_key,
                                                   deadline=started + self.send_deadline_s)
        except SendError as err:
            answered_at = datetime.now(UTC)
            decision = after_failure(err, begun.attempts + 1, self.retry, datetime.now(UTC), self.rng)
            if not await self.repo.settle(cmd, begun.epoch, decision):
                log.warning("outcome not recorded: lease taken over (%s)", err)
                return Executed("fenced", True, err, claimed_at, answered_at, first, called_at)
            log.info("send failed: %s → %s", err, decision.to.value)
            outcome: Outcome = ("rate_limited" if err.failure_class is FailureClass.RATE_LIMITED
                                else "in_doubt" if err.failure_class is FailureClass.IN_DOUBT
                                else "needs_human" if decision.hold_guid is not None
                                else "retry" if decision.next_attempt_at else "failed")
            return Executed(outcome, True, err, claimed_at, answered_at, first, called_at)
        answered_at = datetime.now(UTC)
        if not await self.repo.confirm(cmd, begun.epoch, receipt):
            log.warning("confirmation not recorded: lease taken over")
            return Executed("fenced", True, None, claimed_at, answered_at, first, called_at)
        return Executed("confirmed", True, None, claimed_at, answered_at, first, called_at)

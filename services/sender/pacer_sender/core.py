"""Execute one item: claim → submitted (durable) → gateway → outcome. At most once, always."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.requests import expired
from pacer_common.logs import bind
from pacer_common.domain.status import ItemStatus
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
        with bind(item_id=cmd.item_id, job_id=cmd.job_id, guid=cmd.guid, shard_id=cmd.shard_id):
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
        if time.monotonic() - started > self.send_deadline_s:
            # Paused (GC, SIGSTOP, overload) between submitted and the call: our lease may be
            # gone and the item re-sent by someone else. Do not send; it goes round again.
            d = Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", FailureClass.NOT_SENT.value,
                         "send deadline passed before the gateway call", datetime.now(UTC), release_ledger=True)
            await self.repo.settle(cmd, begun.epoch, d)
            return Executed("deadline_missed", False)
        try:
            receipt = await self.gateway.send_text(cmd.guid, cmd.to_id, cmd.content, cmd.idem_key,
                                                   deadline=started + self.send_deadline_s)
        except SendError as err:
            decision = after_failure(err, begun.attempts + 1, self.retry, datetime.now(UTC), self.rng)
            if not await self.repo.settle(cmd, begun.epoch, decision):
                log.warning("outcome not recorded: lease taken over (%s)", err)
                return Executed("fenced", True)
            log.info("send failed: %s → %s", err, decision.to.value)
            if err.failure_class is FailureClass.RATE_LIMITED:
                return Executed("rate_limited", True)
            if err.failure_class is FailureClass.IN_DOUBT:
                return Executed("in_doubt", True)
            if decision.hold_guid is not None:
                return Executed("needs_human", True)
            return Executed("retry" if decision.next_attempt_at else "failed", True)
        if not await self.repo.confirm(cmd, begun.epoch, receipt):
            log.warning("confirmation not recorded: lease taken over")
            return Executed("fenced", True)
        return Executed("confirmed", True)

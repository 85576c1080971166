"""Execute one item: claim → submitted (durable) → gateway → outcome. At most once, always."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.requests import expired
from pacer_common.logs import bind
from pacer_sender.domain.decisions import after_failure
from pacer_sender.ports import Gateway, ItemRepository

log = logging.getLogger(__name__)

Outcome = Literal[
    "confirmed", "retry", "failed", "in_doubt", "rate_limited", "expired", "duplicate",
    "not_pending", "fenced",
]


@dataclass(frozen=True)
class Executed:
    outcome: Outcome
    called_gateway: bool


class Executor:
    def __init__(self, repo: ItemRepository, gateway: Gateway, owner: str, retry: RetryPolicy,
                 rng: random.Random | None = None) -> None:
        self.repo = repo
        self.gateway = gateway
        self.owner = owner
        self.retry = retry
        self.rng = rng or random.Random()

    async def execute(self, cmd: ItemCommand) -> Executed:
        with bind(item_id=cmd.item_id, job_id=cmd.job_id, guid=cmd.guid, shard_id=cmd.shard_id):
            return await self._execute(cmd)

    async def _execute(self, cmd: ItemCommand) -> Executed:
        now = datetime.now(UTC)
        if expired(cmd.expire_at, now):
            await self.repo.expire(cmd)
            return Executed("expired", False)
        begun = await self.repo.begin_send(cmd, self.owner)
        if begun.outcome == "not_pending":
            # Already taken, finished or cancelled: a redelivered command is not an error.
            return Executed("not_pending", False)
        if begun.outcome == "duplicate":
            log.warning("duplicate send intercepted: idempotency key held by item %s", begun.holder)
            return Executed("duplicate", False)
        assert begun.epoch is not None and begun.attempts is not None
        try:
            receipt = await self.gateway.send_text(cmd.guid, cmd.to_id, cmd.content, cmd.idem_key)
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
            return Executed("retry" if decision.next_attempt_at else "failed", True)
        if not await self.repo.confirm(cmd, begun.epoch, receipt):
            log.warning("confirmation not recorded: lease taken over")
            return Executed("fenced", True)
        return Executed("confirmed", True)

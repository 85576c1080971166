"""Execute one item: claim → submitted (durable) → gateway → outcome. At most once, always."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from pacer_common import tracing
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.guid_health import DEFAULT_STATE_CODES, GuidState
from pacer_common.domain.requests import MediaMessage, expired
from pacer_common.domain.status import ItemStatus
from pacer_common.gateway import MediaAnswer
from pacer_common.logs import bind
from pacer_sender.domain.decisions import Decision, after_failure
from pacer_sender.domain.media import MediaTiming, next_step, url_hash
from pacer_sender.ports import Gateway, ItemRepository, MediaGateway, MediaStore

log = logging.getLogger(__name__)

Outcome = Literal[
    "confirmed", "retry", "failed", "in_doubt", "rate_limited", "expired", "duplicate",
    "not_pending", "fenced", "guid_lost", "deadline_missed", "held",
    "needs_human", "media_waiting",
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


class Executor:
    def __init__(self, repo: ItemRepository, gateway: Gateway, owner: str, retry: RetryPolicy,
                 rng: random.Random | None = None, send_deadline_s: float = 10.0,
                 expire_margin_s: float = 1.0, states: Mapping[int, GuidState] = DEFAULT_STATE_CODES,
                 media: MediaStore | None = None, media_gateway: MediaGateway | None = None,
                 media_timing: MediaTiming | None = None) -> None:
        self.repo = repo
        self.media = media  # None: every item is text (tests of the text path)
        self.media_gateway = media_gateway
        self.media_timing = media_timing or MediaTiming()
        self.states = states  # needs-human gateway codes → the guid's lifecycle state
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
        media: tuple[str, str] | None = None  # (kind, mediaId) of a media item whose media is ready
        if self.media is not None:
            msg = await self.media.message_of(cmd.job_id)
            if isinstance(msg, MediaMessage):
                ready = await self._media_ready(cmd, msg)
                if isinstance(ready, Executed):
                    return ready
                media = (msg.type, ready)
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
        try:
            if media is not None and self.media_gateway is not None:
                receipt = await self.media_gateway.send_media(media[0], cmd.guid, cmd.to_id, media[1], cmd.idem_key,
                                                              deadline=started + self.send_deadline_s)
            else:
                receipt = await self.gateway.send_text(cmd.guid, cmd.to_id, cmd.content, cmd.idem_key,
                                                       deadline=started + self.send_deadline_s)
        except SendError as err:
            answered_at = datetime.now(UTC)
            decision = after_failure(err, begun.attempts + 1, self.retry, datetime.now(UTC), self.rng, self.states)
            if not await self.repo.settle(cmd, begun.epoch, decision):
                log.warning("outcome not recorded: lease taken over (%s)", err)
                return Executed("fenced", True, err, claimed_at, answered_at, first)
            log.info("send failed: %s → %s", err, decision.to.value)
            outcome: Outcome = ("rate_limited" if err.failure_class is FailureClass.RATE_LIMITED
                                else "in_doubt" if err.failure_class is FailureClass.IN_DOUBT
                                else "needs_human" if decision.guid_state is not None
                                else "retry" if decision.next_attempt_at else "failed")
            return Executed(outcome, True, err, claimed_at, answered_at, first)
        answered_at = datetime.now(UTC)
        if not await self.repo.confirm(cmd, begun.epoch, receipt):
            log.warning("confirmation not recorded: lease taken over")
            return Executed("fenced", True, None, claimed_at, answered_at, first)
        return Executed("confirmed", True, None, claimed_at, answered_at, first)

    async def _media_ready(self, cmd: ItemCommand, msg: MediaMessage) -> str | Executed:
        """The ready media's id, or what became of the item: it waits (pending, with its reason)
        or fails (the upload failed). Uploads the media if this guid has not yet."""
        assert self.media is not None and self.media_gateway is not None
        h = url_hash(msg.url)
        row = await self.media.media(cmd.guid, h)
        step, until = next_step(row, datetime.now(UTC), self.media_timing)
        called = False
        if step == "upload":
            called = True
            try:
                answer = await self.media_gateway.upload_media(cmd.guid, msg.url, msg.type, msg.fileName,
                                                               f"media:{cmd.guid}:{h}")
            except SendError as err:
                if err.failure_class is not FailureClass.BAD_PARAMS:  # not the media's fault: again later
                    return await self._media_wait(cmd, datetime.now(UTC) + self.media_timing.poll_every,
                                                  f"media upload not done, trying again: {err}", True)
                answer = MediaAnswer("-", "failed", str(err), 0.0)
            row = await self.media.uploaded(cmd.guid, h, msg, answer)
        elif step == "poll":
            assert row is not None
            called = True
            try:
                answer = await self.media_gateway.media_status(cmd.guid, row.media_id)
                row = await self.media.checked(cmd.guid, h, answer.status, answer.reason)
            except SendError as err:
                row = await self.media.checked(cmd.guid, h, "pending", f"status poll failed: {err}")
        step, until = next_step(row, datetime.now(UTC), self.media_timing)
        if step == "send":
            assert row is not None
            return row.media_id
        if step == "fail":
            assert row is not None
            await self.media.fail_unsent(cmd, "bad_params", f"media upload failed: {row.reason or 'no reason given'}")
            return Executed("failed", called)
        assert row is not None
        return await self._media_wait(cmd, until or datetime.now(UTC) + self.media_timing.recheck,
                                      f"waiting for {msg.type} {row.media_id} to be ready (uploaded "
                                      f"{row.uploaded_at:%H:%M:%S})", called)

    async def _media_wait(self, cmd: ItemCommand, until: datetime, reason: str, called: bool) -> Executed:
        assert self.media is not None
        await self.media.wait(cmd, until, reason)
        return Executed("media_waiting", called)

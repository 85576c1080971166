"""Execute one item: claim → submitted (durable) → gateway → outcome. At most once, always."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from pacer_common import tracing
from pacer_common.db.errors import TransientError
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.guid_health import DEFAULT_STATE_CODES, GuidState, state_for_code
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.requests import AnyMessage, MediaMessage, TagsMessage, TextMessage, expired
from pacer_common.domain.status import ItemStatus
from pacer_common.gateway import SendDeadlinePassed, failed_upload
from pacer_common.logs import bind
from pacer_sender.domain.decisions import Decision, after_failure
from pacer_sender.domain.media import (
    MediaTiming,
    after_media_refusal,
    forgotten,
    gateway_bad_params,
    media_hash,
    next_generation,
    next_step,
    upload_key,
)
from pacer_sender.ports import ActionGateway, ActionStore, Begun, Deferrals, Gateway, ItemRepository

log = logging.getLogger(__name__)

Outcome = Literal[
    "confirmed", "retry", "failed", "in_doubt", "rate_limited", "expired", "duplicate",
    "not_pending", "fenced", "guid_lost", "deadline_missed", "expiring", "held",
    "needs_human", "media_waiting", "media_ready", "yielded", "deferred",
]


# The error an item that gave its turn up records (``yielded``), in its ItemRetryScheduled event.
YIELDED_REASON = "gave its turn up to an online item of the guid, or to a quiet the gateway asked of it"
# An item this close to its expire_at is not begun, nor sent: claim, submit and the call could
# land after it. The same second is pacer_begin_send's (and pacer_begin_send_many's), which
# expires such an item at the claim instead of claiming it.
EXPIRE_MARGIN_S = 1.0


class BeforeCall(Protocol):
    """Awaited once an item is claimed, before its gateway call (:meth:`Executor.execute`),
    with what is left of a quiet a gateway asked of its guid as the claim found it on the
    guid's lease row (seconds; None: none). False: the item gives its turn up."""

    def __call__(self, quiet_s: float | None = None) -> Awaitable[bool]: ...


@dataclass(frozen=True)
class Executed:
    outcome: Outcome
    # The item's own call went to the gateway (its send, tags or customer read): a pacing slot
    # and a send. Not a media upload or status poll made for it (``stepped``), nor Pacer's own
    # deferral before any request (``deferred``: the tenant's breaker open, its quota used up).
    called_gateway: bool
    # For metrics, not part of the result's identity:
    error: SendError | None = field(default=None, compare=False)  # the gateway's refusal or transport failure
    claimed_at: datetime | None = field(default=None, compare=False)  # when this sender claimed it (submitted)
    answered_at: datetime | None = field(default=None, compare=False)  # when the gateway call ended
    first_claim: bool = field(default=False, compare=False)  # no attempt at the item before this one
    # When the gateway's answer came (time.monotonic()): the guid's next send is spaced from
    # it, not from the end of the confirmation's write. Not from the call's start: the gateway
    # sees a send somewhere between the two, so only the answer is sure to come after it.
    answered_mono: float | None = field(default=None, compare=False)
    # How long the claim took, from asking for it to its answer (``ClaimAhead`` learns from it).
    claim_s: float | None = field(default=None, compare=False)
    # A media upload or status poll made for the item called the gateway (its answer, if any,
    # at ``answered_mono``), and the item made no call of its own: a pacing slot, but no send.
    stepped: bool = field(default=False, compare=False)

    @property
    def claimed(self) -> bool:
        """The item was claimed (and ``submitted``) this time, sent or not: the database counts
        every claim in the guid's send windows."""
        return self.claimed_at is not None


@dataclass
class _Call:
    """The gateway's answer to the item's call, once there is one: as a fenced result (its
    outcome not recorded yet), which is how it paces the guid."""

    answered: Executed | None = None


class AfterCall(Exception):
    """Recording the outcome of a call the gateway answered failed (``cause``: the database
    away, a receipt it refused, …). ``called`` still paces the guid: its next send must not
    follow at once."""

    def __init__(self, called: Executed, cause: Exception) -> None:
        super().__init__(f"after the gateway's answer: {type(cause).__name__}: {cause}")
        self.called = called
        self.cause = cause


def _not_begun(begun: Begun) -> Executed | None:
    """What became of an item ``begin_send`` (or the hold check before a media step) did not
    claim; None if it was claimed (``submitted``)."""
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
    if begun.outcome == "expired":
        # Its expire_at came while the media step or the claim waited: expired at the claim.
        return Executed("expired", False)
    return None


class Executor:
    def __init__(self, repo: ItemRepository, gateway: Gateway, owner: str, retry: RetryPolicy,
                 rng: random.Random | None = None, send_deadline_s: float = 10.0,
                 expire_margin_s: float = EXPIRE_MARGIN_S, states: Mapping[int, GuidState] = DEFAULT_STATE_CODES,
                 actions: ActionStore | None = None, action_gateway: ActionGateway | None = None,
                 media_timing: MediaTiming | None = None, deferrals: Deferrals | None = None) -> None:
        self.repo = repo
        self.deferrals = deferrals  # asked before a claim (None: the gateway's own deferrals only)
        self.actions = actions  # None: every item is text (tests of the text path)
        self.action_gateway = action_gateway
        self.media_timing = media_timing or MediaTiming()
        self.states = states  # needs-human gateway codes → the guid's lifecycle state
        self.gateway = gateway
        self.owner = owner
        self.retry = retry
        self.rng = rng or random.Random()
        # Never call the gateway later than this after claiming: well inside the lease.
        self.send_deadline_s = send_deadline_s
        # An item this close to its expire_at is not begun (expired instead), nor sent once
        # begun (put back unsent, to expire): never sent late.
        self.expire_margin = timedelta(seconds=expire_margin_s)

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall | None = None,
                      spare_s: float = 0.0) -> Executed:
        """Execute ``cmd``. ``before_call`` is awaited once the item is claimed, before the
        send deadline is checked and the gateway called, with the quiet its guid keeps at the
        claim: the guid's pacing gap, when the item was claimed ahead of its end, and that
        quiet. False from it: the item gives its turn up (an online item of the guid came
        during the gap, or the quiet lasts past it) and goes round again, unsent, its attempt
        given back (``yielded``). ``spare_s``: how long the confirmation may take after the
        gateway's answer without delaying the guid's next send."""
        # The item's trace (the job request's, kept on its row and command), else a new one.
        with (tracing.span("send item", tracing.parent(cmd.traceparent), "consumer", item_id=cmd.item_id),
              bind(item_id=cmd.item_id, job_id=cmd.job_id, guid=cmd.guid, shard_id=cmd.shard_id)):
            call = _Call()
            try:
                return await self._execute(cmd, before_call, spare_s, call)
            except Exception as exc:
                if call.answered is None:
                    raise
                raise AfterCall(call.answered, exc) from exc

    async def _execute(self, cmd: ItemCommand, before_call: BeforeCall | None,
                       spare_s: float, call: _Call) -> Executed:
        now = datetime.now(UTC)
        if expired(cmd.expire_at, now + self.expire_margin):
            await self.repo.expire(cmd)
            return Executed("expired", False)
        msg: AnyMessage | None = None  # None: a text send (no action store: the text path alone)
        media_id: str | None = None  # of a media item whose media is ready
        if self.actions is not None:
            msg = await self.actions.message_of(cmd.job_id)
            if isinstance(msg, MediaMessage):
                ready = await self._media_ready(cmd, msg)
                if isinstance(ready, Executed):
                    return ready
                media_id = ready
        if self.deferrals is not None:
            sync = msg is not None and not isinstance(msg, (TextMessage, MediaMessage, TagsMessage))
            deferred = self.deferrals.deferral(cmd.tenant, counted=not sync)  # a customer read is no send
            if deferred is not None:
                # Nothing claimed or written: the item stays pending, in the guid's window,
                # and its claim does not count in the guid's send windows.
                return Executed("deferred", False, deferred)
        started = time.monotonic()
        begun = await self.repo.begin_send(cmd, self.owner)
        unclaimed = _not_begun(begun)
        if unclaimed is not None:
            return unclaimed
        assert begun.epoch is not None and begun.attempts is not None
        claim_s = time.monotonic() - started
        # The item's lease runs from its claim, which is no earlier than the moment the
        # claiming statement was sent (time spent queued for a batched statement is not
        # lease time).
        started = max(started, begun.sent_at or started)
        claimed_at = datetime.now(UTC)
        first = begun.attempts == 0
        if before_call is not None and not await before_call(begun.quiet_s):
            # Nothing was sent: the key is freed and the attempt given back; the reconciler
            # makes the item pending again, behind the online item that took its turn.
            d = Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", FailureClass.NOT_SENT.value,
                         YIELDED_REASON, datetime.now(UTC),
                         release_ledger=True, refund=True)
            gave: Outcome = "yielded" if await self.repo.settle(cmd, begun.epoch, d) else "fenced"
            return Executed(gave, False, None, claimed_at, first_claim=first, claim_s=claim_s)
        if time.monotonic() - started > self.send_deadline_s:
            # Paused (GC, SIGSTOP, overload) between submitted and the call: our lease may be
            # gone and the item re-sent by someone else. Do not send; it goes round again. Our
            # own lateness, as when the gateway client finds the deadline passed before writing
            # (SendDeadlinePassed): a deferral, its attempt and budget unit given back.
            missed = SendError(FailureClass.NOT_SENT, None, "send deadline passed before the gateway call",
                               deferred=True)
            d = after_failure(missed, begun.attempts + 1, self.retry, datetime.now(UTC), self.rng, self.states)
            await self.repo.settle(cmd, begun.epoch, d)
            return Executed("deadline_missed", False, missed, claimed_at, first_claim=first, claim_s=claim_s)
        if expired(cmd.expire_at, datetime.now(UTC) + self.expire_margin):
            # Its expire_at came after the claim (the pacing gap, a slow step): not sent. It is
            # `submitted`, which cannot become `expired`: settled as a send that did not happen
            # (key freed, attempt given back), it waits to be expired (the reconciler's
            # expire_due sweep, or the next claim) and is never sent.
            d = Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", FailureClass.NOT_SENT.value,
                         f"expire_at {cmd.expire_at} came before the gateway call", datetime.now(UTC),
                         release_ledger=True, refund=True)
            late: Outcome = "expiring" if await self.repo.settle(cmd, begun.epoch, d) else "fenced"
            return Executed(late, False, None, claimed_at, first_claim=first, claim_s=claim_s)
        try:
            receipt = await self._call(cmd, msg, media_id, started + self.send_deadline_s)
        except SendError as err:
            answered_mono, answered_at = time.monotonic(), datetime.now(UTC)
            # Pacer's own deferral (``err.deferred``) sent nothing: it takes no pacing slot.
            called = call.answered = Executed("fenced", not err.deferred, err, claimed_at, answered_at, first,
                                              answered_mono, claim_s)
            decision = after_failure(err, begun.attempts + 1, self.retry, datetime.now(UTC), self.rng, self.states)
            if isinstance(msg, MediaMessage) and media_id is not None and gateway_bad_params(err):
                gone = await self._media_gone(cmd, media_id)
                # The poll is a call too: the guid's next one is spaced from its answer.
                called = call.answered = replace(called, answered_mono=time.monotonic())
                if gone is not None:
                    decision = await self._media_refused(cmd, msg, media_id, err, gone, decision)
            # The gateway's own quiet (never one of Pacer's deferrals), ending by this clock.
            wait = err.retry_after if err.gateway_rate_limit else None
            quiet_until = None if wait is None else answered_mono + wait.total_seconds()
            if not await self.repo.settle(cmd, begun.epoch, decision, quiet_until):
                log.warning("outcome not recorded: lease taken over (%s)", err)
                return called
            # A guid out of service (a person must act) or an item failed for good is a warning;
            # a retry, a rate limit or a send in doubt, which Pacer settles itself, is not.
            log.log(logging.WARNING if decision.guid_state is not None or decision.to is ItemStatus.FAILED
                    else logging.INFO, "send failed: %s → %s", err, decision.to.value)
            outcome: Outcome = ("deadline_missed" if isinstance(err.__cause__, SendDeadlinePassed)
                                else "deferred" if err.deferred
                                else "rate_limited" if err.failure_class is FailureClass.RATE_LIMITED
                                else "in_doubt" if err.failure_class is FailureClass.IN_DOUBT
                                else "needs_human" if decision.guid_state is not None
                                else "retry" if decision.next_attempt_at else "failed")
            return replace(called, outcome=outcome)
        answered_mono, answered_at = time.monotonic(), datetime.now(UTC)
        called = call.answered = Executed("fenced", True, None, claimed_at, answered_at, first, answered_mono, claim_s)
        if not await self.repo.confirm(cmd, begun.epoch, receipt, spare_s):
            log.warning("confirmation not recorded: lease taken over")
            return called
        return replace(called, outcome="confirmed")

    async def _call(self, cmd: ItemCommand, msg: AnyMessage | None, media_id: str | None,
                    deadline: float) -> Receipt:
        """The item's one gateway action: text, media by ``mediaId``, tags, or a customer sync
        (read ``/customer/detail``, then Pacer's copy written under its version check)."""
        g = self.action_gateway
        if g is None or msg is None or isinstance(msg, TextMessage):
            return await self.gateway.send_text(cmd.guid, cmd.to_id, cmd.content, cmd.idem_key, deadline=deadline,
                                                tenant=cmd.tenant)
        if isinstance(msg, MediaMessage):
            assert media_id is not None
            return await g.send_media(msg.type, cmd.guid, cmd.to_id, media_id, cmd.idem_key, deadline=deadline,
                                      tenant=cmd.tenant)
        if isinstance(msg, TagsMessage):
            return await g.customer_tags(msg.type.removeprefix("tags."), cmd.guid, cmd.to_id, msg.tagIds,
                                         cmd.idem_key, deadline=deadline, tenant=cmd.tenant)
        receipt, customer = await g.customer_detail(cmd.guid, cmd.to_id, cmd.idem_key, deadline=deadline,
                                                    tenant=cmd.tenant)
        assert self.actions is not None
        try:
            stored = await self.actions.save_customer(customer, cmd.item_id)
        except TransientError as exc:
            # Read but not written: read again later (a read is harmless to repeat). Left
            # submitted, the reconciler's lookup would confirm a sync that wrote nothing.
            raise SendError(FailureClass.RETRYABLE, None, f"customer {customer.customer_id} read but not saved: "
                                                          f"database unavailable: {exc}") from exc
        verdict = (f"customer {customer.customer_id} v{customer.version} applied" if stored is None
                   else f"customer {customer.customer_id} v{customer.version} not applied: Pacer has v{stored}")
        return replace(receipt, msg=verdict)

    async def _media_ready(self, cmd: ItemCommand, msg: MediaMessage) -> str | Executed:
        """The ready media's id, or what became of the item: it waits (pending, with its reason)
        or fails (the upload failed). Uploads the media if this guid has not yet."""
        assert self.actions is not None and self.action_gateway is not None
        h = media_hash(msg.url, msg.type, msg.fileName)
        row = await self.actions.media(cmd.guid, h)
        step, until = next_step(row, datetime.now(UTC), self.media_timing)
        if step != "send":
            # Whatever the step, not for an item on hold (its job paused or awaiting approval,
            # its shard paused, its guid paused or out): begin_send, which would refuse it,
            # comes after the step. It stays pending, marked held, with the reason it had.
            held = await self.actions.hold(cmd)
            if held is not None:
                unclaimed = _not_begun(held)
                assert unclaimed is not None
                return unclaimed
        step_error: SendError | None = None  # a refused upload or poll: a rate limit slows the guid
        stepped: float | None = None  # when the gateway answered an upload or poll made now
        if step == "upload":
            began = datetime.now(UTC)
            generation = next_generation(row)
            try:
                answer = await self.action_gateway.upload_media(cmd.guid, msg.url, msg.type, msg.fileName,
                                                                upload_key(cmd.guid, h, generation), tenant=cmd.tenant)
                stepped = time.monotonic()
            except SendError as err:
                stepped = None if err.deferred else time.monotonic()  # Pacer's own deferral: no request
                if err.failure_class is FailureClass.NEEDS_HUMAN:  # the account is out: its queue is held
                    await self.actions.guid_state(cmd.guid, state_for_code(err.code, self.states), str(err), began)
                if err.failure_class is not FailureClass.BAD_PARAMS:  # not the media's fault: again later
                    return await self._media_wait(cmd, datetime.now(UTC) + self.media_timing.poll_every,
                                                  f"media upload not done, trying again: {err}", err, stepped)
                answer = failed_upload(h, str(err))
            row = await self.actions.uploaded(cmd.guid, h, msg, answer, generation)
        elif step == "poll":
            assert row is not None
            polled = row.media_id
            try:
                answer = await self.action_gateway.media_status(cmd.guid, polled, tenant=cmd.tenant)
                stepped = time.monotonic()
                status, reason = answer.status, answer.reason
            except SendError as err:
                stepped = None if err.deferred else time.monotonic()
                step_error = err
                # The gateway's own bad_params (a code, not an HTTP 4xx from whatever is in front
                # of it): it does not know the media (any more). Anything else: poll again later.
                status, reason = ("failed", f"status poll refused: {err}") if gateway_bad_params(err) else \
                    ("pending", f"status poll failed: {err}")
            # None: the media was uploaded again meanwhile (a newer generation); read it as it is
            row = await self.actions.checked(cmd.guid, h, polled, status, reason) or \
                await self.actions.media(cmd.guid, h)
            if row is None:
                return await self._media_wait(cmd, datetime.now(UTC) + self.media_timing.recheck,
                                              f"waiting for {msg.type}: its record is gone, uploading again", step_error,
                                              stepped)
        step, until = next_step(row, datetime.now(UTC), self.media_timing)
        if step == "send":
            assert row is not None
            if stepped is not None:
                # The upload or poll made now says ready. That call took the guid's turn: the
                # send is the guid's next call, spaced from this one's answer as any call is
                # (the worker puts the item back in its window, unclaimed, and picks it again
                # once the gap is over), never straight after it.
                return Executed("media_ready", False, step_error, answered_mono=stepped, stepped=True)
            return row.media_id
        if step == "fail":
            assert row is not None
            await self.actions.fail_unsent(cmd, "bad_params", f"media upload failed: {row.reason or 'no reason given'}")
            return Executed("failed", False, answered_mono=stepped, stepped=stepped is not None)
        assert row is not None
        return await self._media_wait(cmd, until or datetime.now(UTC) + self.media_timing.recheck,
                                      f"waiting for {msg.type} {row.media_id} to be ready (uploaded "
                                      f"{row.uploaded_at:%H:%M:%S})", step_error, stepped)

    async def _media_gone(self, cmd: ItemCommand, media_id: str) -> str | None:
        """A send of ``media_id`` was refused with the gateway's bad_params code, which a bad
        toId or a dissolved room answer too: ask the gateway whether it still knows the media.
        What its poll said, if the media is gone (``forgotten``); None if the refusal is the
        item's own (the media ``ready``, or the poll said nothing: transport, 5xx)."""
        assert self.action_gateway is not None
        try:
            answer = await self.action_gateway.media_status(cmd.guid, media_id, tenant=cmd.tenant)
        except SendError as err:
            if forgotten(None, err):
                return f"status poll refused: {err}"
            log.info("media %s: status poll after a refused send failed (%s): the refusal is the item's", media_id, err)
            return None
        if forgotten(answer.status, None):
            return f"status {answer.status}: {answer.reason or 'no reason given'}"
        return None

    async def _media_refused(self, cmd: ItemCommand, msg: MediaMessage, media_id: str, err: SendError,
                             gone: str, failed: Decision) -> Decision:
        """A send of ``media_id`` refused by the gateway's bad_params code, and its poll says the
        gateway no longer knows the media (``gone``). Its record goes stale (the next item
        uploads it again), and the item goes back to upload it too, once; refused again after
        that, it fails (``failed``), saying so."""
        assert self.actions is not None
        await self.actions.media_refused(cmd.guid, media_hash(msg.url, msg.type, msg.fileName), media_id,
                                         f"send of {media_id} refused: {err}; {gone}")
        return after_media_refusal(err, media_id, await self.actions.sent_back_for_media(cmd.item_id), failed,
                                   datetime.now(UTC))

    async def _media_wait(self, cmd: ItemCommand, until: datetime, reason: str,
                          error: SendError | None, stepped: float | None = None) -> Executed:
        """The item waits for its media: no send. ``error``: the step's refusal, if any;
        ``stepped``: when the gateway answered the upload or poll made now, if one was (it
        takes a pacing slot, not a send's place in the windows)."""
        assert self.actions is not None
        await self.actions.wait(cmd, until, reason)
        return Executed("media_waiting", False, error, answered_mono=stepped, stepped=stepped is not None)

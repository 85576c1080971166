"""One guid's items, executed one at a time, each with the error policy.

What goes wrong with an item stays with that item: the database away (``TransientError``)
is retried without end; a value the item holds that cannot be stored or sent fails it
(``bad_params``, with the reason); any other exception is logged, counted and retried a
few times with backoff, then fails the item as an internal error — but only while it is
pending: a submitted item is the reconciler's to verify. The guid goes on either way.

A guid's sends are spaced from the gateway's answer to the last one (``answered_mono``):
not from the call's start, as the gateway may take the send any time until it answers, nor
from the end of the confirmation, which must not stretch the interval — and whatever goes
wrong after the answer (``AfterCall``), the call is paced. A send left without an answer (in
doubt) slows the guid down, as a rate limit does: the gateway may still act on it late, and
the next send should not land right behind it. Only the gateway's own rate limit slows the
guid (and one that asks for quiet, ``Retry-After``, holds the whole guid that long from its
answer): Pacer's deferrals (a tenant's breaker or quota) sent nothing and take no slot. A media
upload or status poll (``Executed.stepped``) is a call but no send: it takes a pacing slot
(the guid's next call is spaced from its answer, so uploads and polls never go out back to
back), no place in the send windows and no decay of the penalty; a rate limit the gateway
answered to one slows the guid as any does. The guid's send windows count its claims, as
the database counts them (``pacer_count_send_windows``), sent or not; so a deferral Pacer
knows of before the claim claims nothing: the item waits in the window, the guid for the
deferral's time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pacer_common.db.errors import TransientError
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass
from pacer_common.domain.requests import Lane
from pacer_sender.core import AfterCall, Executed
from pacer_sender.crew import Crew
from pacer_sender.domain.pacing import GuidPacer, Limits
from pacer_sender.domain.queue import GuidWindow
from pacer_sender.domain.vetting import unsendable
from pacer_sender.ports import UnstorableItem
from pacer_sender.wakeup import WakeUp

log = logging.getLogger(__name__)


class ItemRunner:
    def __init__(self, guid: str, crew: Crew, window: GuidWindow, pacer: GuidPacer,
                 stopping: Callable[[], bool], wake: WakeUp) -> None:
        self.guid = guid
        self.crew = crew
        self.window = window
        self.pacer = pacer
        self.stopping = stopping  # the guid's partition went: items are no longer put back
        # Rung when the guid's window gains work: a batch item claimed ahead of its gap's end
        # gives its turn up if that work is online (``_gap``).
        self.wake = wake
        self.executing: ItemCommand | None = None
        self.errors: dict[str, int] = {}  # item id → internal errors so far

    async def run(self, lane: Lane, cmd: ItemCommand, limits: Limits, go_at: float | None = None) -> float:
        """Execute one item; returns how long the worker should pause afterwards. ``go_at``
        (the crew's clock): the item was picked ahead of the end of the guid's pacing gap, and
        its gateway call waits for it once the item is claimed. Any item's call waits for a
        short quiet its guid keeps, or gives its turn up to a longer one (``_gap``)."""
        self.executing = cmd
        allowed_at = self.crew.clock() if go_at is None else go_at

        async def before_call(quiet_s: float | None = None) -> bool:
            if quiet_s:  # a quiet on the guid's lease row at the claim: another caller's, say
                self.pacer.hush(self.crew.clock() + quiet_s)
            # The item's turn: the gap's end it was claimed ahead of, else now, once claimed.
            turn = go_at if go_at is not None else self.crew.clock()
            if not await self._gap(lane, limits, turn, go_at is not None):
                return False  # an online item, or the guid's quiet, takes this turn
            self.crew.hooks.on_send_delay(lane, max(0.0, self.crew.clock() - allowed_at))
            return True

        try:
            reason = unsendable(cmd)
            if reason is not None:
                raise UnstorableItem(reason)
            # The guid sends nothing sooner than its least interval after this send's answer,
            # and its next item is claimed the lead before that: until then the confirmation
            # may wait to go with other guids' steps.
            spare = limits.min_interval_s - self.crew.ahead.lead_s
            result = await self.crew.executor.execute(cmd, before_call, spare)
            if result.claim_s is not None:
                self.crew.ahead.observe(result.claim_s)
        except AfterCall as exc:
            # The gateway answered; recording its outcome failed. The call paces the guid all
            # the same (its next item must not go out at once); the item is as the cause left it.
            self._pace(lane, cmd, limits, exc.called)
            return await self._not_executed(cmd, exc.cause)
        except Exception as exc:
            return await self._not_executed(cmd, exc)
        finally:
            self.executing = None
            self.crew.progress.set()
        return self._settled(lane, cmd, limits, result)

    async def _not_executed(self, cmd: ItemCommand, exc: Exception) -> float:
        """An item whose execution raised ``exc``: put back, failed or retried (module docstring)."""
        if isinstance(exc, TransientError):
            # The database stayed away past the retry deadline. Every step is guarded, so
            # running the item again is safe: put it back, pause, go on.
            log.error("item %s not executed: database unavailable; retrying it", cmd.item_id, exc_info=exc)
            return self._put_back(cmd, self.crew.config.lease_retry_s)
        if isinstance(exc, UnstorableItem):
            await self._fail(cmd, "bad_params", f"cannot be sent as it stands: {exc}")
            return 0.0
        return await self._internal_error(cmd, exc)

    async def _gap(self, lane: Lane, limits: Limits, go_at: float, ahead: bool = True) -> bool:
        """Wait until the item's call may go: ``go_at`` by the crew's clock however early a
        timer fires (the end of the guid's pacing gap, for an item claimed ``ahead`` of it),
        or the end of a quiet the guid keeps, if that comes later, by at most
        ``quiet_wait_s``. Any item gives its turn up (False) to a longer quiet a gateway asked
        of the guid, learned meanwhile (at a renewal, or at the item's claim): it is picked
        again once the quiet is over. A batch item that waits (claimed ahead, or for a short
        quiet) gives its turn up to an online item of the guid that arrives meanwhile and may
        go by then: without it that online item, an auto-reply say, would wait for this send
        and one more gap."""
        while (wait := self._go(go_at) - self.crew.clock()) > 0:
            if self._yields(lane, limits, go_at, ahead):
                return False
            self.wake.clear()
            await self.wake.sleep(wait)
        return not self._yields(lane, limits, go_at, ahead)

    def _go(self, go_at: float) -> float:
        """When the call of an item whose turn is ``go_at`` may go: at the end of the guid's
        quiet, if that is later."""
        quiet = self.pacer.quiet_until
        return go_at if quiet is None else max(go_at, quiet)

    def _yields(self, lane: Lane, limits: Limits, go_at: float, ahead: bool) -> bool:
        """The turn of an item whose turn is ``go_at`` goes to someone else: the guid's long
        quiet, or an online item first (a batch item that waits for its turn)."""
        go = self._go(go_at)
        return (go > go_at + self.crew.config.quiet_wait_s
                or (lane == "batch" and (ahead or go > go_at) and self._online_first(limits, go)))

    def _online_first(self, limits: Limits, go_at: float) -> bool:
        """The guid's window holds an online item that may go no later than ``go_at``."""
        online = self.window.lanes.lanes["online"]
        return bool(online) and not self.stopping() and self.pacer.ready_at(
            "online", limits, self.crew.clock(), time.time(), online.best_priority()) <= go_at

    def _settled(self, lane: Lane, cmd: ItemCommand, limits: Limits, result: Executed) -> float:
        if result.outcome == "guid_lost":
            self.crew.leases.lost(self.guid)
            return self._put_back(cmd, 0.0)
        if result.outcome == "deferred" and not result.claimed:
            # Deferred before its claim (the tenant's breaker open, its quota used up): the
            # guid waits with the item in its window; a doorbell asks again sooner.
            self.crew.hooks.on_executed(cmd, result)
            after = result.error.retry_after if result.error is not None else None
            return self._put_back(cmd, after.total_seconds() if after else self.crew.config.lease_retry_s)
        if result.outcome == "media_ready":
            # An upload or status poll made now found the item's media ready: that call was
            # the guid's turn. The item keeps its place and is sent at the guid's next turn,
            # one gap after that call's answer.
            self._pace(lane, cmd, limits, result)
            self.crew.hooks.on_executed(cmd, result)
            return self._put_back(cmd, 0.0)
        self._pace(lane, cmd, limits, result)
        self.window.finished(cmd)
        self.errors.pop(cmd.item_id, None)
        self.crew.hooks.on_executed(cmd, result)
        return 0.0

    def _pace(self, lane: Lane, cmd: ItemCommand, limits: Limits, result: Executed) -> None:
        """Record what the item's execution means for the guid's pace (module docstring)."""
        now, rng, wall = self.crew.clock(), self.crew.rng, time.time()
        # Spaced from the gateway's answer, not from the end of the confirmation (a slow write
        # must not stretch the interval) nor from the call's start (the gateway may see the
        # send any time until it answers: two sends would come closer than the interval).
        at = now if result.answered_mono is None else min(result.answered_mono, now)
        was, quiet = self.pacer.multiplier, self.pacer.quiet_until
        if result.called_gateway:
            answer = _answer(result)
            if answer == "rate_limited":
                self.pacer.slowed(lane, limits, at, rng, _quiet_s(result))
                self.pacer.counted(lane, limits, wall)  # its claim, counted by the database
            elif answer == "in_doubt":
                self.pacer.unanswered(lane, limits, at, wall, rng, self.crew.hooks.job_interval(cmd.job_id))
            else:
                self.pacer.sent(lane, limits, at, wall, rng, self.crew.hooks.job_interval(cmd.job_id))
        else:
            if result.claimed:  # claimed, not sent (gave its turn up, too late, deferred by Pacer)
                self.pacer.counted(lane, limits, wall)
            if result.error is not None and result.error.gateway_rate_limit:  # a media upload or poll
                self.pacer.slowed(lane, limits, at, rng, _quiet_s(result))
            elif result.stepped:  # a media upload or poll: a slot, not a send
                self.pacer.stepped(lane, limits, at, rng)
        if self.pacer.multiplier != was or self.pacer.quiet_until != quiet:  # a quiet only ever grows
            self.crew.leases.penalized(self.guid, self.pacer.multiplier, self.pacer.multiplier > was
                                       or self.pacer.quiet_until != quiet, self.pacer.quiet_until)

    async def _internal_error(self, cmd: ItemCommand, exc: Exception) -> float:
        log.error("internal error executing item %s", cmd.item_id, exc_info=exc)
        self.crew.hooks.on_internal_error()
        n = self.errors[cmd.item_id] = self.errors.get(cmd.item_id, 0) + 1
        cfg = self.crew.config
        if n < cfg.error_attempts:
            return self._put_back(cmd, min(60.0, cfg.error_backoff_s * 2 ** (n - 1)))
        await self._fail(cmd, "bad_params", f"internal error: {type(exc).__name__}: {exc}")
        return 0.0

    def _put_back(self, cmd: ItemCommand, pause: float) -> float:
        if not self.stopping():
            self.window.put(cmd, time.time())
        else:
            self.window.finished(cmd)
        return pause

    async def _fail(self, cmd: ItemCommand, error_class: str, reason: str) -> None:
        """Fail a pending item with ``reason``; an item no longer pending is left alone."""
        self.errors.pop(cmd.item_id, None)
        self.window.finished(cmd)
        try:
            moved = await self.crew.queue.fail_unsent(cmd, error_class, reason)
        except TransientError:
            log.exception("item %s not failed: database unavailable; it stays pending", cmd.item_id)
            self.window.ring()  # read again from Postgres later
            return
        except UnstorableItem:
            moved = False  # not even its id can be stored: a bogus command; the row, if any, is swept
        if moved:
            log.warning("item %s failed (%s): %s", cmd.item_id, error_class, reason)
            self.crew.hooks.on_executed(cmd, Executed("failed", False))
        else:
            log.warning("item %s not failed (no longer pending; a submitted one is verified): %s",
                        cmd.item_id, reason)


def _quiet_s(result: Executed) -> float | None:
    """The quiet the gateway asked of the guid with its rate limit (``Retry-After``), seconds."""
    wait = None if result.error is None else result.error.retry_after
    return None if wait is None else wait.total_seconds()


def _answer(result: Executed) -> str:
    """The gateway's answer as it paces the guid: a fenced send (its outcome not recorded,
    another sender holding the item now) by its error's class, as a rate limit or a send
    left in doubt is one whoever records it."""
    if result.outcome == "fenced" and result.error is not None:
        return {FailureClass.RATE_LIMITED: "rate_limited", FailureClass.IN_DOUBT: "in_doubt"}.get(
            result.error.failure_class, "fenced")
    return result.outcome

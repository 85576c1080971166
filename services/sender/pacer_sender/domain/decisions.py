"""What a gateway answer means for the item: the transition to make and why."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from pacer_common.domain.events import EventType
from pacer_common.domain.failures import RETRY_CLASSES, FailureClass, RetryPolicy, SendError
from pacer_common.domain.guid_health import DEFAULT_STATE_CODES, GuidState, state_for_code
from pacer_common.domain.status import ItemStatus


@dataclass(frozen=True)
class Decision:
    to: ItemStatus
    event: EventType
    error_class: str | None = None
    error: str | None = None
    next_attempt_at: datetime | None = None
    release_ledger: bool = False  # the send provably did not happen: free the idempotency key
    guid_state: GuidState | None = None  # the guid's lifecycle state the answer tells (holds its queue)
    refund: bool = False  # a deferral, not an attempt: give back the attempt and the budget unit


def after_failure(err: SendError, attempts: int, policy: RetryPolicy, now: datetime,
                  rng: random.Random, states: Mapping[int, GuidState] = DEFAULT_STATE_CODES) -> Decision:
    """Retry what may be retried (bounded), defer what was rate-limited or never reached the
    gateway by Pacer's own doing (unbounded, no attempt), verify what may have been delivered,
    fail the rest."""
    cls = err.failure_class
    if err.deferred:
        # Pacer's own deferral, made before any request (the tenant's breaker open, its quota
        # used up, the send deadline passed before a byte was written: an overloaded sender, a
        # connection pool queueing past it): the gateway was not called and said nothing of
        # the item. Like a rate limit, it uses up neither an attempt nor a unit of the job's
        # budget, and the item waits its turn again as often as it takes: its expire_at ends
        # the wait (the sender's check before the claim, pacer_begin_send's, the reconciler's
        # expire_due sweep of waiting_retry items).
        return Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", cls.value, str(err),
                        next_attempt_at=now + _deferral(err, attempts, policy, rng), release_ledger=True, refund=True)
    if cls is FailureClass.IN_DOUBT:
        # The gateway may have delivered: never resend blindly; the reconciler verifies.
        return Decision(ItemStatus.RECOVERY_PENDING, "ItemInDoubt", cls.value, str(err))
    if cls is FailureClass.NEEDS_HUMAN:
        # The account is offline, kicked or unauthorized: not the item's fault. The guid takes
        # that lifecycle state (its queue is held) and the item waits; it goes again once the
        # guid is online (a device.status callback, or an operator's resume).
        return Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", cls.value, str(err),
                        next_attempt_at=now, release_ledger=True, guid_state=state_for_code(err.code, states))
    if cls is FailureClass.RATE_LIMITED:
        # Not the item's fault and not sent: the guid slows down (its pacer) and the item
        # waits its turn again, without using up an attempt or a unit of its job's budget,
        # as often as it takes. Only its expire_at ends the wait.
        return Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", cls.value, str(err),
                        next_attempt_at=now + _deferral(err, attempts, policy, rng), release_ledger=True, refund=True)
    if cls in RETRY_CLASSES:
        wait = policy.next_delay(attempts, rng)
        if err.retry_after is not None and wait is not None:
            wait = max(wait, err.retry_after)
        if wait is not None:
            return Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", cls.value, str(err),
                            next_attempt_at=now + wait, release_ledger=True)
        return Decision(ItemStatus.FAILED, "ItemFailed", cls.value,
                        f"gave up after {attempts} attempts: {err}", release_ledger=True)
    return Decision(ItemStatus.FAILED, "ItemFailed", cls.value, str(err), release_ledger=True)


def _deferral(err: SendError, attempts: int, policy: RetryPolicy, rng: random.Random) -> timedelta:
    """How long a deferred item waits: the backoff after its ``attempts``-th try (which a
    deferral does not raise), and at least the error's retry-after."""
    delay = policy.backoff(attempts, rng)
    return delay if err.retry_after is None else max(delay, err.retry_after)

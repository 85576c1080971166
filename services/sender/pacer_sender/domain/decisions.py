"""What a gateway answer means for the item: the transition to make and why."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from pacer_common.domain.events import EventType
from pacer_common.domain.failures import RETRY_CLASSES, FailureClass, RetryPolicy, SendError
from pacer_common.domain.status import ItemStatus


@dataclass(frozen=True)
class Decision:
    to: ItemStatus
    event: EventType
    error_class: str | None = None
    error: str | None = None
    next_attempt_at: datetime | None = None
    release_ledger: bool = False  # the send provably did not happen: free the idempotency key
    hold_guid: str | None = None  # pause the item's guid with this reason (needs a person)
    refund: bool = False  # a deferral, not an attempt: give back the attempt and the budget unit


def after_failure(err: SendError, attempts: int, policy: RetryPolicy, now: datetime,
                  rng: random.Random) -> Decision:
    """Retry what may be retried (bounded), defer what was rate-limited (unbounded, no attempt),
    verify what may have been delivered, fail the rest."""
    cls = err.failure_class
    if cls is FailureClass.IN_DOUBT:
        # The gateway may have delivered: never resend blindly; the reconciler verifies.
        return Decision(ItemStatus.RECOVERY_PENDING, "ItemInDoubt", cls.value, str(err))
    if cls is FailureClass.NEEDS_HUMAN:
        # The account is offline, kicked or unauthorized: not the item's fault. Pause the
        # guid and keep the item; it goes again once an operator resumes the guid.
        return Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", cls.value, str(err),
                        next_attempt_at=now, release_ledger=True, hold_guid=f"needs_human: {err}")
    if cls is FailureClass.RATE_LIMITED:
        # Not the item's fault and not sent: the guid slows down (its pacer) and the item
        # waits its turn again, without using up an attempt or a unit of its job's budget,
        # as often as it takes. Only its expire_at ends the wait.
        delay = policy.backoff(attempts, rng)
        if err.retry_after is not None:
            delay = max(delay, err.retry_after)
        return Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", cls.value, str(err),
                        next_attempt_at=now + delay, release_ledger=True, refund=True)
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



"""Failure classes and retry decisions. Whether to retry is a property of the error."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum


class FailureClass(StrEnum):
    RETRYABLE = "retryable"  # busy, transient: bounded backoff on the same guid queue
    RATE_LIMITED = "rate_limited"  # slow the guid down, then retry; not the item's fault
    NEEDS_HUMAN = "needs_human"  # offline, kicked, unauthorized: a person must act
    BAD_PARAMS = "bad_params"  # the request itself is wrong: never retried blindly
    EXPIRED = "expired"  # past expire_at: discarded, counted
    IN_DOUBT = "in_doubt"  # the gateway may have delivered: verify, never resend blindly
    NOT_SENT = "not_sent"  # the request provably never reached the gateway


# Default code table (configuration overrides it: PACER_FAILURE_CODES).
DEFAULT_CODE_TABLE: dict[int, FailureClass] = {
    -1: FailureClass.RETRYABLE,
    1001: FailureClass.NEEDS_HUMAN,  # device offline
    1002: FailureClass.NEEDS_HUMAN,  # kicked / logged out
    1003: FailureClass.NEEDS_HUMAN,  # unauthorized
    40001: FailureClass.BAD_PARAMS,
    45009: FailureClass.RATE_LIMITED,
}


@dataclass(frozen=True)
class SendError(Exception):
    """A send that did not succeed, with what the caller should do about it. ``deferred``:
    Pacer's own deferral, made before any request (the tenant's breaker open, its daily quota
    used up, the tenant not known here yet): the gateway was not called and said nothing, so
    the guid is neither slowed nor paced by it, whatever the class."""

    failure_class: FailureClass
    code: int | None
    message: str
    retry_after: timedelta | None = None
    deferred: bool = False

    def __str__(self) -> str:
        return f"{self.failure_class.value}: code={self.code} {self.message}"

    @property
    def gateway_rate_limit(self) -> bool:
        """The gateway itself rate-limited the call (HTTP 429, or a code of that class): the
        guid slows down. Pacer's own deferrals (``deferred``) never do."""
        return self.failure_class is FailureClass.RATE_LIMITED and not self.deferred


# The longest quiet a gateway's ``Retry-After`` may ask of a guid. A longer one (or an
# HTTP-date further ahead: a gateway whose clock is off) is cut to this, so a wrong header
# cannot hold a guid for days; a gateway still limiting it then says so again.
RETRY_AFTER_MAX = timedelta(hours=1)


@dataclass(frozen=True)
class Hushed:
    """No answer: the gateway asked for quiet on the guid (a rate limit's ``Retry-After``),
    ``seconds`` more of it to come. Not proof of anything; the guid is not to be called until
    then, by any caller."""

    seconds: float


def code_label(code: int | None, table: Mapping[int, FailureClass]) -> str:
    """A gateway code as a metric label from a bounded set: a code of the table as itself,
    any other ``"other"``, no code at all (HTTP status, transport) ``"none"``."""
    if code is None:
        return "none"
    return str(code) if code in table else "other"


def classify(code: int, table: Mapping[int, FailureClass]) -> FailureClass:
    """Map a gateway response code to its class; unknown codes are retryable (bounded)."""
    return table.get(code, FailureClass.RETRYABLE)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base: timedelta = timedelta(seconds=1)
    cap: timedelta = timedelta(minutes=5)

    def next_delay(self, attempts: int, rng: random.Random) -> timedelta | None:
        """Full-jitter exponential backoff; ``None`` once attempts are used up."""
        if attempts >= self.max_attempts:
            return None
        return self.backoff(attempts, rng)

    def backoff(self, n: int, rng: random.Random) -> timedelta:
        """The jittered delay after the ``n``-th try (from 1), growing to ``cap``; never ends."""
        ceiling = min(self.cap.total_seconds(), self.base.total_seconds() * 2 ** min(max(n - 1, 0), 64))
        return timedelta(seconds=rng.uniform(ceiling / 2, ceiling))


# Retried within the item's attempts. RATE_LIMITED is not here: a rate-limited answer is a
# deferral (the guid slows down, the item waits), never an attempt.
RETRY_CLASSES = frozenset({FailureClass.RETRYABLE, FailureClass.NOT_SENT})

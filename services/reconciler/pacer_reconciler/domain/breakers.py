"""Circuit breakers per job and per guid, folded from the event log.

A bad template or expired credentials fail every send the same way. A breaker trips when a
job's (or a guid's) recent outcomes show ``consecutive`` failures in a row, or a failure
ratio of at least ``ratio`` over the last ``window`` outcomes (once ``min_samples`` are in),
and the reconciler pauses that job or guid with the reason. Only outcomes that say
something about the job or the account count: confirmations, final failures, and retries
for errors that are the gateway's or the account's (not rate limits, not our own deadline).
A send put in doubt by anything but the gateway's answer counts neither way: the lease sweep
(its sender died or stalled after submit: Pacer's own fault), ``pacer after-restore``, an
admin's forced release of its lease, a retry or a resolution of an item from before a restore.
Thousands of one job put in doubt together (a killed sender's, a restore's) must not trip its
breaker, nor reset the run of failures the job was having. An in-doubt send is never a
success: one that names no failure class (written before its event said where it came from)
counts neither way either.

The state lives in memory, bounded: the ``capacity`` breakers fed an outcome last are kept
(in the order of their last outcome, the oldest forgotten first, as ``JobLabels`` keeps its
jobs), so the breakers of finished jobs and quiet guids do not pile up for ever. A breaker
with no failure in its window is not kept at all. Forgetting a breaker, like a restart, only
makes it trip later, never wrongly.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pacer_common.domain.events import ItemEvent, ItemInDoubt, error_class_of
from pacer_common.domain.status import ItemStatus

Scope = Literal["job", "guid"]
# error classes that count as a failure of the job / account
FAILING_CLASSES = frozenset({"retryable", "needs_human", "bad_params", "in_doubt"})
# The ``source`` of an ItemInDoubt that no answer of the gateway put in doubt: the lease sweep's
# (adapters/postgres.py, submit_expired), and those of pacer_after_restore, pacer_force_release_item,
# pacer_compensate and pacer_resolve_unverified. Each carries ``error_class: in_doubt`` for
# consumers, and says nothing about the job or the account.
LEASE_EXPIRED = "lease_expired"
NOT_THE_GATEWAYS = frozenset({LEASE_EXPIRED, "after_restore", "forced_release", "compensated", "resolved"})


@dataclass(frozen=True)
class BreakerPolicy:
    consecutive: int = 20
    window: int = 100
    ratio: float = 0.5
    min_samples: int = 40

    def __post_init__(self) -> None:
        if self.consecutive < 1 or self.window < 1 or not 0 < self.ratio <= 1 or self.min_samples < 1:
            raise ValueError("breaker: consecutive, window, min_samples ≥ 1 and 0 < ratio ≤ 1")


@dataclass(frozen=True)
class Trip:
    scope: Scope
    key: str
    reason: str


@dataclass
class _Breaker:
    window: deque[bool]
    run: int = 0  # consecutive failures
    failures: int = 0  # failures inside the window
    last_error: str | None = field(default=None)

    def record(self, failed: bool, error_class: str | None) -> None:
        if len(self.window) == self.window.maxlen and self.window[0]:
            self.failures -= 1
        self.window.append(failed)
        self.failures += failed
        self.run = self.run + 1 if failed else 0
        if failed:
            self.last_error = error_class


def outcome_of(ev: ItemEvent) -> bool | None:
    """True: a failure that counts; False: a success; None: says nothing about job or account."""
    if ev.to_status is ItemStatus.CONFIRMED:
        return False
    if ev.to_status in _FAILED_OR_RETRYING:
        failed = error_class_of(ev.payload) in FAILING_CLASSES
        if isinstance(ev.payload, ItemInDoubt):
            if ev.payload.source in NOT_THE_GATEWAYS:
                return None  # a lease run out, a restore, an operator: neither a failure nor a success
            return True if failed else None  # in doubt is no success, whatever an old event left out
        return failed
    return None  # claimed, submitted, …: most of the log, decided without reading the payload


_FAILED_OR_RETRYING = frozenset({ItemStatus.FAILED, ItemStatus.WAITING_RETRY, ItemStatus.RECOVERY_PENDING})


class Breakers:
    def __init__(self, policy: BreakerPolicy, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("breaker: capacity ≥ 1")
        self.policy = policy
        self.capacity = capacity
        # In the order of their last outcome: the first is the one fed longest ago.
        self._state: dict[tuple[Scope, str], _Breaker] = {}

    def observe(self, events: Iterable[ItemEvent]) -> list[Trip]:
        """Fold outcomes in log order; each breaker that trips is reported once and reset."""
        trips: list[Trip] = []
        for ev in events:
            failed = outcome_of(ev)
            if failed is None:
                continue
            keys: tuple[tuple[Scope, str], ...] = (("job", ev.job_id), ("guid", ev.guid))
            for scope, key in keys:
                b = self._state.pop((scope, key), None)  # put back last, if kept: the one fed most recently
                if b is None:
                    if not failed:
                        continue  # nothing to remember about a key that only succeeds
                    b = _Breaker(deque(maxlen=self.policy.window))
                b.record(failed, error_class_of(ev.payload))
                reason = self._verdict(b)
                if reason is not None:
                    trips.append(Trip(scope, key, reason))  # and it starts afresh
                elif b.failures:
                    self._state[(scope, key)] = b
                    while len(self._state) > self.capacity:
                        del self._state[next(iter(self._state))]
        return trips

    def _verdict(self, b: _Breaker) -> str | None:
        p = self.policy
        if b.run >= p.consecutive:
            return f"breaker: {b.run} consecutive failures (last: {b.last_error})"
        n = len(b.window)
        if n >= p.min_samples and b.failures / n >= p.ratio:
            return f"breaker: {b.failures} of the last {n} outcomes failed (last: {b.last_error}), ratio ≥ {p.ratio:g}"
        return None

    @property
    def tracked(self) -> int:
        return len(self._state)

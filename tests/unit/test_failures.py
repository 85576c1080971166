"""Failure classification and bounded, jittered retry backoff."""

from __future__ import annotations

import random
from datetime import timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.failures import (
    DEFAULT_CODE_TABLE,
    FailureClass,
    RetryPolicy,
    SendError,
    classify,
)

F = FailureClass


@pytest.mark.parametrize("code", [987654, -42, 2, 50000])
def test_unknown_code_is_retryable_with_the_default_table(code: int) -> None:
    assert code not in DEFAULT_CODE_TABLE
    assert classify(code, DEFAULT_CODE_TABLE) is F.RETRYABLE


def test_unknown_code_is_retryable_with_an_empty_table() -> None:
    assert classify(45009, {}) is F.RETRYABLE


def test_every_entry_of_the_default_table_is_honoured() -> None:
    for code, cls in DEFAULT_CODE_TABLE.items():
        assert classify(code, DEFAULT_CODE_TABLE) is cls


def test_default_table_separates_rate_limits_people_problems_and_bad_requests() -> None:
    classes = set(DEFAULT_CODE_TABLE.values())
    assert {F.RATE_LIMITED, F.NEEDS_HUMAN, F.BAD_PARAMS} <= classes
    # A gateway code can never claim "maybe delivered" or "never sent": those come from transport.
    assert F.IN_DOUBT not in classes and F.NOT_SENT not in classes


def test_custom_table_overrides_and_replaces_the_default() -> None:
    custom = {777: F.NEEDS_HUMAN, 45009: F.BAD_PARAMS}
    assert classify(777, custom) is F.NEEDS_HUMAN
    assert classify(45009, custom) is F.BAD_PARAMS
    # Codes only the default table knows fall back to retryable: the tables are not merged.
    only_default = next(c for c, cls in DEFAULT_CODE_TABLE.items() if cls is F.NEEDS_HUMAN)
    assert classify(only_default, custom) is F.RETRYABLE


def test_send_error_is_an_exception_whose_text_names_class_and_code() -> None:
    err = SendError(F.RATE_LIMITED, 45009, "slow down", retry_after=timedelta(seconds=3))
    assert isinstance(err, Exception)
    text = str(err)
    assert "rate_limited" in text and "45009" in text and "slow down" in text
    with pytest.raises(SendError) as info:
        raise err
    assert info.value.retry_after == timedelta(seconds=3)


# -- RetryPolicy -------------------------------------------------------------------------

def ceiling(policy: RetryPolicy, attempts: int) -> float:
    """Exponential ceiling in seconds: base, 2·base, 4·base … for attempts 1, 2, 3 …, capped."""
    s = policy.base.total_seconds()
    for _ in range(max(attempts - 1, 0)):
        s *= 2
    return min(s, policy.cap.total_seconds())


@pytest.mark.parametrize("attempts", [5, 6, 100])
def test_no_delay_once_attempts_reach_max(attempts: int) -> None:
    assert RetryPolicy(max_attempts=5).next_delay(attempts, random.Random(1)) is None


@pytest.mark.parametrize("attempts", [0, 1, 4])
def test_a_delay_while_attempts_remain(attempts: int) -> None:
    assert RetryPolicy(max_attempts=5).next_delay(attempts, random.Random(1)) is not None


def test_zero_max_attempts_never_retries() -> None:
    assert RetryPolicy(max_attempts=0).next_delay(0, random.Random(1)) is None


def test_first_retry_waits_between_half_base_and_base() -> None:
    policy = RetryPolicy(max_attempts=10, base=timedelta(seconds=2))
    rng = random.Random(7)
    for _ in range(500):
        d = policy.next_delay(1, rng)
        assert d is not None
        assert timedelta(seconds=1) <= d <= timedelta(seconds=2)


@settings(database=None, max_examples=300, deadline=None)
@given(
    attempts=st.integers(min_value=0, max_value=60),
    base_ms=st.integers(min_value=1, max_value=10_000),
    cap_s=st.integers(min_value=1, max_value=3600),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_delay_lies_in_half_ceiling_to_ceiling_and_never_exceeds_cap(
    attempts: int, base_ms: int, cap_s: int, seed: int
) -> None:
    policy = RetryPolicy(max_attempts=61, base=timedelta(milliseconds=base_ms), cap=timedelta(seconds=cap_s))
    d = policy.next_delay(attempts, random.Random(seed))
    assert d is not None
    c = ceiling(policy, attempts)
    eps = 1e-6
    assert c / 2 - eps <= d.total_seconds() <= c + eps
    assert d <= policy.cap + timedelta(microseconds=1)


def test_late_attempts_are_capped() -> None:
    policy = RetryPolicy(max_attempts=100, base=timedelta(seconds=1), cap=timedelta(seconds=10))
    rng = random.Random(3)
    delays = [policy.next_delay(50, rng) for _ in range(200)]
    assert all(d is not None and timedelta(seconds=5) <= d <= timedelta(seconds=10) for d in delays)


@settings(database=None, max_examples=200, deadline=None)
@given(attempts=st.integers(min_value=1, max_value=20), seed_a=st.integers(0, 10**9), seed_b=st.integers(0, 10**9))
def test_below_the_cap_the_next_attempt_never_waits_less(attempts: int, seed_a: int, seed_b: int) -> None:
    # Ceilings double, and each delay lies in [ceiling/2, ceiling]: the ranges touch but never
    # overlap, so any draw for attempt n+1 is at least any draw for attempt n.
    policy = RetryPolicy(max_attempts=100, base=timedelta(seconds=1), cap=timedelta(days=365))
    earlier = policy.next_delay(attempts, random.Random(seed_a))
    later = policy.next_delay(attempts + 1, random.Random(seed_b))
    assert earlier is not None and later is not None
    assert later >= earlier


def test_delay_grows_exponentially_before_the_cap() -> None:
    policy = RetryPolicy(max_attempts=100, base=timedelta(seconds=1), cap=timedelta(hours=1))
    rng = random.Random(11)
    means = []
    for attempts in (1, 2, 3, 4, 5):
        samples = [policy.next_delay(attempts, rng) for _ in range(300)]
        means.append(sum(d.total_seconds() for d in samples if d) / len(samples))
    for a, b in pairwise(means):
        assert 1.7 < b / a < 2.3


def test_delays_are_jittered_not_fixed() -> None:
    policy = RetryPolicy(max_attempts=10, base=timedelta(seconds=4))
    rng = random.Random(5)
    samples = {policy.next_delay(3, rng) for _ in range(100)}
    assert len(samples) > 90
    secs = sorted(d.total_seconds() for d in samples if d)
    assert secs[-1] - secs[0] > 0.5 * (ceiling(policy, 3) / 2)


def test_same_seed_gives_same_delay() -> None:
    policy = RetryPolicy()
    assert policy.next_delay(2, random.Random(42)) == policy.next_delay(2, random.Random(42))

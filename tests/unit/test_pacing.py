"""Per-guid pacing: a minimum interval plus a random gap; slowed on rate limits, decaying back."""

from __future__ import annotations

import random
from itertools import pairwise
import statistics

import pytest

from pacer_sender.domain.pacing import GuidPace, PacingPolicy

POLICY = PacingPolicy(min_interval_s=2.0, jitter_s=1.0, rate_limited_penalty=2.0, penalty_decay=0.5)


def test_gap_is_at_least_the_minimum_and_below_minimum_plus_jitter() -> None:
    rng = random.Random(1)
    for _ in range(2000):
        g = POLICY.gap(rng)
        assert 2.0 <= g < 3.0


def test_gap_is_jittered_not_a_fixed_sleep() -> None:
    rng = random.Random(2)
    gaps = [POLICY.gap(rng) for _ in range(500)]
    assert len(set(gaps)) > 450
    assert max(gaps) - min(gaps) > 0.8  # spread over most of the jitter window
    assert statistics.pstdev(gaps) > 0.2  # uniform over 1s has stdev ≈ 0.29


def test_consecutive_sends_do_not_fall_into_a_rhythm() -> None:
    rng = random.Random(3)
    pace = GuidPace()
    now, gaps = 0.0, []
    for _ in range(200):
        pace.sent(now, POLICY, rng)
        gaps.append(pace.next_at - now)
        now = pace.next_at
    assert len({round(g, 6) for g in gaps}) > 190


def test_zero_jitter_gives_exactly_the_minimum() -> None:
    policy = PacingPolicy(min_interval_s=1.5, jitter_s=0.0)
    assert {policy.gap(random.Random(s)) for s in range(20)} == {1.5}


def test_multiplier_scales_the_interval_not_the_jitter() -> None:
    rng = random.Random(4)
    for _ in range(500):
        g = POLICY.gap(rng, multiplier=3.0)
        assert 6.0 <= g < 7.0


def test_fresh_guid_may_send_immediately() -> None:
    assert GuidPace().wait(now=123.0) == 0.0


def test_after_a_send_the_guid_waits_one_gap() -> None:
    pace = GuidPace()
    pace.sent(100.0, POLICY, random.Random(5))
    assert 2.0 <= pace.wait(100.0) < 3.0
    assert pace.wait(101.0) == pytest.approx(pace.wait(100.0) - 1.0)


def test_wait_is_zero_once_due_and_never_negative() -> None:
    pace = GuidPace()
    pace.sent(100.0, POLICY, random.Random(6))
    assert pace.wait(pace.next_at) == 0.0
    assert pace.wait(pace.next_at + 50.0) == 0.0


def test_rate_limit_multiplies_the_interval() -> None:
    pace = GuidPace()
    pace.slowed(0.0, POLICY, random.Random(7))
    assert pace.multiplier == pytest.approx(2.0)
    assert 4.0 <= pace.wait(0.0) < 5.0
    pace.slowed(0.0, POLICY, random.Random(7))
    assert pace.multiplier == pytest.approx(4.0)
    assert 8.0 <= pace.wait(0.0) < 9.0


def test_repeated_rate_limits_never_pause_a_guid_indefinitely() -> None:
    pace = GuidPace()
    rng = random.Random(8)
    for _ in range(200):
        pace.slowed(0.0, POLICY, rng)
    assert pace.multiplier < 1000
    assert pace.wait(0.0) < 2.0 * 1000


def test_clean_sends_decay_the_multiplier_back_toward_one() -> None:
    pace = GuidPace()
    rng = random.Random(9)
    for _ in range(3):
        pace.slowed(0.0, POLICY, rng)
    seen = [pace.multiplier]
    for _ in range(10):
        pace.sent(0.0, POLICY, rng)
        seen.append(pace.multiplier)
    assert seen[1] < seen[0]
    assert all(b <= a for a, b in pairwise(seen))
    assert seen[-1] == 1.0


def test_decay_never_goes_below_one() -> None:
    policy = PacingPolicy(min_interval_s=1.0, jitter_s=0.0, penalty_decay=0.1)
    pace = GuidPace()
    rng = random.Random(10)
    for _ in range(5):
        pace.sent(0.0, policy, rng)
        assert pace.multiplier == 1.0
        assert pace.wait(0.0) == 1.0  # never faster than the minimum interval


def test_one_clean_send_does_not_erase_a_rate_limit_at_once() -> None:
    policy = PacingPolicy(min_interval_s=1.0, jitter_s=0.0, rate_limited_penalty=4.0, penalty_decay=0.9)
    pace = GuidPace()
    pace.slowed(0.0, policy, random.Random(11))
    pace.sent(0.0, policy, random.Random(11))
    assert pace.multiplier > 1.0
    assert pace.wait(0.0) > policy.min_interval_s

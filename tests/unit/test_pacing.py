"""Per-guid pacing: jitter, two limiters in one account, windows, quiet hours, slow-down."""

from __future__ import annotations

import itertools
import random
import statistics
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.requests import lane_of
from pacer_sender.domain.pacing import ClaimAhead, GuidPacer, Limits, quiet_left

RNG = random.Random(7)
TZ = ZoneInfo("Asia/Shanghai")


def wall_at(hour: int, minute: int = 0, second: int = 0) -> float:
    return datetime(2026, 11, 29, hour, minute, second, tzinfo=TZ).timestamp()


@pytest.mark.parametrize("dist", ["uniform", "exponential"])
def test_gap_is_at_least_the_interval_and_the_jitter_varies_within_bounds(dist: str) -> None:
    limits = Limits(min_interval_s=2.0, jitter_s=1.0, jitter_dist=dist, online_reserve=0.0)
    gaps = []
    for _ in range(500):
        p = GuidPacer()
        p.sent("online", limits, 0.0, 0.0, RNG)
        gaps.append(p.ready_at("online", limits, 0.0, 0.0))
    assert min(gaps) >= 2.0
    assert max(gaps) <= 2.0 + 4 * 1.0
    assert statistics.pstdev(gaps) > 0.1, "a fixed sleep is not human pacing"


def test_no_jitter_means_exactly_the_interval() -> None:
    p = GuidPacer()
    limits = Limits(min_interval_s=1.5, jitter_s=0.0)
    p.sent("online", limits, 10.0, 0.0, RNG)
    assert p.ready_at("online", limits, 10.0, 0.0) == 11.5


def test_kinds_map_to_lanes() -> None:
    assert [lane_of(p) for p in (0, 1, 2, 3)] == ["online", "online", "batch", "batch"]


def test_batch_never_takes_the_online_reserve() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.5)
    p = GuidPacer()
    p.sent("batch", limits, 0.0, 0.0, RNG)
    assert p.ready_at("online", limits, 0.0, 0.0) == 1.0  # online may use the whole rate
    assert p.ready_at("batch", limits, 0.0, 0.0) == 2.0  # batch only the rate minus the reserve


def test_urgent_batch_work_is_spaced_at_the_whole_rate_but_keeps_the_batch_share_of_windows() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.5, per_minute=4)  # batch: 2 a minute
    p = GuidPacer()
    p.sent("batch", limits, 0.0, 0.0, RNG, job_interval_s=30.0)  # a campaign with its own slow rate
    assert p.ready_at("batch", limits, 0.0, 0.0, priority=3) == 30.0  # the campaign: reserve and its own rate
    assert p.ready_at("batch", limits, 0.0, 0.0, priority=2) == 1.0  # a ticket: the whole rate, no job's rate
    assert p.ready_at("batch", limits, 0.0, 0.0) == 30.0  # priority not known: the reserve binds
    assert p.ready_at("batch", limits.model_copy(update={"reserve_from_priority": 2}), 0.0, 0.0, priority=2) == 30.0
    p.sent("batch", limits, 1.0, 1.0, RNG)  # the ticket: the batch share of the minute is used up
    assert p.ready_at("batch", limits, 1.0, 1.0, priority=2) == pytest.approx(60.0)
    assert p.ready_at("online", limits, 1.0, 1.0) == 2.0  # online still has the reserved share


def test_online_sends_also_space_the_batch_lane() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.2)
    p = GuidPacer()
    p.sent("online", limits, 5.0, 0.0, RNG)
    assert p.ready_at("batch", limits, 5.0, 0.0) == 6.0


def test_batch_rate_over_time_is_the_account_rate_minus_the_reserve() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.25)
    p, t, sends = GuidPacer(), 0.0, 0
    while t < 600:
        t = max(t, p.ready_at("batch", limits, t, t))
        if t >= 600:
            break
        p.sent("batch", limits, t, t, RNG)
        sends += 1
    assert sends == pytest.approx(600 * 0.75, abs=1)


def test_a_full_minute_window_defers_to_the_next_minute() -> None:
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, per_minute=3, online_reserve=0.0)
    p, wall = GuidPacer(), wall_at(10, 0, 10)
    for _ in range(3):
        assert p.ready_at("online", limits, 0.0, wall) <= 0.0
        p.sent("online", limits, 0.0, wall, RNG)
    assert p.ready_at("online", limits, 0.0, wall) == pytest.approx(50.0)
    assert p.ready_at("online", limits, 50.0, wall + 50) <= 50.0  # a new minute


def test_a_full_day_waits_for_the_guids_midnight_not_utcs() -> None:
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, per_day=3, online_reserve=0.0)
    p, wall = GuidPacer(), wall_at(23, 0)  # 15:00 UTC: the UTC day has nine hours left
    for _ in range(3):
        p.sent("online", limits, 0.0, wall, RNG)
    assert p.ready_at("online", limits, 0.0, wall) == pytest.approx(3600.0)
    assert p.ready_at("online", limits, 3600.0, wall + 3600) <= 3600.0  # 00:00 in Asia/Shanghai


def test_a_day_where_the_clocks_go_back_lasts_25_hours() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, per_day=1, online_reserve=0.0, timezone="Europe/Berlin")
    p, wall = GuidPacer(), datetime(2026, 10, 25, 0, 30, tzinfo=berlin).timestamp()
    p.sent("online", limits, 0.0, wall, RNG)
    assert p.ready_at("online", limits, 0.0, wall) == pytest.approx(24.5 * 3600)


def test_a_new_time_zone_applies_from_the_guids_next_day_as_in_the_database() -> None:
    shanghai = Limits(min_interval_s=0.0, jitter_s=0.0, per_day=3, online_reserve=0.0)
    auckland = shanghai.model_copy(update={"timezone": "Pacific/Auckland"})
    p, wall = GuidPacer(), wall_at(23, 0)  # 04:00 on the next day in Auckland
    for _ in range(2):
        p.sent("online", shanghai, 0.0, wall, RNG)
    p.sent("online", auckland, 0.0, wall, RNG)  # the zone changed: Shanghai's day under way goes on
    assert p.ready_at("online", auckland, 0.0, wall) == pytest.approx(3600.0)
    p.sent("online", auckland, 3600.0, wall + 3600, RNG)
    auckland_midnight = datetime(2026, 12, 1, tzinfo=ZoneInfo("Pacific/Auckland")).timestamp()
    assert p.windows["day"].end == auckland_midnight
    assert p.windows["day"].total == 4, "Auckland's day began before Shanghai's ended: those sends count in it"
    p.sent("online", auckland, 2e5, auckland_midnight, RNG)
    assert p.windows["day"].total == 1, "the next day of the same zone starts again"


@given(st.floats(min_value=1.5e9, max_value=2.2e9),
       st.sampled_from(["Asia/Shanghai", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "UTC",
                        "Australia/Lord_Howe", "America/Santiago", "America/Havana", "Atlantic/Azores"]))
def test_the_day_window_is_the_guids_calendar_day(wall: float, zone: str) -> None:
    tz = ZoneInfo(zone)
    day = datetime.fromtimestamp(wall, tz).date()
    start, end = Limits(timezone=zone).window("day", 86400, wall)
    assert start <= wall < end
    local = [datetime.fromtimestamp(t, tz).date() for t in (start - 1, start, end - 1, end)]
    assert local == [day - timedelta(days=1), day, day, day + timedelta(days=1)], "the first instants of two days"
    minute = int(wall // 60) * 60
    assert Limits(timezone=zone).window("minute", 60, wall) == (minute, minute + 60)


@pytest.mark.parametrize(("zone", "day", "hours"), [
    ("America/Havana", date(2026, 11, 1), 25),  # midnight comes twice: the day starts at the first
    ("Atlantic/Azores", date(2026, 10, 25), 25),
    ("America/Santiago", date(2026, 9, 6), 23),  # no midnight: the day starts at 01:00
    ("Europe/Berlin", date(2026, 3, 29), 23),
])
def test_a_day_is_as_long_as_the_guids_calendar_makes_it(zone: str, day: date, hours: int) -> None:
    tz = ZoneInfo(zone)
    noon = datetime.combine(day, time(12), tz).timestamp()
    start, end = Limits(timezone=zone).window("day", 86400, noon)
    assert end - start == hours * 3600
    assert datetime.fromtimestamp(start, tz).date() == day and datetime.fromtimestamp(end, tz).date() > day
    assert datetime.fromtimestamp(start - 1, tz).date() < day, "the first instant of the day"


def test_batch_gets_only_its_share_of_a_window_but_online_can_use_the_rest() -> None:
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, per_hour=10, online_reserve=0.2)
    p, wall = GuidPacer(), wall_at(9, 30)
    for _ in range(8):
        p.sent("batch", limits, 0.0, wall, RNG)
    assert p.ready_at("batch", limits, 0.0, wall) == pytest.approx(1800.0)
    assert p.ready_at("online", limits, 0.0, wall) <= 0.0
    p.sent("online", limits, 0.0, wall, RNG)
    p.sent("online", limits, 0.0, wall, RNG)
    assert p.ready_at("online", limits, 0.0, wall) == pytest.approx(1800.0)


def test_quiet_hours_hold_batch_until_they_end_but_not_replies() -> None:
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, quiet_hours=(time(22), time(8)))
    p = GuidPacer()
    assert p.ready_at("batch", limits, 0.0, wall_at(23, 30)) == pytest.approx(8.5 * 3600)
    assert p.ready_at("batch", limits, 0.0, wall_at(7, 59, 0)) == pytest.approx(60.0)
    assert p.ready_at("batch", limits, 0.0, wall_at(12)) <= 0.0
    assert p.ready_at("online", limits, 0.0, wall_at(23, 30)) <= 0.0


def test_rate_limited_rejection_slows_down_and_clean_sends_recover() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, rate_limited_penalty=2.0, penalty_decay=0.5)
    p = GuidPacer()
    p.slowed("batch", limits, 0.0, RNG)
    p.slowed("batch", limits, 0.0, RNG)
    assert p.multiplier == 4.0 and p.ready_at("online", limits, 0.0, 0.0) == 4.0
    p.sent("batch", limits, 10.0, 0.0, RNG)
    p.sent("batch", limits, 20.0, 0.0, RNG)
    assert p.multiplier == 1.0
    p.sent("batch", limits, 30.0, 0.0, RNG)
    assert p.multiplier == 1.0, "never faster than the configured interval"


def test_a_send_left_without_an_answer_counts_as_sent_and_slows_the_guid_like_a_rate_limit() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0, rate_limited_penalty=2.0,
                    penalty_decay=0.9, per_hour=5)
    p = GuidPacer()
    p.unanswered("batch", limits, 0.0, wall_at(12), RNG)
    assert p.ready_at("batch", limits, 0.0, wall_at(12)) == pytest.approx(2.0), "twice the interval, not once"
    assert p.windows["hour"].total == 1, "it may have been delivered: it counts against the caps"
    p.unanswered("batch", limits, 2.0, wall_at(12), RNG)
    assert p.ready_at("batch", limits, 2.0, wall_at(12)) == pytest.approx(2.0 + 3.6), "in a row: slower still"
    uncapped, waits = limits.model_copy(update={"per_hour": None}), []
    for k in range(20):
        p.sent("batch", uncapped, 10.0 + k, wall_at(13), RNG)
        waits.append(p.ready_at("batch", uncapped, 10.0 + k, wall_at(13)) - (10.0 + k))
    assert all(b <= a for a, b in itertools.pairwise(waits)) and waits[-1] == pytest.approx(1.0), \
        "answered sends recover, down to the configured interval"


@given(penalty=st.floats(min_value=1.0, max_value=10.0), cap=st.floats(min_value=1.0, max_value=100.0),
       n=st.integers(min_value=1, max_value=60))
def test_repeated_rate_limits_slow_the_guid_more_each_time_up_to_the_cap(penalty: float, cap: float, n: int) -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0, rate_limited_penalty=penalty,
                    max_penalty=cap)
    p = GuidPacer()
    waits = []
    for k in range(n):
        p.slowed("batch", limits, float(k), RNG)
        waits.append(p.ready_at("batch", limits, float(k), 0.0) - k)
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(waits)), "each rate limit in a row waits at least as long"
    assert waits[0] == pytest.approx(min(penalty, cap))
    assert max(waits) <= cap + 1e-9, "never slower than max_penalty times the interval"
    assert waits[-1] == pytest.approx(min(cap, penalty ** n))


def test_pacing_refuses_a_penalty_that_would_speed_up() -> None:
    with pytest.raises(ValueError):
        Limits(rate_limited_penalty=0.5)
    with pytest.raises(ValueError):
        Limits(max_penalty=0.5)


def test_handover_keeps_the_previous_owners_spacing() -> None:
    limits = Limits(min_interval_s=3.0, jitter_s=0.0, online_reserve=0.0)
    p = GuidPacer()
    p.resume_after(100.0, since_last_send_s=1.0, limits=limits)
    assert p.ready_at("online", limits, 100.0, 0.0) == 102.0
    fresh = GuidPacer()
    fresh.resume_after(100.0, since_last_send_s=None, limits=limits)
    assert fresh.ready_at("online", limits, 100.0, 0.0) <= 100.0


def test_handover_keeps_the_previous_owners_rate_limit_penalty() -> None:
    limits = Limits(min_interval_s=3.0, jitter_s=0.0, online_reserve=0.0, max_penalty=8.0, penalty_decay=1.0)
    p = GuidPacer()
    p.resume_after(100.0, since_last_send_s=1.0, limits=limits, penalty=4.0)
    assert p.ready_at("online", limits, 100.0, 0.0) == 99.0 + 12.0, "four times the interval after its last send"
    capped = GuidPacer()
    capped.resume_after(100.0, 1.0, limits, penalty=50.0)
    assert capped.multiplier == 8.0, "never past this sender's max_penalty"
    own = GuidPacer(multiplier=6.0)
    own.resume_after(100.0, 1.0, limits, penalty=2.0)
    assert own.multiplier == 6.0, "a penalty of its own is not lowered by an older row"
    decaying = limits.model_copy(update={"penalty_decay": 0.5})
    p.sent("online", decaying, 111.0, 0.0, RNG)
    assert p.multiplier == 4.0 * 0.5, "clean sends bring it back as ever"


def test_handover_keeps_the_quiet_a_gateway_asked_of_the_guid_on_both_lanes() -> None:
    """A previous owner was answered ``Retry-After``: what is left of that quiet holds the new
    owner's first call of the guid, online or batch, past the guid's own gap."""
    limits = Limits(min_interval_s=3.0, jitter_s=0.0, online_reserve=0.0, penalty_decay=1.0)
    p = GuidPacer()
    p.resume_after(100.0, since_last_send_s=1.0, limits=limits, penalty=2.0, quiet_s=40.0)
    assert p.ready_at("online", limits, 100.0, 0.0) == 140.0
    assert p.ready_at("batch", limits, 100.0, 0.0) == 140.0
    own = GuidPacer(quiet_until=150.0)
    own.resume_after(100.0, 1.0, limits, quiet_s=10.0)
    assert own.quiet_until == 150.0, "a longer quiet of its own is not shortened by the row's"
    over = GuidPacer()
    over.resume_after(100.0, 1.0, limits, quiet_s=0.0)
    assert over.quiet_until is None and over.ready_at("online", limits, 100.0, 0.0) == 102.0


def test_a_handed_over_penalty_wears_off_with_the_time_the_guid_has_been_quiet() -> None:
    """The row keeps the penalty of the guid's last rate limit; a guid that has not sent since
    is paced as if it had gone on sending cleanly at its slowed pace meanwhile: a day later,
    not slowed at all."""
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0, max_penalty=32.0, penalty_decay=0.9)
    just = GuidPacer()
    just.resume_after(100.0, 0.0, limits, penalty=32.0)
    assert just.multiplier == 32.0
    later = GuidPacer()
    later.resume_after(100.0, 100.0, limits, penalty=32.0)  # 100 s at ×0.9 a send: worn down by 10
    assert later.multiplier == pytest.approx(22.0)
    day = GuidPacer()
    day.resume_after(100.0, 86_400.0, limits, penalty=32.0)
    assert day.multiplier == 1.0
    unknown = GuidPacer()
    unknown.resume_after(100.0, None, limits, penalty=32.0)  # no send known: nothing to wear it down by
    assert unknown.multiplier == 32.0


@settings(max_examples=200, deadline=None)
@given(penalty=st.floats(1.0, 32.0), decay=st.floats(0.05, 0.999), interval=st.floats(0.1, 30.0),
       sends=st.integers(0, 200))
def test_the_worn_penalty_is_never_below_what_clean_sends_in_the_same_time_would_leave(
        penalty: float, decay: float, interval: float, sends: int) -> None:
    """However long the quiet, the handed-over penalty errs on the slow side: at most as worn
    as the same time spent sending cleanly at the slowed pace would have worn it."""
    limits = Limits(min_interval_s=interval, jitter_s=0.0, online_reserve=0.0, max_penalty=32.0, penalty_decay=decay)
    sending, quiet_s = GuidPacer(multiplier=penalty), 0.0
    for _ in range(sends):
        quiet_s += limits.batch_interval_s * sending.multiplier
        sending.sent("batch", limits, 0.0, 0.0, RNG)
    handed = GuidPacer()
    handed.resume_after(0.0, quiet_s, limits, penalty=penalty)
    assert handed.multiplier >= sending.multiplier - 1e-9


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        Limits(online_reserve=1.0)
    with pytest.raises(ValueError):
        Limits(min_interval_s=-1)


def test_a_hot_change_applies_to_the_gap_already_running() -> None:
    slow, fast = Limits(min_interval_s=3600.0, jitter_s=0.0), Limits(min_interval_s=2.0, jitter_s=0.0)
    p = GuidPacer()
    p.sent("online", slow, 0.0, 0.0, RNG)
    assert p.ready_at("online", slow, 1.0, 1.0) == 3600.0
    assert p.ready_at("online", fast, 1.0, 1.0) == 2.0


def test_a_jobs_own_rate_spaces_the_next_batch_send_but_never_online() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0)
    p = GuidPacer()
    p.sent("batch", limits, 0.0, 0.0, RNG, job_interval_s=30.0)
    assert p.ready_at("batch", limits, 0.0, 0.0) == 30.0
    assert p.ready_at("online", limits, 0.0, 0.0) == 1.0  # a reply never waits for a slow campaign
    p.sent("batch", limits, 30.0, 0.0, RNG)  # a send of a job without its own rate
    assert p.ready_at("batch", limits, 30.0, 0.0) == 31.0


def test_handover_keeps_the_previous_owners_window_counts() -> None:
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, online_reserve=0.5, per_minute=10)
    wall = 600.0 * 60  # minute index 600
    ends = 601.0 * 60  # the database's record: sends, and the epoch second the window ends
    p = GuidPacer()
    p.resume_after(50.0, since_last_send_s=None, limits=limits, windows={"minute": (10, ends)})
    assert p.ready_at("online", limits, 50.0, wall) == 50.0 + 60  # the minute is used up
    q = GuidPacer()
    q.resume_after(50.0, None, limits, windows={"minute": (5, ends)})
    assert q.ready_at("batch", limits, 50.0, wall) == 50.0 + 60  # counted against batch's share too
    assert q.ready_at("online", limits, 50.0, wall) <= 50.0
    stale = GuidPacer()
    stale.resume_after(50.0, None, limits, windows={"minute": (10, wall)})  # ended
    assert stale.ready_at("online", limits, 50.0, wall) <= 50.0
    stale.sent("online", limits, 50.0, wall, RNG)
    assert stale.windows["minute"].total == 1, "an ended minute does not carry into the next"


def test_a_day_handed_over_after_it_ended_counts_where_the_new_owners_day_overlaps_it() -> None:
    """The previous owner counted Shanghai's day (it ended at 16:00 UTC); the new owner's guids
    live in Berlin, whose day began at 23:00 UTC the evening before: those sends may be in it,
    as the database counts them."""
    berlin = Limits(min_interval_s=0.0, jitter_s=0.0, per_day=6, online_reserve=0.0, timezone="Europe/Berlin")
    shanghai_midnight = datetime(2026, 11, 30, tzinfo=TZ).timestamp()
    p = GuidPacer()
    p.resume_after(0.0, None, berlin, windows={"day": (5, shanghai_midnight)})
    wall = shanghai_midnight + 3600
    assert p.ready_at("online", berlin, 0.0, wall) <= 0.0
    p.sent("online", berlin, 0.0, wall, RNG)
    assert p.windows["day"].total == 6
    berlin_midnight = datetime(2026, 11, 30, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    assert p.ready_at("online", berlin, 0.0, wall) == pytest.approx(berlin_midnight - wall), "capped, not one over"


def test_a_cap_set_during_the_day_counts_the_days_sends_before_it() -> None:
    free = Limits(min_interval_s=0.0, jitter_s=0.0, online_reserve=0.0)
    capped = free.model_copy(update={"per_day": 3})
    p, wall = GuidPacer(), wall_at(15, 0)
    for _ in range(3):
        p.sent("online", free, 0.0, wall, RNG)
    assert p.ready_at("online", capped, 0.0, wall) == pytest.approx(9 * 3600.0), "held until midnight"


def test_a_guid_taken_back_counts_by_the_row_not_by_what_this_sender_remembers() -> None:
    """The row counts every send begun under any owner: it replaces this sender's own record,
    here a full day before Berlin's 23-hour day (the clocks go forward on 2027-03-28)."""
    berlin = ZoneInfo("Europe/Berlin")
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, per_day=100, online_reserve=0.0, timezone="Europe/Berlin")
    p = GuidPacer()
    for _ in range(100):
        p.sent("online", limits, 0.0, datetime(2027, 3, 27, 20, tzinfo=berlin).timestamp(), RNG)
    end_28 = datetime(2027, 3, 29, tzinfo=berlin).timestamp()
    p.resume_after(0.0, 60.0, limits, windows={"day": (3, end_28)})
    assert (p.windows["day"].total, p.windows["day"].end) == (3, end_28)
    assert "minute" not in p.windows, "the row's record is the whole of it"
    assert p.ready_at("online", limits, 0.0, datetime(2027, 3, 28, 12, tzinfo=berlin).timestamp()) <= 0.0


def test_a_carried_window_holds_before_the_first_send_of_the_new_one() -> None:
    berlin = Limits(min_interval_s=0.0, jitter_s=0.0, per_day=5, online_reserve=0.0, timezone="Europe/Berlin")
    shanghai_midnight = datetime(2026, 11, 30, tzinfo=TZ).timestamp()
    p = GuidPacer()
    p.resume_after(0.0, None, berlin, windows={"day": (5, shanghai_midnight)})
    berlin_midnight = datetime(2026, 11, 30, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    wall = shanghai_midnight + 3600
    assert p.ready_at("online", berlin, 0.0, wall) == pytest.approx(berlin_midnight - wall)


def test_a_spread_start_holds_the_campaign_lane_for_its_part_of_one_interval() -> None:
    limits = Limits(min_interval_s=8.0, jitter_s=0.0, online_reserve=0.2, reserve_from_priority=5)
    p = GuidPacer()
    p.spread_start(100.0, limits, 0.25)
    assert p.ready_at("batch", limits, 100.0, 0.0) == pytest.approx(100.0 + 0.25 * limits.batch_interval_s)
    assert p.ready_at("batch", limits, 100.0, 0.0, priority=1) <= 100.0  # urgent batch work is not held
    assert p.ready_at("online", limits, 100.0, 0.0) <= 100.0  # nor a reply
    none = GuidPacer()
    none.spread_start(100.0, limits, 0.0)
    assert none.ready_at("batch", limits, 100.0, 0.0) <= 100.0


def test_a_spread_start_never_brings_a_recorded_send_closer() -> None:
    limits = Limits(min_interval_s=8.0, jitter_s=0.0, online_reserve=0.0)
    p = GuidPacer()
    p.sent("batch", limits, 99.0, 0.0, RNG)  # due at 107
    p.spread_start(100.0, limits, 0.1)  # would be due at 100.8
    assert p.ready_at("batch", limits, 100.0, 0.0) == 107.0


def test_a_guid_handed_over_overdue_is_spread_over_how_long_it_waited_not_a_whole_interval() -> None:
    limits = Limits(min_interval_s=120.0, jitter_s=0.0, online_reserve=0.0)
    p = GuidPacer()
    p.resume_after(1000.0, 130.0, limits)  # the previous owner sent 130 s ago: 10 s overdue
    assert p.rested(1000.0, limits)
    p.spread_start(1000.0, limits, 0.5)
    assert p.ready_at("batch", limits, 1000.0, 0.0) == pytest.approx(1000.0 + 0.5 * 10.0)
    # Overdue by more than an interval (a campaign's start, a long stop): one interval at most.
    q = GuidPacer()
    q.resume_after(1000.0, 600.0, limits)
    q.spread_start(1000.0, limits, 0.5)
    assert q.ready_at("batch", limits, 1000.0, 0.0) == pytest.approx(1000.0 + 0.5 * 120.0)


def test_once_the_guid_sent_here_a_later_start_is_spread_over_a_whole_interval_again() -> None:
    limits = Limits(min_interval_s=120.0, jitter_s=0.0, online_reserve=0.0)
    p = GuidPacer()
    p.resume_after(1000.0, 60.0, limits)  # handed over in the middle of a campaign
    p.sent("batch", limits, 1060.0, 0.0, RNG)  # its last send here; the campaign ends
    p.spread_start(1190.0, limits, 0.5)  # a new campaign on the guid it holds, 10 s overdue
    assert p.ready_at("batch", limits, 1190.0, 0.0) == pytest.approx(1190.0 + 0.5 * 120.0)




def test_the_claim_lead_follows_a_slow_claim_at_once_and_fast_ones_gradually_within_its_cap() -> None:
    ahead = ClaimAhead(cap_s=0.1)
    assert ahead.lead_s == 0.0  # nothing learnt yet: no claim ahead
    ahead.observe(0.02)
    assert ahead.lead_s == pytest.approx(0.02)
    ahead.observe(0.5)
    assert ahead.lead_s == pytest.approx(0.1), "capped"
    ahead.observe(0.001)
    assert ahead.estimate_s == pytest.approx(0.45), "a fast claim lowers it by the decay, not to itself"
    for _ in range(100):
        ahead.observe(0.001)
    assert ahead.lead_s == pytest.approx(0.001, abs=1e-4)
    off = ClaimAhead(cap_s=0.0)
    off.observe(0.3)
    assert off.lead_s == 0.0



def test_a_guid_taken_back_by_its_own_sender_wears_its_penalty_down_by_the_time_it_was_away() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0, max_penalty=32.0, penalty_decay=0.9)
    p = GuidPacer(multiplier=32.0, last_any=0.0)
    p.rest(100.0, limits)
    assert p.multiplier == pytest.approx(22.0)
    p.rest(86_500.0, limits)
    assert p.multiplier == 1.0
    caps_only = Limits(min_interval_s=0.0, jitter_s=0.0, online_reserve=0.0, per_minute=10)
    handed = GuidPacer()
    handed.resume_after(100.0, 50.0, caps_only, penalty=4.0)  # no interval to wear it by: kept, no error
    assert handed.multiplier == 4.0


@given(ends=st.none() | st.floats(-1e6, 1e6), now=st.floats(-1e6, 1e6))
def test_what_is_left_of_a_quiet_is_its_end_less_now_and_none_once_over(ends: float | None, now: float) -> None:
    left = quiet_left(ends, now)
    if ends is None or ends <= now:
        assert left is None
    else:
        assert left == ends - now and left > 0

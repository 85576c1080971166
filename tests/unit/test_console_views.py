"""What the console shows: progress, stalled shards, failure examples, projected durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain.limits import DEFAULTS, Pacing, effective_pacing
from pacer_control.api.console import templates
from pacer_control.domain.views import (
    STALLED_AFTER_S,
    activity,
    ago,
    capped_until,
    changes,
    describe_totals,
    duration,
    examples,
    number,
    progress,
    projection,
    queued_count,
    quiet_until,
    read_ahead,
    stalled,
    stamp,
)

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
STATUSES = ["pending", "claimed", "submitted", "confirmed", "failed", "waiting_retry", "abandoned", "expired",
            "recovery_pending", "unverified"]


@given(st.dictionaries(st.sampled_from(STATUSES), st.integers(0, 10_000)), st.integers(0, 50_000))
def test_progress_parts_add_up_and_never_pass_a_hundred_percent(counts: dict[str, int], total: int) -> None:
    p = progress(counts, total)
    assert p["delivered"] + p["failed"] + p["open"] == p["total"] >= sum(counts.values())
    assert 0 <= p["delivered_pct"] + p["failed_pct"] <= 100.2  # rounding of two shares
    assert p["done"] == p["delivered"] + p["failed"]


def test_progress_counts_undelivered_outcomes_as_failed_and_the_rest_as_open() -> None:
    p = progress({"confirmed": 5, "failed": 2, "unverified": 1, "expired": 1, "abandoned": 1, "pending": 10}, 20)
    assert (p["delivered"], p["failed"], p["open"], p["done_pct"]) == (5, 5, 10, 50.0)


def shard(last: datetime | None, status: str = "running", pending: int = 3) -> dict[str, object]:
    return {"status": status, "counts": {"pending": pending, "confirmed": 1}, "total": pending + 1,
            "last_progress_at": last}


def test_a_running_shard_with_open_items_and_no_recent_progress_is_stalled() -> None:
    old = NOW - timedelta(seconds=STALLED_AFTER_S + DEFAULTS.longest_gap_s + 1)
    assert stalled("running", shard(old), NOW)
    assert not stalled("running", shard(NOW - timedelta(seconds=5)), NOW)
    assert not stalled("paused", shard(old), NOW)  # a paused job is not stalled: it waits on purpose
    assert not stalled("running", shard(old, status="paused"), NOW)
    assert not stalled("running", shard(old, pending=0), NOW)  # nothing left to send


def test_a_shard_is_stalled_only_past_what_its_guids_limits_explain() -> None:
    hour_ago = NOW - timedelta(hours=1)
    assert not stalled("running", shard(hour_ago), NOW, Pacing(min_interval_s=7200)), "one send in two hours"
    assert stalled("running", shard(hour_ago), NOW, Pacing(min_interval_s=600))
    assert not stalled("running", shard(hour_ago) | {"job_gap": 7200.0}, NOW), "its job sends every two hours"
    inside = f"{NOW - timedelta(hours=1):%H:%M}-{NOW + timedelta(hours=1):%H:%M}"
    assert not stalled("running", shard(hour_ago), NOW, Pacing(quiet_hours=inside, timezone="UTC"))
    day = int(NOW.timestamp() // 86400)
    assert not stalled("running", shard(hour_ago) | {"windows": {"day": [day, 8]}}, NOW, Pacing(per_day=10))
    assert stalled("running", shard(hour_ago) | {"windows": {"day": [day, 7]}}, NOW, Pacing(per_day=10))
    assert not stalled("running", shard(hour_ago) | {"guid_held": True}, NOW), "a paused or logged-out guid"


def test_a_pending_shard_that_never_moved_is_stalled_from_when_it_has_been_quiet() -> None:
    never = shard(None, status="pending") | {"quiet_since": NOW - timedelta(seconds=STALLED_AFTER_S + DEFAULTS.longest_gap_s + 1)}
    assert stalled("running", never, NOW)
    assert not stalled("running", never | {"quiet_since": NOW - timedelta(seconds=5)}, NOW)
    assert not stalled("running", shard(None, status="pending"), NOW), "nothing says since when"


def test_examples_keep_a_few_items_of_each_category_in_order() -> None:
    items = [{"last_error_class": c, "to_id": f"r{i}"} for i, c in enumerate("aabaaab")]
    ex = examples(items, per_class=2)
    assert {k: [i["to_id"] for i in v] for k, v in ex.items()} == {"a": ["r0", "r1"], "b": ["r2", "r6"]}


def test_projection_is_the_slowest_guid_by_its_spacing_and_its_window_caps() -> None:
    """A guid's time is its spacing (interval, reserve, mean jitter) times its items, or, when
    a window cap's batch share lets fewer through, a whole window for each share but the last."""
    limits = {"g1": {"min_interval_s": 2.0, "jitter_s": 0.0, "online_reserve": 0.0},
              "g2": {},  # the defaults: 1 s / 0.8 + 0.25 s of mean jitter
              "capped": {"per_day": 2000, "online_reserve": 0.2}}  # 1,600 a day for campaigns
    p = projection([{"guid": g, "items": n} for g, n in (("g1", 100), ("g2", 300), ("capped", 50_000))],
                   lambda g: effective_pacing(None, limits[g["guid"]]), priority=3)
    by = {g["guid"]: g for g in p["guids"]}
    assert by["g1"]["seconds"] == 200.0 and by["g2"]["seconds"] == 300 * (1.0 / 0.8 + 0.25)
    assert by["capped"]["caps"] == "1,600/day" and by["capped"]["seconds"] == 31 * 86_400, "32 days' shares"
    assert (p["slowest_guid"], p["seconds"], p["items"]) == ("capped", 31 * 86_400, 50_400)
    assert duration(p["seconds"]) == "31.0 days"
    tickets = projection([{"guid": "g2", "items": 300}], lambda g: effective_pacing(None, {}), priority=2)
    assert tickets["seconds"] == 300 * (1.0 + 0.25), "work more urgent than the reserve goes at the whole rate"
    tiny = projection([{"guid": "tiny", "items": 5}],
                      lambda g: effective_pacing(None, {"per_minute": 1, "online_reserve": 0.5}), priority=3)
    assert tiny["seconds"] == 4 * 60, "a cap the reserve would take whole still lets one batch send a window"
    assert duration(None) == "never"
    assert projection([], lambda g: DEFAULTS, 3) == {"guids": [], "seconds": 0.0, "slowest_guid": None, "items": 0}


def test_words_for_durations_ages_totals_and_numbers() -> None:
    assert [duration(s) for s in (45, 720, 12_600)] == ["45 s", "12 min", "3.5 h"]
    assert [ago(NOW - timedelta(seconds=s), NOW) for s in (3, 600, 10_800)] == ["3 s ago", "10 min ago", "3 h ago"]
    assert ago(None, NOW) == "never"
    assert describe_totals({"created": 3, "conflict": 0, "already_queued": 1}) == "created 3, already_queued 1"
    assert describe_totals({"created": 0}) == "no item matched"
    assert (number("2"), number("2.5"), number("22:00-08:00")) == (2, 2.5, "22:00-08:00")


def test_an_audit_entry_shows_only_what_changed() -> None:
    assert changes({"status": "running", "paused_reason": None}, {"status": "paused", "paused_reason": "x"}) == [
        ("status", "running", "paused"), ("paused_reason", None, "x")]
    assert changes(None, {"outcome": "done"}) == [("outcome", None, "done")]
    assert changes({"epoch": 7}, {"epoch": 7}) == []


def test_categories_read_ahead_of_the_projection_are_named_with_both_figures() -> None:
    failures = [{"error_class": "bad_params", "total": 12, "by_status": {"failed": 12}},
                {"error_class": "rate_limited", "total": 3, "by_status": {"failed": 1, "waiting_retry": 2}}]
    assert read_ahead({"failed": 11, "waiting_retry": 2, "confirmed": 40}, failures) == {"failed": (13, 11)}
    assert read_ahead({"failed": 13, "waiting_retry": 2}, failures) == {}
    # Items without an error class (a cancel) are in the counts only: the counts ahead is not news.
    assert read_ahead({"failed": 20, "waiting_retry": 5, "abandoned": 7}, failures) == {}
    assert read_ahead({}, []) == {}


def test_an_event_time_reads_to_the_millisecond_from_a_datetime_or_its_json_text() -> None:
    at = datetime(2026, 11, 30, 9, 0, 1, 250_900, tzinfo=UTC)
    assert stamp(at) == stamp(at.isoformat()) == "2026-11-30 09:00:01.250"
    assert stamp(None) == "–" and stamp("not a time") == "not a time"


def test_the_console_shows_every_time_in_utc_whatever_zone_the_database_answered_in() -> None:
    """A server in Asia/Shanghai answers 17:00:01+08:00 for 09:00:01 UTC, as a time and as JSON
    text: the console's filters and the dead letters read UTC, so the pages do too."""
    shanghai = timezone(timedelta(hours=8))
    at = datetime(2026, 11, 30, 17, 0, 1, 250_000, tzinfo=shanghai)
    assert stamp(at) == stamp(at.isoformat()) == "2026-11-30 09:00:01.250"
    assert templates.env.filters["ts"](at) == "2026-11-30 09:00:01"


def test_a_guid_with_ready_work_is_sending_until_it_has_waited_too_long_without_a_send() -> None:
    long_ago = NOW - timedelta(seconds=STALLED_AFTER_S + DEFAULTS.longest_gap_s + 1)
    just_now = NOW - timedelta(seconds=5)
    assert activity(0, 0, long_ago, None, NOW) == "idle"
    assert activity(3, 3, just_now, long_ago, NOW) == "sending"  # a backlog going out
    assert activity(3, 3, None, just_now, NOW) == "sending"  # work just ready, its first send to come
    assert activity(3, 3, long_ago, long_ago, NOW) == "stalled"  # ready for long, nothing sent for long
    assert activity(3, 1, None, long_ago, NOW) == "stalled"
    assert activity(3, 3, long_ago, just_now, NOW) == "sending"  # new work after a rest


def test_a_guid_is_stalled_only_past_its_own_pacing_gap_and_the_configured_wait() -> None:
    slow = Pacing(min_interval_s=240, online_reserve=0.2, jitter_s=30)  # a batch send every 300-330 s
    assert slow.longest_gap_s == 330
    three_min, six_min = NOW - timedelta(minutes=3), NOW - timedelta(minutes=6)
    assert activity(3, 3, three_min, three_min, NOW) == "stalled"  # at the default pacing, long past due
    assert activity(3, 3, three_min, three_min, NOW, slow) == "sending"  # still within its own gap
    assert activity(3, 3, six_min, six_min, NOW, slow) == "sending"  # past its gap, within the 2 minutes after
    assert activity(3, 3, NOW - timedelta(seconds=451), NOW - timedelta(seconds=451), NOW, slow) == "stalled"
    assert activity(3, 3, six_min, six_min, NOW, slow, after_s=10) == "stalled"  # a stricter setting
    exponential = Pacing(min_interval_s=1, online_reserve=0.5, jitter_s=10, jitter_dist="exponential")
    assert exponential.longest_gap_s == 2 + 40  # the sender caps an exponential gap at four times its mean


def test_a_guid_slowed_by_the_gateway_is_slowed_until_its_stretched_gap_has_gone_by() -> None:
    hourly = Pacing(min_interval_s=3600, jitter_s=0)  # a batch send every 4,500 s (the online reserve)
    two_hours = NOW - timedelta(hours=2)
    assert activity(3, 3, two_hours, two_hours, NOW, hourly) == "stalled"
    assert activity(3, 3, two_hours, two_hours, NOW, hourly, penalty=4.0) == "slowed"
    assert activity(3, 3, NOW - timedelta(seconds=5), two_hours, NOW, hourly, penalty=1.5) == "slowed"
    past = NOW - timedelta(seconds=4 * hourly.longest_gap_s + STALLED_AFTER_S + 1)
    assert activity(3, 3, past, past, NOW, hourly, penalty=4.0) == "stalled", "past four gaps too"
    shard = {"status": "running", "counts": {"pending": 1}, "total": 1, "quiet_since": two_hours}
    assert stalled("running", shard, NOW, hourly)
    assert not stalled("running", shard | {"penalty": 4.0}, NOW, hourly)


def test_a_guid_keeping_the_quiet_its_gateway_asked_for_is_slowed_not_stalled() -> None:
    """A ``Retry-After`` of an hour: no send for long, yet the guid waits on purpose; the stall
    counts from the quiet's end."""
    long_ago = NOW - timedelta(hours=2)
    ends = NOW + timedelta(minutes=30)
    assert activity(3, 3, long_ago, long_ago, NOW) == "stalled"
    assert activity(3, 3, long_ago, long_ago, NOW, gateway_quiet_until=ends) == "slowed"
    after = ends + timedelta(seconds=STALLED_AFTER_S + DEFAULTS.longest_gap_s + 1)
    assert activity(3, 3, long_ago, long_ago, after, gateway_quiet_until=ends) == "stalled"
    assert activity(3, 3, NOW - timedelta(seconds=5), long_ago, NOW, gateway_quiet_until=long_ago) == "sending"


def test_a_guid_inside_its_quiet_hours_is_quiet_until_they_end() -> None:
    night = Pacing(quiet_hours="22:00-08:00", timezone="Asia/Shanghai")  # NOW is 17:00 in Shanghai
    assert quiet_until(night, NOW) is None
    late = NOW + timedelta(hours=6)  # 23:00 in Shanghai: 9 hours to go
    assert quiet_until(night, late) == late + timedelta(hours=9)
    long_ago = late - timedelta(hours=1)
    assert activity(3, 3, long_ago, long_ago, late, night) == "quiet"  # not stalled: held on purpose
    assert activity(3, 0, long_ago, None, late, night) == "waiting"  # nothing ready: waiting, as by day
    morning = NOW + timedelta(hours=15)  # 08:00: over; the night held it, so the stall counts from now
    assert activity(3, 3, long_ago, long_ago, morning, night) == "sending"
    assert activity(3, 3, long_ago, long_ago, morning + timedelta(seconds=STALLED_AFTER_S - 1), night) == "sending"
    later = morning + timedelta(seconds=STALLED_AFTER_S + night.longest_gap_s + 1)
    assert activity(3, 3, long_ago, long_ago, later, night) == "stalled"


def test_a_guid_whose_queued_work_is_all_held_or_scheduled_is_waiting_at_once() -> None:
    just_now = NOW - timedelta(seconds=5)
    assert activity(3, 0, None, None, NOW) == "waiting"
    assert activity(3, 0, just_now, None, NOW) == "waiting"


def test_a_backlog_counts_as_queued_what_is_not_yet_begun() -> None:
    backlog = {"by_lane": {"online": {"ready": 1, "claimed": 4}, "batch": {"held": 2, "scheduled": 3,
                                                                          "waiting_retry": 5, "submitted": 7}}}
    assert queued_count(backlog) == 11
    assert queued_count({"queued": None}) == 0 and queued_count({"queued": 6}) == 6


def test_a_guids_pacing_is_its_own_overrides_over_every_guids_and_skips_what_no_longer_reads() -> None:
    every = {"min_interval_s": 30.0, "jitter_s": 0.0}
    assert effective_pacing(every, {"min_interval_s": 7200.0}).min_interval_s == 7200.0
    assert effective_pacing(every, None).min_interval_s == 30.0
    # a limit a later release dropped: the guid's own overrides are skipped, as the senders do
    assert effective_pacing(every, {"min_interval_s": 7200.0, "dropped_limit": 1}).min_interval_s == 30.0
    assert effective_pacing({"dropped_limit": 1}, None) == DEFAULTS
    # every guid's row unreadable: the guid's own still apply over the defaults, as the senders do
    assert effective_pacing({"dropped_limit": 1}, {"min_interval_s": 7200.0}).min_interval_s == 7200.0
    for garbled in (7, [1, 2], "text"):  # a row written by hand that is no object
        assert effective_pacing(garbled, {"min_interval_s": 5.0}).min_interval_s == 5.0
        assert effective_pacing(every, garbled).min_interval_s == 30.0


def test_a_guid_whose_window_used_its_batch_share_is_capped_until_the_window_ends() -> None:
    day = int(NOW.timestamp() // 86400)
    capped = Pacing(per_day=10)  # batch share 8
    used, free = {"day": [day, 8]}, {"day": [day, 7]}
    long_ago = NOW - timedelta(seconds=STALLED_AFTER_S + capped.longest_gap_s + 1)
    assert activity(3, 3, long_ago, long_ago, NOW, capped, windows=used) == "capped"
    assert activity(3, 3, long_ago, long_ago, NOW, capped, windows=free) == "stalled"
    midnight = datetime.fromtimestamp((day + 1) * 86400, UTC)
    assert capped_until(capped, used, NOW) == midnight
    assert capped_until(capped, free, NOW) is None
    assert capped_until(capped, {"day": [day - 1, 10]}, NOW) is None  # yesterday's sends

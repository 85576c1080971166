"""A shard that waits for its guid's limits is not stalled: quiet hours, a send window's cap,
a guid's own slow pace (pacer_reconciler.domain.stalls, Pacing.held_for)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain.limits import DEFAULTS, Pacing, Pacings, effective_pacing
from pacer_reconciler.domain.stalls import Quiet, stalled

NOW = datetime(2026, 12, 6, 3, 0, 30, tzinfo=UTC)  # 11:00:30 in Asia/Shanghai
WALL = NOW.timestamp()
DAY = int(WALL // 86400)


def test_quiet_hours_hold_a_guid_until_they_end() -> None:
    assert Pacing(quiet_hours="10:00-12:00").held_for(WALL, None) == 3600 - 30
    assert Pacing(quiet_hours="12:00-10:00").held_for(WALL, None) == 0  # outside: 10:00 to 12:00 is open


def test_a_window_whose_batch_share_is_used_holds_the_guid_until_the_window_ends() -> None:
    capped = Pacing(per_day=10)  # the batch share: 8 of 10 (online_reserve 0.2)
    day_left = (DAY + 1) * 86400 - WALL
    assert capped.held_for(WALL, {"day": [DAY, 8]}) == day_left
    assert capped.held_for(WALL, {"day": [DAY, 7]}) == 0
    assert capped.held_for(WALL, {"day": [DAY - 1, 10]}) == 0, "yesterday's sends hold nothing today"
    assert DEFAULTS.held_for(WALL, {"day": [DAY, 10_000]}) == 0, "no cap, no hold"
    assert capped.held_for(WALL, {"day": "garbled"}) == 0
    per_minute = Pacing(per_minute=5, per_day=10)
    assert per_minute.held_for(WALL, {"minute": [int(WALL // 60), 4], "day": [DAY, 8]}) == day_left


def test_a_day_window_kept_with_its_end_holds_the_guid_until_its_own_midnight() -> None:
    """The trigger keeps [index, sends, end]: the guid's day ends at its own midnight."""
    capped = Pacing(per_day=10)
    midnight = datetime(2026, 12, 6, 16, tzinfo=UTC).timestamp()  # 00:00 on the 7th in Asia/Shanghai
    index = int((WALL + 8 * 3600) // 86400)  # the local day's number, as the trigger keeps it
    assert capped.window("day", 86400, WALL)[1] == midnight
    assert capped.held_for(WALL, {"day": [index, 8, midnight]}) == midnight - WALL
    assert capped.held_for(WALL, {"day": [index, 7, midnight]}) == 0
    assert capped.held_for(midnight, {"day": [index, 8, midnight]}) == 0, "a day ended holds nothing"


def quiet(since_s: float, limits: dict[str, object] | None = None, windows: dict[str, object] | None = None) -> Quiet:
    return Quiet("g", [NOW - timedelta(seconds=since_s)], limits, windows)


def test_a_shard_is_stalled_only_past_the_stall_time_and_its_guids_own_longest_gap() -> None:
    gap = DEFAULTS.longest_gap_s
    assert stalled([quiet(600 + gap + 1)], Pacings(None), NOW, 600) == 1
    assert stalled([quiet(600 + gap - 1)], Pacings(None), NOW, 600) == 0
    assert stalled([quiet(1200, {"min_interval_s": 3600})], Pacings(None), NOW, 600) == 0, "one send an hour"
    assert stalled([quiet(1200)], Pacings({"min_interval_s": 3600}), NOW, 600) == 0, "every guid's pace"
    assert stalled([quiet(1200, {"quiet_hours": "10:00-12:00"})], Pacings(None), NOW, 600) == 0
    assert stalled([quiet(1200, {"per_day": 10}, {"day": [DAY, 9]})], Pacings(None), NOW, 600) == 0
    assert stalled([quiet(1200, {"per_day": 10}, {"day": [DAY, 2]})], Pacings(None), NOW, 600) == 1
    two = [NOW - timedelta(seconds=1200)] * 2
    assert stalled([Quiet("g", two, None, None, [3600.0, 0.0])], Pacings(None), NOW, 600) == 1, "its job sends hourly"
    assert stalled([Quiet("g", two, None, None, [3600.0, 3600.0])], Pacings(None), NOW, 600) == 0


def test_a_rate_limit_penalty_stretches_the_gap_before_a_stall() -> None:
    """Paced at one batch send an hour, slowed four times by the gateway: four hours between
    sends are its pace, not a stall; past them (and the stall time) they are."""
    hourly = {"min_interval_s": 3600, "jitter_s": 0}
    gap = Pacings(None)(hourly, None).longest_gap_s
    since = [NOW - timedelta(seconds=600 + gap + 60)]
    assert stalled([Quiet("g", since, hourly, None)], Pacings(None), NOW, 600) == 1
    assert stalled([Quiet("g", since, hourly, None, penalty=4.0)], Pacings(None), NOW, 600) == 0
    long_since = [NOW - timedelta(seconds=600 + 4 * gap + 60)]
    assert stalled([Quiet("g", long_since, hourly, None, penalty=4.0)], Pacings(None), NOW, 600) == 1


@given(st.lists(st.floats(0, 10_000), max_size=20), st.floats(0, 5_000))
def test_the_count_never_exceeds_the_shards_and_grows_with_their_age(ages: list[float], more: float) -> None:
    young = stalled([Quiet("g", [NOW - timedelta(seconds=a) for a in ages], None, None)], Pacings(None), NOW, 600)
    old = stalled([Quiet("g", [NOW - timedelta(seconds=a + more) for a in ages], None, None)], Pacings(None), NOW, 600)
    assert 0 <= young <= old <= len(ages)


def test_pacings_are_made_once_per_distinct_pair_of_a_guids_and_its_senders_limits() -> None:
    pacings = Pacings({"min_interval_s": 5})
    slow_sender = DEFAULTS.model_copy(update={"min_interval_s": 60, "per_day": 100}).model_dump(mode="json")
    pairs = [(None, None), ({"per_day": 10}, None), (None, slow_sender), ({"per_day": 10}, slow_sender),
             ({"min_interval_s": 2}, slow_sender)]
    for own, sender in pairs:
        assert pacings(own, sender) == effective_pacing({"min_interval_s": 5}, own, sender)
        assert pacings(dict(own or {}) or None, sender) is pacings(own, sender), "the same pair, made once"
    assert len(pacings.made) == len(pairs)


def test_time_held_by_quiet_hours_or_a_capped_window_does_not_count_toward_a_stall() -> None:
    """Quiet 22:00-08:00 in Shanghai; at 08:00:30 (00:00:30 UTC) the night has just ended."""
    night = Pacing(quiet_hours="22:00-08:00", timezone="Asia/Shanghai")
    morning = datetime(2026, 12, 7, 0, 0, 30, tzinfo=UTC)
    evening = morning - timedelta(hours=10, minutes=1)  # 21:59:30 the day before
    assert night.released_at(morning.timestamp(), None) == morning.timestamp() - 30
    assert not night.stalled(evening, morning, 600), "held all night: quiet for 30 s since"
    after = 600 + night.longest_gap_s
    assert not night.stalled(evening, morning + timedelta(seconds=after - 31), 600)
    assert night.stalled(evening, morning + timedelta(seconds=after), 600)
    capped = Pacing(per_day=10)
    midnight = datetime(2026, 12, 6, 16, tzinfo=UTC)  # 00:00 on the 7th in Shanghai
    full = {"day": [0, 8, midnight.timestamp()]}  # the batch share of 10, used up: held until midnight
    hours_before = midnight - timedelta(hours=5)
    assert not capped.stalled(hours_before, midnight + timedelta(seconds=5), 600, full)
    assert capped.stalled(hours_before, midnight + timedelta(seconds=5), 600, {"day": [0, 7, midnight.timestamp()]}), \
        "a day under its cap held nothing"
    assert capped.stalled(hours_before, midnight + timedelta(seconds=601 + capped.longest_gap_s), 600, full)


def test_quiet_hours_end_when_the_clock_last_passes_their_end_where_it_changes() -> None:
    """New York: on 1 November 2026 the clocks go back at 02:00 EDT (01:30 comes twice); on
    8 March 2026 they go forward at 02:00 EST (02:30 never comes)."""
    back = Pacing(quiet_hours="22:00-01:30", timezone="America/New_York")
    after_back = datetime(2026, 11, 1, 6, 31, tzinfo=UTC)  # 01:31 EST, the second 01:31
    assert back.released_at(after_back.timestamp(), None) == datetime(2026, 11, 1, 6, 30, tzinfo=UTC).timestamp()
    assert back.held_for(datetime(2026, 11, 1, 6, 15, tzinfo=UTC).timestamp(), None) > 0, "01:15 EST: held again"
    forward = Pacing(quiet_hours="22:00-02:30", timezone="America/New_York")
    jump = datetime(2026, 3, 8, 7, tzinfo=UTC)  # 02:00 EST becomes 03:00 EDT
    assert forward.released_at((jump + timedelta(minutes=1)).timestamp(), None) == jump.timestamp()
    evening = jump - timedelta(hours=9)
    assert not forward.stalled(evening, jump + timedelta(minutes=5), 600), "the night ended 5 minutes ago"
    assert forward.stalled(evening, jump + timedelta(minutes=11), 600)

"""What holds a whole guid: the quiet a gateway's rate limit asks for (``Retry-After``), and
window caps so small that the online reserve would leave batch work no share at all."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, SendError
from pacer_common.domain.limits import Pacing, effective_pacing, parse_limits
from pacer_common.domain.requests import Lane
from pacer_sender.core import Executed
from pacer_sender.domain.pacing import GuidPacer, Limits
from tests.unit.dispatching import EPS, BeforeCall, Recorder, cmd, dispatcher, ring, run_virtual, stop, until

RNG = random.Random(11)
MINUTE_START = datetime(2026, 11, 29, 4, 0, tzinfo=UTC).timestamp()  # 12:00 in Asia/Shanghai


# -- the quiet a rate limit asks for -------------------------------------------------------

def test_a_rate_limit_asking_for_quiet_holds_both_lanes_of_the_guid_until_it_is_over() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0)
    held, slowed = GuidPacer(), GuidPacer()
    held.slowed("batch", limits, 100.0, RNG, quiet_s=60.0)
    slowed.slowed("batch", limits, 100.0, RNG)
    for lane in ("online", "batch"):
        assert held.ready_at(lane, limits, 100.0, MINUTE_START) == 160.0, f"the {lane} lane waits out the quiet"
        assert slowed.ready_at(lane, limits, 100.0, MINUTE_START) == 102.0, "without one: the slowed pace only"


def test_a_shorter_quiet_asked_later_never_cuts_a_longer_one_short() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0)
    p = GuidPacer()
    p.slowed("online", limits, 100.0, RNG, quiet_s=60.0)
    p.slowed("online", limits, 101.0, RNG, quiet_s=5.0)  # a media poll's rate limit, say
    assert p.ready_at("online", limits, 101.0, MINUTE_START) == 160.0


def test_after_its_quiet_the_guid_goes_on_at_the_slowed_pace() -> None:
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0, rate_limited_penalty=4.0,
                    penalty_decay=0.5)
    p = GuidPacer()
    p.slowed("batch", limits, 100.0, RNG, quiet_s=10.0)
    p.sent("batch", limits, 110.0, MINUTE_START, RNG)  # ×4, one clean send: ×2
    assert p.ready_at("batch", limits, 110.0, MINUTE_START) == 112.0


class _LimitedOnce(Recorder):
    """The gateway answers the first call HTTP 429 with ``Retry-After: 5`` — the item's send,
    or (``upload``) the upload of its media; the rest are sent."""

    def __init__(self, upload: bool) -> None:
        super().__init__()
        self.upload = upload
        self.limited_at: float | None = None

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        done = await super().execute(cmd, before_call, spare_s)
        if self.limited_at is None and done.outcome == "confirmed":
            self.limited_at = self.clock()
            limited = SendError(FailureClass.RATE_LIMITED, None, "HTTP 429 from gateway",
                                retry_after=timedelta(seconds=5))
            if self.upload:  # the item waits for its media, as core's _media_wait answers
                return Executed("media_waiting", False, limited, answered_mono=self.limited_at, stepped=True)
            return Executed("rate_limited", True, limited, answered_mono=self.limited_at)
        return done


@pytest.mark.parametrize("upload", [False, True], ids=["send", "media upload"])
def test_a_rate_limit_with_retry_after_holds_the_guids_other_items_online_and_batch_that_long(upload: bool) -> None:
    """Not only the item waits: the guid's next call, whatever its lane, goes no sooner than
    the gateway asked (on a slowed pace of 0.2 s, the next would go 0.2 s after the 429)."""
    async def scenario() -> tuple[float, list[tuple[str, float]]]:
        rec = _LimitedOnce(upload)
        d, _, _ = dispatcher(Limits(min_interval_s=0.1, jitter_s=0.0, online_reserve=0.0), executor=rec)
        ring(d, rec.store, cmd("g", 0))
        await until(lambda: rec.limited_at is not None)
        ring(d, rec.store, cmd("g", 1))  # a campaign item
        ring(d, rec.store, cmd("g", 2, priority=0))  # a takeover prompt
        await until(lambda: len(rec.sent) == 3)
        stop(d)
        assert rec.limited_at is not None
        return rec.limited_at, [(n, at) for _, n, at in rec.sent[1:]]

    limited_at, after = run_virtual(scenario())
    assert [n for n, _ in after] == ["g-2", "g-1"], "the online item first, once the quiet is over"
    first = after[0][1] - limited_at
    assert abs(first - 5.0) <= EPS, f"the guid's next call came {first:.3f} s after the 429, not 5 s"
    gap = after[1][1] - after[0][1]
    assert abs(gap - 0.1 * 2 * 0.9) <= EPS, f"then at the slowed pace (×2, one clean send: ×1.8), not {gap:.3f} s"


# -- window caps of one ----------------------------------------------------------------------

def sends_over(limits: Limits, lane: Lane, n: int, start: float) -> list[float]:
    """The wall times of a guid's first ``n`` sends in ``lane``, each as soon as it may go
    (monotonic and wall time moving together from ``start``); fails if one would never go."""
    p, mono, wall = GuidPacer(), 0.0, start
    at: list[float] = []
    for _ in range(n):
        wait = p.ready_at(lane, limits, mono, wall) - mono
        assert wait < 2 * 86_400, f"send {len(at) + 1} would wait {wait} s: the guid is wedged"
        mono, wall = mono + max(0.0, wait), wall + max(0.0, wait)
        p.sent(lane, limits, mono, wall, RNG)
        at.append(wall)
    return at


@pytest.mark.parametrize("reserve", [0.2, 0.5, 0.9])
@pytest.mark.parametrize(("window", "size"), [("minute", 60), ("hour", 3600), ("day", 86_400)])
def test_a_window_cap_of_one_lets_one_batch_send_through_each_window_never_none(
        window: str, size: int, reserve: float) -> None:
    """``PER_MINUTE=1`` (or a guid's ``per_day=1`` set over the API) with the default online
    reserve: the batch share rounded down to 0 held every batch item after the first for
    ever. Each window lets one through, the first one too."""
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, online_reserve=reserve, **{f"per_{window}": 1})
    start = MINUTE_START + 12 * 3600  # midnight in Asia/Shanghai: a window of each size starts
    assert sends_over(limits, "batch", 3, start) == [start, start + size, start + 2 * size]


def test_a_batch_share_that_rounds_to_zero_is_one_and_online_work_takes_what_is_left() -> None:
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, online_reserve=0.8, per_minute=4)  # 4 × 0.2 rounds to 0
    assert [w[3] for w in limits.windows()] == [1]
    p = GuidPacer()
    p.sent("batch", limits, 0.0, MINUTE_START, RNG)
    assert p.ready_at("batch", limits, 0.0, MINUTE_START) == pytest.approx(60.0), "its share used"
    assert p.ready_at("online", limits, 0.0, MINUTE_START) <= 0.0, "the reserve has three left"


def test_with_a_cap_of_one_used_by_batch_work_an_online_send_waits_for_the_next_window() -> None:
    limits = Limits(min_interval_s=0.0, jitter_s=0.0, per_minute=1)
    p = GuidPacer()
    p.sent("batch", limits, 0.0, MINUTE_START, RNG)
    assert p.ready_at("online", limits, 0.0, MINUTE_START) == pytest.approx(60.0)


@pytest.mark.parametrize(("cap", "reserve", "share"), [(1, 0.2, 1), (1, 0.0, 1), (2, 0.5, 1), (4, 0.8, 1),
                                                       (10, 0.2, 8), (3, 0.0, 3), (100, 0.95, 5)])
def test_the_batch_share_of_a_cap_is_the_cap_less_the_reserve_rounded_down_never_under_one(
        cap: int, reserve: float, share: int) -> None:
    assert Pacing(online_reserve=reserve).batch_share(cap) == share


def test_a_guid_with_a_cap_of_one_and_nothing_sent_is_not_held_and_its_job_has_an_end() -> None:
    """The views of the Control API, the console and the stall count read the same share: a
    guid capped at one a day is held only once it has sent, and a job on it takes a day an item."""
    limits = parse_limits({"per_day": 1}, "g-1")  # as the Control API stores a guid's limit
    pacing = effective_pacing(None, limits)
    day_start = MINUTE_START + 12 * 3600
    none_sent = {"day": [0, 0, day_start + 86_400]}
    assert pacing.capped_for(day_start + 60, none_sent) == 0.0
    assert pacing.capped_for(day_start + 60, {"day": [0, 1, day_start + 86_400]}) == pytest.approx(86_400 - 60)
    assert pacing.send_seconds(5, priority=3) == 4 * 86_400

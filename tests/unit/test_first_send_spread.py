"""Batch work reaching a rested guid (no batch send within its batch interval) starts at a
random point of one interval: guids that get work together — a sender taking them, a campaign
starting on guids it already holds — start spread over the interval, not in one burst. A guid
that sent recently (itself or its previous owner) keeps its spacing, and a guid in the middle
of a campaign is never held beyond it."""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from pacer_sender.domain.pacing import Limits
from pacer_sender.ports import GuidLease
from tests.unit.dispatching import EPS, cmd, dispatcher, now, ring, run_virtual, stop, until

INTERVAL_S = 1.0
LIMITS = Limits(min_interval_s=INTERVAL_S, jitter_s=0.0, online_reserve=0.0)
GUIDS = [f"g{i}" for i in range(60)]


class LastSends:
    """A lease store whose guids last sent the given number of seconds ago (None: never)."""

    def __init__(self, ago: Mapping[str, float | None]) -> None:
        self.ago = ago

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        wall = datetime.now(UTC)
        return [GuidLease(g, 1, None if self.ago[g] is None else wall - timedelta(seconds=self.ago[g] or 0), False, wall)
                for g in guids]

    async def renew(self, held: Mapping[str, int], owner: str) -> dict[str, float | None]:
        return dict.fromkeys(held)

    async def release(self, guids: Sequence[str], owner: str) -> int:
        return len(guids)


def _campaigns(spread: float, rounds: int = 1, ago: float | None = None) -> list[list[float]]:
    """One campaign after another (the next once every guid is rested again), one item on each
    guid; each campaign's first sends, in seconds after it started. On virtual time: a send
    comes exactly when the guid's pacing lets it."""
    async def scenario() -> list[list[float]]:
        d, rec, _ = dispatcher(LIMITS, store=LastSends(dict.fromkeys(GUIDS, ago)),  # type: ignore[arg-type]
                               first_send_spread=spread, rng=random.Random(7))
        out = []
        for r in range(rounds):
            if rec.sent:
                # Every guid rested: an interval since its last send (of virtual time: no real wait).
                await until(lambda: all(d.crew.clock() - t >= INTERVAL_S for _, _, t in rec.sent))
                assert all(d.crew.leases.holds(g) for g in GUIDS), "the guids' leases are still held"
            start, before = now(), len(rec.sent)
            want = before + len(GUIDS)
            for g in GUIDS:
                ring(d, rec.store, cmd(g, r))
            await until(lambda n=want: len(rec.sent) == n)
            out.append(sorted(t - start for _, _, t in rec.sent[before:]))
        stop(d)
        return out

    return run_virtual(scenario())


def test_rested_guids_a_sender_takes_together_start_spread_over_one_interval() -> None:
    [firsts] = _campaigns(1.0)
    assert firsts[-1] - firsts[0] >= 0.5 * INTERVAL_S, f"first sends within {firsts[-1] - firsts[0]:.2f} s"
    assert firsts[0] >= -EPS and firsts[-1] <= INTERVAL_S + EPS, \
        f"first sends at {firsts[0]:.3f}–{firsts[-1]:.3f} s, not within one interval"


def test_a_campaign_starting_on_rested_guids_the_sender_holds_is_spread_too() -> None:
    _, second = _campaigns(1.0, rounds=2)
    assert second[-1] - second[0] >= 0.5 * INTERVAL_S, f"second campaign within {second[-1] - second[0]:.2f} s"
    assert second[0] >= -EPS and second[-1] <= INTERVAL_S + EPS, \
        f"first sends at {second[0]:.3f}–{second[-1]:.3f} s, not within one interval"


def test_with_no_spread_every_rested_guid_sends_at_once() -> None:
    for firsts in _campaigns(0.0, rounds=2):
        assert all(abs(t) <= EPS for t in firsts), f"sends at {firsts[0]:.3f}–{firsts[-1]:.3f} s with no spread"


def test_a_part_of_the_interval_bounds_the_hold() -> None:
    [firsts] = _campaigns(0.3)
    # Held by at most 0.3 of the interval, against up to the whole interval without the bound.
    assert firsts[0] >= -EPS and firsts[-1] <= 0.3 * INTERVAL_S + EPS, f"first sends until {firsts[-1]:.3f} s"
    assert firsts[-1] - firsts[0] >= 0.15 * INTERVAL_S, f"first sends within {firsts[-1] - firsts[0]:.3f} s"


def test_a_guid_taken_from_an_owner_that_sent_within_its_interval_keeps_that_spacing() -> None:
    [firsts] = _campaigns(1.0, ago=0.6)
    # 0.4 s: the previous owner's send 0.6 s ago, at a 1 s interval. Spread as rested guids
    # they would start from 0 s; held a whole interval from the takeover, at 1 s.
    assert all(abs(t - 0.4) <= EPS for t in firsts), f"first sends at {firsts[0]:.3f}–{firsts[-1]:.3f} s"


def test_a_guid_in_the_middle_of_a_campaign_is_held_no_longer_than_its_interval() -> None:
    jitter_s = 0.05  # each gap a little over the interval: at each send the guid counts as rested

    async def scenario() -> list[float]:
        limits = Limits(min_interval_s=0.3, jitter_s=jitter_s, online_reserve=0.0)
        d, rec, _ = dispatcher(limits, cap=2, first_send_spread=1.0, rng=random.Random(7))
        for n in range(6):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 6)
        stop(d)
        at = [t for _, _, t in rec.sent]
        return [b - a for a, b in itertools.pairwise(at)]

    gaps = run_virtual(scenario())
    # The window (two items) empties and is read again between sends: that is not a new start.
    assert all(0.3 - EPS <= g <= 0.3 + jitter_s + EPS for g in gaps), f"gaps {gaps}"


def test_guids_taken_overdue_from_an_owner_go_out_within_how_long_they_waited() -> None:
    [firsts] = _campaigns(1.0, ago=1.2)
    # The previous owner's sends 1.2 s ago, at a 1 s interval: 0.2 s overdue. Spread over their
    # 0.2 s wait, not over a whole interval (until 1 s), and none held beyond it.
    assert firsts[0] >= -EPS and firsts[-1] <= 0.2 + EPS, \
        f"first sends until {firsts[-1]:.3f} s after a 0.2 s wait"
    assert firsts[-1] - firsts[0] >= 0.1, f"first sends within {firsts[-1] - firsts[0]:.3f} s: not spread"

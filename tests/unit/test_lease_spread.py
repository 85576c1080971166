"""A guid a sender takes rested starts its campaign at a random point of one interval; a guid
taken from an owner that sent recently keeps that owner's spacing instead."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from pacer_sender.domain.pacing import GuidPacer, Limits
from pacer_sender.leases import GuidLeases
from pacer_sender.leasing import LeaseKeeper
from pacer_sender.ports import GuidLease

LIMITS = Limits(min_interval_s=10.0, jitter_s=0.0, online_reserve=0.0)


class LastSends:
    """A lease store whose guids last sent the given number of seconds ago (None: never)."""

    def __init__(self, ago: Mapping[str, float | None]) -> None:
        self.ago = ago

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        now = datetime.now(UTC)
        return [GuidLease(g, 1, None if self.ago[g] is None else now - timedelta(seconds=self.ago[g] or 0), False, now)
                for g in guids]

    async def renew(self, held: Mapping[str, int], owner: str) -> set[str]:
        return set(held)

    async def release(self, guids: Sequence[str], owner: str) -> int:
        return len(guids)


def _ready_after_take(ago: Mapping[str, float | None], spread: float, seed: int = 1) -> dict[str, float]:
    """Each guid's first campaign send, in seconds after its lease was taken."""

    async def run() -> dict[str, float]:
        keeper = LeaseKeeper(GuidLeases(LastSends(ago), "s1", 30.0), lambda: 1000.0, spread=spread,
                             rng=random.Random(seed))
        out = {}
        for guid in ago:
            pacer = GuidPacer()
            assert await keeper.take(guid, pacer, LIMITS)
            out[guid] = pacer.ready_at("batch", LIMITS, 1000.0, 0.0) - 1000.0
        return out

    return asyncio.run(run())


def test_rested_guids_taken_together_start_spread_over_one_interval() -> None:
    ready = _ready_after_take({f"g{i}": None for i in range(200)} | {f"idle{i}": 3600.0 for i in range(200)}, 1.0)
    waits = sorted(ready.values())
    assert waits[0] >= 0 and waits[-1] <= LIMITS.batch_interval_s
    # spread over the interval, not in one burst: every tenth of it has some of the first sends
    tenths = {int(w / LIMITS.batch_interval_s * 10) for w in waits}
    assert tenths >= set(range(10))


def test_a_guid_that_sent_within_its_interval_keeps_that_spacing_and_is_not_spread() -> None:
    ready = _ready_after_take({f"recent{i}": 4.0 for i in range(50)}, 1.0)
    # 6 s: the previous owner's send 4 s ago, at a 10 s interval; none held for longer
    assert all(abs(w - 6.0) < 0.05 for w in ready.values())


def test_with_no_spread_every_rested_guid_may_send_at_once() -> None:
    ready = _ready_after_take({f"g{i}": None for i in range(50)}, 0.0)
    assert all(w <= 0 for w in ready.values())


def test_a_part_of_the_interval_bounds_the_hold() -> None:
    ready = _ready_after_take({f"g{i}": None for i in range(200)}, 0.3)
    assert max(ready.values()) <= 0.3 * LIMITS.batch_interval_s
    assert max(ready.values()) > 0.2 * LIMITS.batch_interval_s

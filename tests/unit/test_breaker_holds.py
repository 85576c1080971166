"""A breaker that trips pauses its job or guid even when the first try to pause it fails."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from pacer_common.domain.events import ItemEvent
from pacer_common.domain.status import ItemStatus as S
from pacer_reconciler.core import Reconciler
from pacer_reconciler.domain.breakers import BreakerPolicy, Breakers
from pacer_reconciler.ports import Position, Unreadable
from tests.unit.reconciler_fakes import Log, Publisher


def _failed(k: int) -> ItemEvent:
    return ItemEvent(seq=k, type="ItemFailed", item_id=f"i{k}", job_id="job-1", shard_id=1, guid="g1", version=3,
                     from_status=S.SUBMITTED, to_status=S.FAILED, occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
                     payload={"error_class": "bad_params"})


class Holds:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[tuple[str, str]] = []

    async def hold(self, scope: str, key: str, reason: str, actor: str) -> bool:
        self.calls.append((scope, key))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("database unavailable")
        return True


def test_a_trip_whose_hold_failed_is_held_next_round_and_the_rest_after_it() -> None:
    rows: list[tuple[Position, ItemEvent | Unreadable]] = [(Position("1", k), _failed(k)) for k in range(1, 6)]
    log, holds = Log(rows, set()), Holds(failures=1)
    rec = Reconciler(log, None, Publisher(set()), holds=holds,  # type: ignore[arg-type]  # events only
                     breakers=Breakers(BreakerPolicy(consecutive=5, min_samples=100)))

    async def rounds() -> tuple[int, int]:
        return await rec.tail_once(), await rec.tail_once()

    first, second = asyncio.run(rounds())
    assert (first, second) == (5, 0)  # the batch is committed once; the next round reads nothing
    assert len(log.applied) == 5
    # Five failures in a row trip the job's and the guid's breakers; the job's hold failed once
    # and was made next round, then the guid's.
    assert holds.calls == [("job", "job-1"), ("job", "job-1"), ("guid", "g1")]
    assert [(t.scope, t.key) for t in rec.tripped] == [("job", "job-1"), ("guid", "g1")]

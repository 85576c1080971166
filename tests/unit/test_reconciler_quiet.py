"""A segment with nothing to read moves its cursor past the finished transactions, now and
then, not at every empty round."""

from __future__ import annotations

import asyncio

from pacer_reconciler.core import Reconciler
from pacer_reconciler.ports import LAST_SEQ, Position
from tests.unit.reconciler_fakes import Log, Publisher


class QuietLog(Log):
    def __init__(self) -> None:
        super().__init__([], set())
        self.asked: list[Position] = []
        self.horizon = 100

    async def quiet_position(self, after: Position) -> Position | None:
        self.asked.append(after)
        return Position(str(self.horizon), LAST_SEQ) if int(after.xid) < self.horizon else None


def test_a_segment_with_nothing_to_read_moves_its_cursor_at_most_every_quiet_interval() -> None:
    log, now = QuietLog(), [0.0]
    rec = Reconciler(log, None, Publisher(set()), quiet_every_s=60.0, clock=lambda: now[0])  # type: ignore[arg-type]  # no sweeps here

    async def scenario() -> None:
        assert await rec.tail_once() == 0
        assert log.cursor == Position("100", LAST_SEQ)
        log.horizon = 200
        now[0] = 59.0
        assert await rec.tail_once() == 0
        assert log.cursor == Position("100", LAST_SEQ), "not again within the interval"
        now[0] = 60.0
        assert await rec.tail_once() == 0

    asyncio.run(scenario())
    assert log.cursor == Position("200", LAST_SEQ)
    assert log.asked == [Position("0", 0), Position("100", LAST_SEQ)]

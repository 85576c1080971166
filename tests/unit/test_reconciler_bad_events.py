"""An event or command the reconciler cannot handle is skipped with a reason; the tail goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.events import ItemEvent
from pacer_common.domain.status import ItemStatus as S
from pacer_reconciler.core import Reconciler
from pacer_reconciler.ports import Position, Rejected, Unreadable


def _event(k: int) -> ItemEvent:
    return ItemEvent(seq=k, type="ItemRequeued", item_id=f"i{k}", job_id="j", shard_id=1, guid="g", version=2,
                     from_status=S.WAITING_RETRY, to_status=S.PENDING, occurred_at=datetime(2026, 1, 1, tzinfo=UTC))


class Log:
    def __init__(self, rows: list[tuple[Position, ItemEvent | Unreadable]], bad_commands: set[str]) -> None:
        self.rows = rows
        self.bad_commands = bad_commands
        self.cursor = Position("0", 0)
        self.applied: list[ItemEvent] = []

    async def position(self) -> Position:
        return self.cursor

    async def read(self, after: Position, limit: int) -> list[tuple[Position, ItemEvent | Unreadable]]:
        return [r for r in self.rows if r[0].seq > after.seq][:limit]

    async def items_for_dispatch(self, item_ids: Sequence[str]) -> list[ItemCommand]:
        if self.bad_commands & set(item_ids):
            raise ValueError("1 validation error for ItemCommand")  # as pydantic's ValidationError is
        return [ItemCommand.model_validate({"item_id": i, "job_id": "j", "shard_id": 1, "guid": "g", "to_id": "t",
                                            "content": "c", "idem_key": f"k-{i}", "priority": 5,
                                            "kind": "campaign", "expire_at": datetime(2027, 1, 1, tzinfo=UTC)})
                for i in item_ids]

    async def commit_batch(self, events: Sequence[ItemEvent], start: Position, to: Position) -> None:
        assert start == self.cursor
        self.applied += events
        self.cursor = to


class Publisher:
    def __init__(self, too_large: set[str]) -> None:
        self.too_large = too_large
        self.commands: list[str] = []

    def publish(self, events: Sequence[ItemEvent], commands: Sequence[ItemCommand]) -> list[Rejected]:
        self.commands += [c.item_id for c in commands if c.item_id not in self.too_large]
        return [Rejected(c.item_id, "too large") for c in commands if c.item_id in self.too_large]


@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(st.sampled_from(["ok", "unreadable", "bad_command", "too_large"]), min_size=1, max_size=30),
       batch=st.integers(1, 7))
def test_bad_rows_are_skipped_and_counted_and_every_good_one_goes_through(kinds: list[str], batch: int) -> None:
    rows: list[tuple[Position, ItemEvent | Unreadable]] = [
        (Position("1", k + 1), Unreadable(k + 1, f"i{k + 1}", "unknown event type") if kind == "unreadable"
         else _event(k + 1)) for k, kind in enumerate(kinds)]
    ids = {kind: {f"i{k + 1}" for k, x in enumerate(kinds) if x == kind} for kind in set(kinds)}
    log = Log(rows, ids.get("bad_command", set()))
    pub = Publisher(ids.get("too_large", set()))
    rec = Reconciler(log, None, pub, batch=batch)  # type: ignore[arg-type]

    async def tail_all() -> None:
        while await rec.tail_once():
            pass

    asyncio.run(tail_all())
    assert log.cursor == rows[-1][0], "the cursor passes every row, bad ones included"
    assert sorted(e.item_id for e in log.applied) == sorted(f"i{k + 1}" for k, x in enumerate(kinds) if x != "unreadable")
    assert sorted(pub.commands) == sorted(ids.get("ok", set()))
    assert rec.bad == {reason: len(ids[kind]) for kind, reason in (
        ("unreadable", "unreadable_event"), ("bad_command", "bad_command"), ("too_large", "unpublishable"))
        if ids.get(kind)}

"""An in-memory event log and publisher for the reconciler's tail (``Reconciler.tail_once``):
rows read after a cursor, commands built for re-queued items (or refused, as pydantic
refuses a bad value), each batch applied at the cursor it was read from."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.events import ItemEvent
from pacer_reconciler.ports import Position, Rejected, Unreadable


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

    async def quiet_position(self, after: Position) -> Position | None:
        return None

    async def commit_batch(self, events: Sequence[ItemEvent], start: Position, to: Position) -> None:
        assert start == self.cursor
        self.applied += events
        self.cursor = to


class Publisher:
    def __init__(self, too_large: set[str]) -> None:
        self.too_large = too_large
        self.commands: list[str] = []

    async def publish(self, events: Sequence[ItemEvent], commands: Sequence[ItemCommand]) -> list[Rejected]:
        self.commands += [c.item_id for c in commands if c.item_id not in self.too_large]
        return [Rejected(c.item_id, "too large") for c in commands if c.item_id in self.too_large]

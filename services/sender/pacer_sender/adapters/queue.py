"""Postgres as the record of every guid's queue: a guid's next ready items, and the sweep
for guids with work whatever happened to their Kafka commands."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pacer_common.db.errors import with_retry
from pacer_common.db.transitions import Transition
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.status import ItemStatus as S
from pacer_sender.adapters.postgres import _sql, move, storable
from pacer_sender.ports import Ready, Waiting


class PostgresGuidQueue:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def next_ready(self, guid: str, exclude: Sequence[str], limit: int) -> Ready:
        async def work() -> Ready:
            async with self.pool.connection() as conn:
                rows: list[Any] = await (await conn.execute(_sql("next_ready"), {  # type: ignore[arg-type]
                    "guid": guid, "exclude": list(exclude), "limit": limit})).fetchall()
                due = await (await conn.execute(_sql("next_due"), {"guid": guid})).fetchone()  # type: ignore[arg-type]
            return Ready([ItemCommand.model_validate(r) for r in rows], due["due_in_s"] if due else None)

        return await with_retry(work)

    async def waiting_guids(self, horizon_s: float, grace_s: float) -> list[Waiting]:
        async def work() -> list[Waiting]:
            async with self.pool.connection() as conn:
                rows: list[Any] = await (await conn.execute(_sql("waiting_guids"), {  # type: ignore[arg-type]
                    "horizon": timedelta(seconds=horizon_s), "grace": timedelta(seconds=grace_s)})).fetchall()
            return [Waiting(r["guid"], bool(r["overdue"])) for r in rows]

        return await with_retry(work)

    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool:
        """pending → failed with ``reason``; an item claimed or submitted meanwhile is not moved."""
        text = storable(reason)
        t = Transition("ItemFailed", S.FAILED, frozenset({S.PENDING}), error_class=error_class, error=text,
                       payload={"error_class": error_class, "error": text})
        return await move(self.pool, t, cmd)

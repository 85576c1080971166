"""Guids by backlog or by wait, from Postgres (``db/queries/guid_backlogs.sql``), open jobs by
items left (``job_progress_top.sql``), and how long committed events have waited for the tails
(``events_held_back.sql``)."""

from __future__ import annotations

from typing import Any

from pacer_common.db.errors import with_retry
from pacer_common.db.pool import Pool
from pacer_common.db.sql import loader, query
from pacer_common.domain.status import TERMINAL

_sql = loader("pacer_reconciler.adapters.sql")
_FINAL = sorted(s.value for s in TERMINAL)  # a job's items that are done


class PostgresBacklogs:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def top(self, sort: str, limit: int) -> list[dict[str, Any]]:
        async def work() -> list[dict[str, Any]]:
            async with self.pool.connection() as conn:
                return await (await conn.execute(query("guid_backlogs"), {
                    "sort": sort, "limit": limit})).fetchall()

        return await with_retry(work)

    async def jobs(self, limit: int) -> list[dict[str, Any]]:
        async def work() -> list[dict[str, Any]]:
            async with self.pool.connection() as conn:
                return await (await conn.execute(_sql("job_progress_top"), {
                    "final": _FINAL, "limit": limit})).fetchall()

        return await with_retry(work)

    async def held_back_s(self) -> float:
        async def work() -> float:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(_sql("events_held_back"))).fetchone()
            return float(row["held_back_s"]) if row else 0.0

        return await with_retry(work)

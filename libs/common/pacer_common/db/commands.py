"""Item commands read back from the items table, for re-dispatch."""

from __future__ import annotations

from collections.abc import Sequence

from pacer_common.db.errors import with_retry
from pacer_common.db.pool import Pool
from pacer_common.db.sql import query
from pacer_common.domain.commands import ItemCommand


async def pending_commands(pool: Pool, item_ids: Sequence[str]) -> list[ItemCommand]:
    """The commands of those of ``item_ids`` still pending, as they were published."""

    async def work() -> list[ItemCommand]:
        async with pool.connection() as conn:
            rows = await (await conn.execute(query("pending_commands"), {"ids": list(item_ids)})).fetchall()
        return [ItemCommand.model_validate(r) for r in rows]

    return await with_retry(work)

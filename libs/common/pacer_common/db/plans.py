"""Statements that must run on one plan, made once per connection.

A hot statement planned for the values at hand is planned wrong exactly when it matters: the
rows it reads are newer than the statistics (the tail of the event log, a guid loaded since
the last ANALYZE), the planner estimates one row, and any index looks as good as the one
the statement was written for. Reading a segment of the log, it then took the log's
position index and filtered out the other segments' events: sixteen rows read for every one
returned at 16 segments, and the statement planned again at every call (docs/performance.md,
"Plans made once").

Run through :func:`fetch_prepared` with ``plan_cache_mode = force_generic_plan`` among its
settings, a statement is prepared at its first execution on a connection, its plan made
from the statement alone (the one whose every read is bounded), and kept until the
connection closes or a table it reads changes shape or statistics. The settings are
``set_config(…, true)``: they end with the statement's transaction, so nothing else run on
the pooled connection sees them. BEGIN, the settings, the statement and COMMIT go to the
server as one pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any, LiteralString

from psycopg import AsyncConnection, AsyncPipeline

GENERIC_PLAN: tuple[LiteralString, ...] = ("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)",)


async def fetch_prepared(conn: AsyncConnection[Any], settings: Sequence[LiteralString], sql: LiteralString,
                         params: Any = None) -> list[Any]:
    """The rows of ``sql``, prepared, in a transaction of its own on the idle (autocommit)
    ``conn`` that runs the ``settings`` statements first."""
    batched = conn.pipeline() if AsyncPipeline.is_supported() else nullcontext()  # libpq < 14: one by one
    async with batched, conn.transaction():
        for setting in settings:
            await conn.execute(setting)
        cur = await conn.execute(sql, params, prepare=True)
    return await cur.fetchall()

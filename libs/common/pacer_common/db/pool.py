"""The psycopg 3 async connection pool, built by a service's composition root."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, LiteralString, TypeAlias

from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

Pool: TypeAlias = AsyncConnectionPool[AsyncConnection[DictRow]]
"""Every service's pool: its connections return rows as dicts (``row["name"]``)."""


async def open_pool(url: str, *, min_size: int = 2, max_size: int = 10, name: str = "pacer",
                    options: str | None = None) -> Pool:
    """Open a pool of autocommit connections: a statement is its own transaction unless a
    ``conn.transaction()`` block groups several. Broken connections are discarded on return.
    ``options`` are server settings for every connection (``-c name=value …``)."""
    pool = new_pool(url, min_size=min_size, max_size=max_size, name=name, options=options)
    await pool.open(wait=True, timeout=30)
    return pool


def new_pool(url: str, *, min_size: int = 2, max_size: int = 10, name: str = "pacer",
             options: str | None = None) -> Pool:
    """The same pool, not opened yet: for an app that opens it on the event loop that serves it."""
    extra = {"options": options} if options else {}
    return AsyncConnectionPool(
        url,
        connection_class=AsyncConnection[DictRow],
        min_size=min_size,
        max_size=max_size,
        open=False,
        name=name,
        kwargs={"autocommit": True, "row_factory": dict_row, "application_name": name, **extra},
        reconnect_timeout=300,
    )


async def one(conn: AsyncConnection[DictRow], sql: LiteralString, params: Mapping[str, Any] | None = None) -> DictRow:
    """The one row a statement returns (an aggregate, a function call): its absence is a bug."""
    row = await (await conn.execute(sql, params)).fetchone()
    if row is None:
        raise LookupError(f"no row from: {sql.strip().splitlines()[0]}")
    return row

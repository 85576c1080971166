"""The psycopg 3 async connection pool, built by a service's composition root."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool


class Pool(AsyncConnectionPool[AsyncConnection[DictRow]]):
    """Every service's pool: its connections return rows as dicts (``row["name"]``).

    A connection whose use was interrupted (its task cancelled, the process told to stop)
    never serves again: psycopg's pool takes back an IDLE connection as it is, and one
    interrupted inside a pipeline (``synchronous_transaction``) comes back IDLE but still in
    pipeline mode — from then on each statement sent on it is answered with the previous
    statement's result (a batch of item steps read another batch's rows; a call returned no
    row). An interrupted use is a state nobody checked, whatever it was doing: such a
    connection is closed on the way back, and the pool opens another in its place.
    """

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[AsyncConnection[DictRow]]:
        async with super().connection(timeout) as conn:
            try:
                yield conn
            except BaseException as exc:
                if not isinstance(exc, Exception):
                    conn.pgconn.finish()  # closed now: the pool discards it instead of serving it again
                raise


async def open_pool(url: str, *, min_size: int = 2, max_size: int = 10, name: str = "pacer",
                    options: str | None = None, timeout: float = 30.0) -> Pool:
    """Open a pool of autocommit connections: a statement is its own transaction unless a
    ``conn.transaction()`` block groups several. Broken connections are discarded on return.
    ``options`` are server settings for every connection (``-c name=value …``); ``timeout``
    is how long ``connection()`` waits for one when all are in use (then ``PoolTimeout``)."""
    pool = new_pool(url, min_size=min_size, max_size=max_size, name=name, options=options, timeout=timeout)
    await pool.open(wait=True, timeout=30)
    return pool


def new_pool(url: str, *, min_size: int = 2, max_size: int = 10, name: str = "pacer",
             options: str | None = None, timeout: float = 30.0) -> Pool:
    """The same pool, not opened yet: for an app that opens it on the event loop that serves it.
    ``options`` come after any the URL gives (``?options=…``) or, without those, ``PGOPTIONS``:
    they would otherwise replace them."""
    given = (conninfo_to_dict(url).get("options") or os.environ.get("PGOPTIONS")) if options else None
    extra = {"options": f"{given} {options}" if given else options} if options else {}
    return Pool(
        url,
        connection_class=AsyncConnection[DictRow],
        min_size=min_size,
        max_size=max_size,
        open=False,
        name=name,
        kwargs={"autocommit": True, "row_factory": dict_row, "application_name": name, **extra},
        timeout=timeout,
        reconnect_timeout=300,
    )


async def one(conn: AsyncConnection[DictRow], sql: LiteralString, params: Mapping[str, Any] | None = None) -> DictRow:
    """The one row a statement returns (an aggregate, a function call): its absence is a bug."""
    row = await (await conn.execute(sql, params)).fetchone()
    if row is None:
        raise LookupError(f"no row from: {sql.strip().splitlines()[0]}")
    return row

"""Transactions whose commit is synchronous whatever the server's or database's default.

Exactly-once rests on a few commits being durable before anything leaves the process: the
claim with ``submitted`` (written before the gateway call), the outcome, the guid lease.
With ``synchronous_commit = off`` (a server, database or role default an operator may set
for throughput) Postgres acknowledges a commit before its WAL is flushed; a crash then
loses a ``submitted`` the sender already acted on, and the item is sent again.

``SET LOCAL`` inside the transaction is the one setting that covers the commit itself: a
function's ``SET`` clause is undone when the function returns, before the commit, and a
session-level ``SET`` does not survive a transaction-pooling proxy (PgBouncer) that hands
the next transaction another server connection. Pipeline mode sends BEGIN, the setting, the
statements and COMMIT together, so this costs no extra round trip.

The sender's batched item steps, its hottest writes, skip even that: each is one call of a
function whose first statement is ``set_config('synchronous_commit', 'on', true)`` (the
same as ``SET LOCAL``; it outlives the function, which leaves only its own ``SET`` clause's
settings behind), run as a single autocommit statement by :func:`fetch_durable_call`. Its
transaction is the statement's, so the setting holds at its commit, and the client sends one
statement instead of a pipeline of four (under load the pipeline cost the sender a third of
its throughput; docs/performance.md, "One statement per batched step").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from typing import Any, LiteralString

from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline

SYNCHRONOUS = "SET LOCAL synchronous_commit = on"


@asynccontextmanager
async def synchronous_transaction(conn: AsyncConnection[Any], *,
                                  pipeline: bool = True) -> AsyncIterator[AsyncConnection[Any]]:
    """A transaction on the idle (autocommit) ``conn`` that commits synchronously.

    ``pipeline=False`` for a transaction that uses COPY, which pipeline mode does not allow."""
    batched = conn.pipeline() if pipeline and AsyncPipeline.is_supported() else nullcontext()  # libpq < 14: one by one
    async with batched, conn.transaction():
        await conn.execute(SYNCHRONOUS)
        yield conn


async def fetch_durably(conn: AsyncConnection[Any], sql: LiteralString, params: Any = None) -> list[Any]:
    """Run ``sql`` as its own synchronously committed transaction; return its rows."""
    async with synchronous_transaction(conn):
        cur = await conn.execute(sql, params)
    return await _all(cur)


async def fetch_durable_call(conn: AsyncConnection[Any], sql: LiteralString, params: Any = None) -> list[Any]:
    """Run ``sql`` on the idle (autocommit) ``conn`` as one statement, its own transaction;
    return its rows. Only for a call of a function that makes its commit synchronous itself
    (``set_config('synchronous_commit', 'on', true)`` before it writes)."""
    return await _all(await conn.execute(sql, params))


async def _all(cur: AsyncCursor[Any]) -> list[Any]:
    return await cur.fetchall() if cur.description is not None else []

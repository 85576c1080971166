"""Two bulk retries over the items of two ticket chains, in opposite shard orders, do not
deadlock: each takes its batch's coalescing locks first, in one order, before any item.

Each retry is stopped just after its first coalescing lock by an item row another session
holds (taken item by item, the first retry would then hold chain 1's lock and the second
chain 2's, each about to want the other's)."""

from __future__ import annotations

import asyncio

import psycopg

from tests.integration.helpers import eventually, seed_job, waiting_for_locks


def test_bulk_retries_over_two_ticket_chains_in_opposite_orders_both_go_through(database_url: str) -> None:
    url = database_url
    # Chain 1 is two jobs of one business id (one version), chain 2 one job; shards made in
    # the order g1 (chain 1) < g2, g3 (chain 2) < g4 (chain 1).
    one, one_shards, (x,) = seed_job(url, {"g1": 1})
    two, two_shards, (y2, y) = seed_job(url, {"g2": 1, "g3": 1})
    three, three_shards, (x2,) = seed_job(url, {"g4": 1})
    with psycopg.connect(url) as conn:
        for job, key in ((one, "ticket:1"), (two, "ticket:2"), (three, "ticket:1")):
            conn.execute("UPDATE jobs SET coalesce_key = %s, coalesce_version = 1, status = 'running'"
                         " WHERE job_id = %s", (key, job))
        conn.execute("UPDATE items SET status = 'failed' WHERE job_id IN (%s, %s, %s)", (one, two, three))
    assert one_shards["g1"] < two_shards["g2"] < two_shards["g3"] < three_shards["g4"]

    async def race() -> list[str]:
        async with (await psycopg.AsyncConnection.connect(url) as blocker,
                    await psycopg.AsyncConnection.connect(url, autocommit=True) as a,
                    await psycopg.AsyncConnection.connect(url, autocommit=True) as b):
            # The first item of each batch, in its shard order, is held by another session.
            await blocker.execute("SELECT 1 FROM items WHERE item_id IN (%s, %s) FOR UPDATE", (x, y2))

            async def retry(conn: psycopg.AsyncConnection, items: list[str]) -> list[str]:
                cur = await conn.execute("SELECT outcome FROM pacer_retry_items(%s::uuid[], 'ops') ORDER BY ord",
                                         (items,))
                return [r[0] for r in await cur.fetchall()]

            first = asyncio.create_task(retry(a, [x, y]))  # shard order: chain 1 (g1), then chain 2 (g3)
            second = asyncio.create_task(retry(b, [y2, x2]))  # chain 2 (g2), then chain 1 (g4)
            await eventually(lambda: waiting_for_locks(url, 2), 10, "both retries waiting")
            await blocker.rollback()
            return [*await asyncio.wait_for(first, 30), *await asyncio.wait_for(second, 30)]

    assert asyncio.run(race()) == ["created"] * 4

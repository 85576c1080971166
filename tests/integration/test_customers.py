"""Pacer's copy of a customer under concurrent syncs: whatever order versions arrive in, and
however many syncs read the same one, each version is written once and the newest stays."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pacer_common.db.pool import open_pool
from pacer_common.domain.customers import Customer
from pacer_sender.adapters.actions import PostgresActions


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(versions=st.lists(st.integers(0, 6), min_size=1, max_size=8))
def test_concurrent_syncs_apply_each_version_once_and_the_newest_wins(database_url: str, versions: list[int]) -> None:
    cid = f"c-{uuid.uuid4().hex}"  # a new customer per example (examples share the database)

    async def go() -> list[int | None]:
        pool = await open_pool(database_url, min_size=4, max_size=8)
        store = PostgresActions(pool)
        try:
            return list(await asyncio.gather(*(
                store.save_customer(Customer(customer_id=cid, name=f"v{v}", version=v),
                                    "00000000-0000-0000-0000-000000000001") for v in versions)))
        finally:
            await pool.close()

    results = asyncio.run(go())
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT name, version, writes FROM customers WHERE customer_id = %s", (cid,)).fetchone()
    newest = max(versions)
    assert row is not None and row[:2] == (f"v{newest}", newest)
    written = [v for v, r in zip(versions, results, strict=True) if r is None]
    assert written.count(newest) == 1 and len(written) == len(set(written)) == row[2]  # each version once
    assert all(r is None or r >= v for v, r in zip(versions, results, strict=True))  # a refusal names a newer one

"""The events that put a send in doubt, or leave it unverified, carry their error class, as the
sender's own ``ItemInDoubt`` does, and consumers read ``in_doubt`` from the outcome; the lease
sweep's in-doubt send is our own sender's fault, and the breakers count it neither as a
failure nor as a success of its job and guid.

Every step goes through the reconciler's store on real Postgres: the ``submit_expired`` sweep,
the verifier's resolutions and the tail's read of the event log.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg

from pacer_common.db.pool import open_pool
from pacer_common.domain.events import ItemEvent, error_class_of
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.domain.breakers import BreakerPolicy, Breakers, outcome_of
from pacer_reconciler.ports import Position
from tests.integration.helpers import seed_job


def test_the_lease_sweeps_in_doubt_send_carries_its_class_but_counts_neither_way_and_an_unverified_one_carries_it(
        database_url: str) -> None:
    url = database_url
    _, _, items = seed_job(url, {"g-doubt": 2}, status="submitted")
    with psycopg.connect(url) as conn:  # the sender died after submit: its lease ran out
        conn.execute("UPDATE items SET lease_owner = 'gone', lease_until = now() - interval '1 minute'"
                     " WHERE item_id = ANY(%s::uuid[])", (items,))

    async def scenario() -> tuple[int, list[str | None], list[ItemEvent]]:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            # A verify deadline of 0: a lookup with no answer makes the item unverified at once.
            store = PostgresLog(pool, "test-in-doubt", timedelta(0), verify_after=timedelta(0))
            swept = await store.sweep("submit_expired", 100)
            first, second = sorted(await store.in_doubt(10), key=lambda d: d.item_id)
            resolved = [await store.resolve(first, None, datetime.now(UTC)),
                        await store.resolve(second, False, datetime.now(UTC))]
            events = [ev for _, ev in await store.read(Position("0", 0), 100) if isinstance(ev, ItemEvent)]
            return swept, resolved, events
        finally:
            await pool.close()

    swept, resolved, events = asyncio.run(scenario())
    assert swept == 2 and resolved == ["unverified", "pending"]

    in_doubt = [ev for ev in events if ev.type == "ItemInDoubt"]
    assert sorted(ev.item_id for ev in in_doubt) == sorted(items)
    for ev in in_doubt:
        assert error_class_of(ev.payload) == "in_doubt", "consumers read the class from the outcome"
        assert outcome_of(ev) is None, "neither a failure nor a success of the job and the guid"
    breakers = Breakers(BreakerPolicy(consecutive=2))
    assert breakers.observe(in_doubt) == [] and breakers.tracked == 0

    by_type = {ev.type: ev for ev in events}
    assert error_class_of(by_type["ItemUnverified"].payload) == "in_doubt"
    assert error_class_of(by_type["ItemVerifiedNotDelivered"].payload) == "in_doubt"

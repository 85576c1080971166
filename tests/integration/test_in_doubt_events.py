"""The events that put a send in doubt, or leave it unverified, carry their error class, as the
sender's own ``ItemInDoubt`` does, and consumers read ``in_doubt`` from the outcome. A send put
in doubt by no answer of the gateway names its source, and the breakers count it neither as a
failure nor as a success of its job and guid: the lease sweep's (our own sender's fault),
``pacer after-restore``'s, an admin's forced release, and a retry or a resolution of an item
from before a restore.

Every step goes through the reconciler's store or the stored functions on real Postgres, and
the events are read as the reconciler's tail reads the event log.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from pacer_common.db.pool import open_pool
from pacer_common.domain.events import ItemEvent, ItemInDoubt, error_class_of
from pacer_common.domain.status import ItemStatus as S
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.domain.breakers import BreakerPolicy, Breakers, outcome_of
from pacer_reconciler.ports import Position
from tests.integration.helpers import one, run, seed_job, sql, tuples


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


def _logged(url: str) -> list[ItemEvent]:
    """The event log, as the reconciler's tail reads it."""
    async def go(pool: Any) -> list[ItemEvent]:
        read = await PostgresLog(pool, "test-in-doubt", timedelta(0)).read(Position("0", 0), 1000)
        return [ev for _, ev in read if isinstance(ev, ItemEvent)]

    return run(url, go)


def _retry_scheduled(job: str, guid: str) -> ItemEvent:
    """A failure of the job and the guid that counts: the gateway's retryable answer."""
    return ItemEvent(seq=0, type="ItemRetryScheduled", item_id="it-failing", job_id=job, shard_id=1, guid=guid,
                     version=3, from_status=S.SUBMITTED, to_status=S.WAITING_RETRY, occurred_at=datetime.now(UTC),
                     payload={"error_class": "retryable", "error": "gateway: try again"})


def _put_in_doubt_by(url: str, source: str, items: list[str]) -> None:
    """The log's ItemInDoubt events are those of ``items``, each naming ``source``, with the class
    and the error its item's row has; the breakers count them neither as a failure nor as a
    success: a run of failures of their job and guid goes on through them."""
    in_doubt = [ev for ev in _logged(url) if ev.type == "ItemInDoubt"]
    assert sorted(ev.item_id for ev in in_doubt) == sorted(items)
    for ev in in_doubt:
        assert isinstance(ev.payload, ItemInDoubt) and ev.payload.source == source
        assert (error_class_of(ev.payload), ev.payload.error) == tuple(one(
            url, "SELECT last_error_class, last_error FROM items WHERE item_id = %s", ev.item_id)), \
            "consumers read the class and the error from the outcome, as the item has them"
        assert ev.payload.error and error_class_of(ev.payload) == "in_doubt"
        assert outcome_of(ev) is None, "neither a failure nor a success of the job and the guid"
    job, guid = in_doubt[0].job_id, in_doubt[0].guid
    breakers = Breakers(BreakerPolicy(consecutive=2))
    assert breakers.observe(in_doubt) == [] and breakers.tracked == 0
    trips = breakers.observe([_retry_scheduled(job, guid), *in_doubt, _retry_scheduled(job, guid)])
    assert sorted((t.scope, t.key) for t in trips) == [("guid", guid), ("job", job)]
    assert all("2 consecutive failures (last: retryable)" in t.reason for t in trips)


def test_the_sends_after_restore_puts_in_doubt_name_it_and_count_neither_way(database_url: str) -> None:
    url = database_url
    _, _, items = seed_job(url, {"g-restored": 3}, status="submitted")
    sql(url, "SELECT pacer_restore_epoch()")
    moved = tuples(url, "SELECT * FROM pacer_after_restore('ops@example.com', 'restored from last night''s backup')")
    assert moved == [("submitted", 3)]
    _put_in_doubt_by(url, "after_restore", items)


def test_a_forced_release_of_a_submitted_send_names_it_and_counts_neither_way(database_url: str) -> None:
    url = database_url
    _, _, items = seed_job(url, {"g-stuck": 2}, status="submitted")
    sql(url, "UPDATE items SET lease_owner = 'sender-1', lease_until = now() + interval '30 seconds'"
             " WHERE item_id = ANY(%s::uuid[])", items)
    for item in items:
        outcome = one(url, "SELECT outcome FROM pacer_force_release_item(%s::uuid, 'admin@example.com',"
                           " 'its host is gone')", item)
        assert outcome == "done"
    _put_in_doubt_by(url, "forced_release", items)


def test_a_retry_of_an_item_from_before_a_restore_names_it_and_counts_neither_way(database_url: str) -> None:
    url = database_url
    _, _, items = seed_job(url, {"g-retried": 2}, status="failed")
    sql(url, "SELECT pacer_restore_epoch()")
    retries = [tuples(url, "SELECT outcome, new_item::text FROM pacer_compensate(%s::uuid, 'ops@example.com')",
                      item)[0] for item in items]
    assert [outcome for outcome, _ in retries] == ["created", "created"]
    _put_in_doubt_by(url, "compensated", [retry for _, retry in retries])


def test_an_unverified_send_from_before_a_restore_resolved_names_it_and_counts_neither_way(
        database_url: str) -> None:
    url = database_url
    _, _, items = seed_job(url, {"g-resolved": 2}, status="unverified")
    sql(url, "SELECT pacer_restore_epoch()")
    for item in items:
        status = one(url, "SELECT status FROM pacer_resolve_unverified(%s::uuid, false, 'ops@example.com',"
                          " 'not on the customer''s phone')", item)
        assert status == "recovery_pending"
    _put_in_doubt_by(url, "resolved", items)

"""Postgres as the record of every guid's queue: the sender's reads of it, and items whose
data the database refuses failing alone."""

from __future__ import annotations

import asyncio
import os
import zlib
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pacer_common.db.pool import Pool, open_pool
from pacer_common.domain.ids import Guid
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.domain.partitions import partition_of
from pacer_sender.ports import UnstorableItem
from tests.integration.helpers import cmd, run, seed_job, sql


def test_next_ready_gives_a_guids_due_unheld_pending_items_urgent_first_and_when_the_next_is_due(
        database_url: str) -> None:
    _, _, items = seed_job(database_url, {"g1": 6, "g2": 2})
    a, b, c, d, e, f = items[:6]
    sql(database_url, "UPDATE items SET priority = 1 WHERE item_id = %s", e)
    sql(database_url, "UPDATE items SET held = true WHERE item_id = %s", b)
    sql(database_url, "UPDATE items SET not_before = now() + interval '90 seconds' WHERE item_id = %s", c)
    sql(database_url, "UPDATE items SET status = 'confirmed' WHERE item_id = %s", d)

    ready = run(database_url, lambda pool: PostgresGuidQueue(pool).next_ready("g1", [a], 10))
    assert [x.item_id for x in ready.commands] == [e, f], "urgent first; held, scheduled, done and excluded left out"
    assert ready.commands[0].priority == 1 and ready.commands[0].guid == "g1"
    assert ready.due_in_s is not None and 80 < ready.due_in_s <= 90
    limited = run(database_url, lambda pool: PostgresGuidQueue(pool).next_ready("g1", [], 1))
    assert [x.item_id for x in limited.commands] == [e]



def test_next_ready_is_planned_once_per_connection_on_its_generic_plan(database_url: str) -> None:
    """Planning the refill over items' partitions costs more than running it: it is prepared
    at its first run on a connection, and every run after uses that one generic plan."""
    seed_job(database_url, {"g1": 3, "g2": 3, "g3": 3})

    async def refills(pool: Pool) -> list[dict[str, Any]]:
        queue = PostgresGuidQueue(pool)
        for guid in ("g1", "g2", "g3"):
            assert len((await queue.next_ready(guid, [], 10)).commands) == 3
        async with pool.connection() as conn:
            return await (await conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%%WITH RECURSIVE pairs%%'")).fetchall()

    async def on_one_connection() -> list[dict[str, Any]]:
        pool = await open_pool(database_url, min_size=1, max_size=1)
        try:
            return await refills(pool)
        finally:
            await pool.close()

    assert asyncio.run(on_one_connection()) == [{"generic_plans": 3, "custom_plans": 0}]

def test_the_sweep_finds_each_guid_with_claimable_work_once_and_says_which_is_overdue(database_url: str) -> None:
    _, _, items = seed_job(database_url, {"fresh": 3, "old": 1, "held": 1, "later": 1, "soon": 1, "retry": 1})
    _fresh, _, _, old, held, later, soon, retry = items
    sql(database_url, "UPDATE items SET updated_at = now() - interval '1 hour' WHERE item_id = %s", old)
    sql(database_url, "UPDATE items SET held = true WHERE item_id = %s", held)
    sql(database_url, "UPDATE items SET not_before = now() + interval '1 hour' WHERE item_id = %s", later)
    sql(database_url, "UPDATE items SET not_before = now() + interval '5 seconds' WHERE item_id = %s", soon)
    sql(database_url, "UPDATE items SET status = 'waiting_retry' WHERE item_id = %s", retry)
    _, _, (paused_item,) = seed_job(database_url, {"paused-job": 1})
    sql(database_url, "UPDATE jobs SET status = 'paused' WHERE job_id = (SELECT job_id FROM items WHERE item_id = %s)",
        paused_item)
    seed_job(database_url, {"paused-guid": 1})
    sql(database_url, "INSERT INTO guid_leases (guid, paused_reason) VALUES ('paused-guid', 'kicked')")

    found = run(database_url, lambda pool: PostgresGuidQueue(pool).waiting_guids(horizon_s=30, grace_s=20))
    assert {w.guid: w.overdue for w in found} == {"fresh": False, "old": True, "soon": False}
    by_guid = {w.guid: w.item_id for w in found}
    assert (by_guid["old"], by_guid["soon"]) == (str(old), str(soon)), "each names the claimable item it found"
    assert by_guid["fresh"] in {str(i) for i in items[:3]}


OWNED = [(16, 3), (16, 7), (5, 2)]  # partitions 3 and 7 of a 16-partition topic, 2 of a 5-partition one


def _mine(guid: str) -> bool:
    return any(partition_of(Guid(guid), n) == p for n, p in OWNED)


def test_the_sweep_reads_only_the_guids_of_the_partitions_it_is_given(database_url: str, caplog) -> None:
    """The CRC in Postgres is the one Kafka's partitioner takes (zlib's, of the UTF-8 bytes):
    a guid comes back exactly when one of the sender's (count, partition) pairs claims it."""
    guids = [f"wx-{n}" for n in range(80)] + [f"客户-{n}-账号" for n in range(40)]
    seed_job(database_url, dict.fromkeys(guids, 1))
    with psycopg.connect(database_url) as conn:
        crcs: dict[str, int] = dict(conn.execute("SELECT g, pacer_guid_crc(g) FROM unnest(%s::text[]) g", (guids,)).fetchall())
    assert crcs == {g: zlib.crc32(g.encode()) for g in guids}

    def sweep(owned: list[tuple[int, int]] | None) -> set[str]:
        found = run(database_url, lambda pool: PostgresGuidQueue(pool).waiting_guids(
            horizon_s=30, grace_s=20, owned=owned))
        return {w.guid for w in found}

    mine = {g for g in guids if _mine(g)}
    assert mine and len(mine) < len(guids) and any(not g.isascii() for g in mine)
    assert sweep(OWNED) == mine
    assert sweep([]) == set(), "no partition assigned: no guid is this sender's"
    assert sweep(None) == set(guids), "no pairs given: every guid"
    # 7 does not divide the buckets: every queued guid is walked, and the pairs keep the sender's.
    sevens = {g for g in guids if partition_of(Guid(g), 7) == 3}
    assert not [r for r in caplog.records if "do not all divide" in r.getMessage()]
    assert sevens and sweep([(7, 3)]) == sevens
    assert [r.levelname for r in caplog.records if "counts [7] do not all divide 5760" in r.getMessage()] == ["WARNING"]
    sql(database_url, "DROP INDEX items_guid_queued_bucket")
    assert sweep(OWNED) == mine, "without the bucket index: the walk, the same guids"


def _index_scans(database_url: str) -> dict[str, int]:
    """Scans of each of the items' queued-guid indexes so far, over every partition."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        rows = conn.execute(
            "SELECT i.inhparent::regclass::text, sum(s.idx_scan)::int FROM pg_inherits i"
            " JOIN pg_stat_user_indexes s ON s.indexrelid = i.inhrelid"
            " WHERE i.inhparent::regclass::text IN ('items_guid_queued', 'items_guid_queued_bucket')"
            " GROUP BY 1").fetchall()
    return dict(rows)


def test_a_senders_sweep_walks_its_own_buckets_not_every_queued_guid(database_url: str) -> None:
    """With partition counts that divide the buckets, the sweep reads the bucket index, one
    chain of probes per bucket of its partitions, and not the index of every queued guid."""
    guids = [f"wx-{n}" for n in range(60)]
    seed_job(database_url, dict.fromkeys(guids, 1))
    before = _index_scans(database_url)
    found = run(database_url, lambda pool: PostgresGuidQueue(pool).waiting_guids(
        horizon_s=30, grace_s=20, owned=[(16, 3), (16, 7)]))
    assert {w.guid for w in found} == {g for g in guids if partition_of(Guid(g), 16) in (3, 7)}
    after = _index_scans(database_url)
    assert after["items_guid_queued"] == before["items_guid_queued"], "no walk over every queued guid"
    # At least one probe per bucket of partitions 3 and 7 (360 each of 5760), on some item partition.
    assert after["items_guid_queued_bucket"] - before["items_guid_queued_bucket"] >= 2 * 5760 // 16


def test_where_the_server_has_no_crc_the_sweep_reads_every_guid(database_url: str) -> None:
    """Before PostgreSQL 18 (no crc32()) the function says NULL, and the sweep returns every
    guid for the sender to keep its own, as it did before the filter."""
    guids = [f"wx-{n}" for n in range(40)]
    seed_job(database_url, dict.fromkeys(guids, 1))
    sql(database_url, "CREATE OR REPLACE FUNCTION pacer_guid_crc(p_guid text) RETURNS bigint"
                      " LANGUAGE sql STABLE PARALLEL SAFE AS $fn$ SELECT NULL::bigint $fn$")
    found = run(database_url, lambda pool: PostgresGuidQueue(pool).waiting_guids(
        horizon_s=30, grace_s=20, owned=OWNED))
    assert {w.guid for w in found} == set(guids)
    assert {g for g in guids if _mine(g)} != set(guids)


def test_an_item_whose_key_the_database_refuses_fails_alone_and_its_batch_goes_on(database_url: str) -> None:
    _, _, (good, bad, other) = seed_job(database_url, {"g1": 2, "g2": 1})
    huge = os.urandom(12_000).hex()  # incompressible, far past a btree row's limit
    sql(database_url, "UPDATE items SET idem_key = %s WHERE item_id = %s", huge, bad)

    async def scenario(pool):
        await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(["g1", "g2"], "w1")
        repo = PostgresItemRepository(pool, timedelta(seconds=30))
        got = await asyncio.gather(repo.begin_send(cmd(good, "k-good"), "w1"),
                                   repo.begin_send(cmd(bad, huge), "w1"),
                                   repo.begin_send(cmd(other, "k-other", guid="g2"), "w1"),
                                   return_exceptions=True)
        failed = await PostgresGuidQueue(pool).fail_unsent(cmd(bad, huge), "bad_params", f"cannot be sent: {got[1]}")
        again = await PostgresGuidQueue(pool).fail_unsent(cmd(good, "k-good"), "bad_params", "not pending any more")
        return got, failed, again

    got, failed, again = run(database_url, scenario)
    assert [getattr(g, "outcome", None) for g in got] == ["submitted", None, "submitted"]
    assert isinstance(got[1], UnstorableItem) and "index row" in str(got[1])
    assert failed and not again, "only a pending item is failed; a submitted one is left to verification"
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT status::text, last_error_class, last_error FROM items WHERE item_id = %s",
                           (bad,)).fetchone()
        event = conn.execute("SELECT type, from_status::text, to_status::text FROM item_events"
                             " WHERE item_id = %s", (bad,)).fetchall()
    assert row[0] == "failed" and row[1] == "bad_params" and "index row" in row[2]
    assert event == [("ItemFailed", "pending", "failed")]


def test_a_nul_in_a_command_is_the_items_fault_not_the_databases(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario(pool):
        await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(["g1"], "w1")
        await PostgresItemRepository(pool, timedelta(seconds=30)).begin_send(cmd(item, "k\x00"), "w1")

    with pytest.raises(UnstorableItem, match=r"NUL|0x00"):  # text or binary parameters
        run(database_url, scenario)

"""The partition prune against concurrent writers and readers, on real Postgres: a guard that
found nothing decides a drop only once the partition's writers are out, and taking them out
fails no query that reads the parent."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from tests.integration.helpers import seed_job, wait_for

Changes = dict[str, tuple[str, str | None]]


def old_failed_item(url: str) -> tuple[str, str, datetime]:
    """A failed item of a job made 20 days ago (past the items' 7 days of retention); its
    items partition, and the prune's now."""
    now = datetime.now(UTC)
    old = now - timedelta(days=20)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 0)", (old,))
    _, _, (item,) = seed_job(url, {"g1": 1}, status="failed", created_at=old)
    with psycopg.connect(url) as conn:
        (partition,) = conn.execute("SELECT tableoid::regclass::text FROM items WHERE item_id = %s",
                                    (item,)).fetchone()
    return item, partition, now


def prune_items(url: str, now: datetime) -> Changes:
    """The items' prune (a lock timeout far past the test's waits), from a session of its own."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT * FROM pacer_prune_partitions(%s, %s::jsonb, interval '60 seconds')",
                            (now, json.dumps({"items": 7}))).fetchall()
    return {name: (action, detail) for name, action, detail in rows}


def waiting_for_a_lock(url: str, query_like: str) -> Callable[[], bool]:
    """A check: a session whose query is like ``query_like`` waits for a lock."""
    def check() -> bool:
        with psycopg.connect(url, autocommit=True) as conn:
            (n,) = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND wait_event_type = 'Lock' AND query LIKE %s", (query_like,)).fetchone()
        return bool(n)
    return check


def pruning_behind(url: str, writer: psycopg.Connection[Any], now: datetime,
                   pool: ThreadPoolExecutor) -> Future[Changes]:
    """The prune started while ``writer`` holds a write in an old partition, once it waits."""
    pruning = pool.submit(prune_items, url, now)
    wait_for(waiting_for_a_lock(url, "%pacer_prune_partitions%"), timeout_s=30,
             what="the prune waiting for the writer's transaction")
    return pruning


def test_a_retry_committed_while_the_prune_waits_to_drop_its_partition_keeps_the_partition(
        database_url: str) -> None:
    # The retry's new pending item lands in the old job's partition; the guard cannot see it
    # before the retry commits, so the prune must decide only once the retry is over.
    failed, partition, now = old_failed_item(database_url)
    with ThreadPoolExecutor(1) as pool, psycopg.connect(database_url) as retrying:
        outcome, retry, _ = retrying.execute("SELECT * FROM pacer_retry_item(%s, 'op')", (failed,)).fetchone()
        assert outcome == "created"
        pruning = pruning_behind(database_url, retrying, now, pool)
        retrying.commit()
        changes = pruning.result(timeout=60)
    assert changes[partition] == ("kept", "holds unfinished items")
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT tableoid::regclass::text, status::text FROM items WHERE item_id = %s",
                            (retry,)).fetchone() == (partition, "pending")


def test_a_query_on_every_partition_goes_through_while_the_prune_waits_for_a_writer(database_url: str) -> None:
    # A guid's queue reads every partition of items: it holds the parent, then asks for each
    # partition. Were the prune to hold the partition against readers too, such a query would
    # wait for it, and then it and the DROP (which takes the parent) for each other until
    # Postgres failed one of them.
    failed, partition, now = old_failed_item(database_url)
    with ThreadPoolExecutor(2) as pool, psycopg.connect(database_url) as writer:
        writer.execute("UPDATE items SET updated_at = now() WHERE item_id = %s", (failed,))  # still finished
        pruning = pruning_behind(database_url, writer, now, pool)

        def read_all() -> int:
            with psycopg.connect(database_url, autocommit=True) as conn:
                (n,) = conn.execute("SELECT count(*) FROM items WHERE guid = 'g1'").fetchone()
            return int(n)

        reading = pool.submit(read_all)
        wait_for(reading.done, timeout_s=15, what="the read done while the prune waits")
        assert reading.result() == 1
        writer.commit()
        changes = pruning.result(timeout=60)
    assert changes[partition] == ("dropped", None)

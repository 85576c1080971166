"""The partition prune against concurrent writers and readers, on real Postgres: it starts only
once the writers that may add items to an old partition are done (pacer_partition_writer), and
a DROP held up by anything else gives up after its lock timeout instead of holding the item
tables' readers behind it."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from tests.integration.helpers import prune_partitions, seed_job, wait_for

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


def prune_items(url: str, now: datetime, lock_timeout_s: float = 60.0) -> Changes:
    """The items' prune (by default with a lock timeout far past the test's waits), from a
    session of its own."""
    with psycopg.connect(url, autocommit=True) as conn:
        return prune_partitions(conn, now, {"items": 7}, lock_timeout_s)


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
    wait_for(waiting_for_a_lock(url, "%pacer_prune_partition(%"), timeout_s=30,
             what="the prune waiting for the writer's transaction")
    return pruning


def test_a_retry_of_an_old_jobs_item_uncommitted_when_the_prune_starts_keeps_its_partition(
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


def test_a_drop_held_up_by_a_writer_gives_up_at_its_lock_timeout_and_readers_wait_no_longer(
        database_url: str) -> None:
    # A DROP waits for the parent's lock, and readers of every partition queue behind it: the
    # prune waits at most its lock timeout, reports the partition skipped, and drops it at a
    # later run once the writer is gone.
    failed, partition, now = old_failed_item(database_url)
    with ThreadPoolExecutor(2) as pool, psycopg.connect(database_url) as writer:
        writer.execute("UPDATE items SET updated_at = now() WHERE item_id = %s", (failed,))  # still finished
        pruning = pool.submit(prune_items, database_url, now, 1.0)
        wait_for(waiting_for_a_lock(database_url, "%pacer_prune_partition(%"), timeout_s=30,
                 what="the prune's DROP waiting for the writer")

        def read_all() -> int:
            with psycopg.connect(database_url, autocommit=True) as conn:
                (n,) = conn.execute("SELECT count(*) FROM items WHERE guid = 'g1'").fetchone()
            return int(n)

        reading = pool.submit(read_all)
        changes = pruning.result(timeout=30)
        assert reading.result(timeout=30) == 1, "the read went on once the DROP gave up"
        writer.commit()
    action, detail = changes[partition]
    assert action == "skipped" and detail is not None and "lock" in detail, changes[partition]
    assert prune_items(database_url, now)[partition] == ("dropped", None), "dropped at a later run"

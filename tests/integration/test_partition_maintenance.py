"""Partition maintenance beside the sessions it shares tables with, on real Postgres: a prune
holds each table only for its own partition's DROP, a ticket's newer status version outlives
the older ones whose items are still kept, and a partition made over rows of the default
partition takes a write that lands there while it waits, and a creation waiting for one table
holds none of the tables made before it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pacer_common.db.pool import open_pool
from pacer_common.domain.ids import new_item_ids
from pacer_reconciler.adapters.partitions import PostgresPartitions
from pacer_reconciler.domain.retention import PartitionChange
from tests.integration.helpers import prune_partitions, seed_job, wait_for

RETAIN = {"items": 7, "item_events": 7, "send_ledger": 35}
MAINTAINER = "pacer-maintenance-under-test"  # application_name of the maintenance's sessions
Changes = dict[str, tuple[str, str | None]]


def week(at: datetime) -> str:
    """The name suffix of the 7-day partition holding ``at``."""
    days = int(at.timestamp() // 86400)
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=days - days % 7)).strftime("%Y%m%d")


def partition_of(conn: psycopg.Connection[Any], item_id: str) -> str:
    row = conn.execute("SELECT tableoid::regclass::text FROM items WHERE item_id = %s", (item_id,)).fetchone()
    assert row is not None, f"no item {item_id}"
    return str(row[0])


def as_maintainer(url: str, step: Callable[[PostgresPartitions], Awaitable[list[PartitionChange]]]) -> Changes:
    """One of the reconciler's partition steps (its adapter, lock timeout 2 s), from a session
    named MAINTAINER."""
    async def run() -> Changes:
        pool = await open_pool(url, min_size=1, max_size=1, name=MAINTAINER)
        try:
            return {c.partition: (c.action, c.detail) for c in await step(PostgresPartitions(pool))}
        finally:
            await pool.close()

    return asyncio.run(run())


def reconciler_prune(url: str) -> Changes:
    return as_maintainer(url, lambda p: p.prune(RETAIN))


def reconciler_ensure(url: str, ahead_days: int) -> Changes:
    return as_maintainer(url, lambda p: p.ensure(ahead_days))


def prune(conn: psycopg.Connection[Any], now: datetime) -> Changes:
    return prune_partitions(conn, now, RETAIN)


def maintainer_waits_for(url: str, relation_like: str) -> str | None:
    """The relation like ``relation_like`` that a MAINTAINER session waits to lock, if any."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT l.relation::regclass::text FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                           " WHERE a.application_name = %s AND a.datname = current_database() AND NOT l.granted"
                           " AND l.locktype = 'relation' AND l.relation::regclass::text LIKE %s",
                           (MAINTAINER, relation_like)).fetchone()
    return None if row is None else str(row[0])


def test_a_prune_waiting_to_drop_a_ledger_partition_holds_no_lock_on_the_items(database_url: str) -> None:
    # A session reading the ledger keeps every ledger DROP waiting up to the lock timeout. The
    # items partition dropped before in the same run must not keep items locked meanwhile: every
    # query by guid reads all of its partitions, and would wait through all those waits.
    now = datetime.now(UTC)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 70)", (now - timedelta(days=70),))
    _, _, (failed,) = seed_job(database_url, {"g1": 1}, status="failed", created_at=now - timedelta(days=20))
    with psycopg.connect(database_url, autocommit=True) as conn:
        items_week = partition_of(conn, failed)
        ledger_due = [name for name, action, _ in conn.execute(
            "SELECT * FROM pacer_partitions_due(now(), %s::jsonb)", (json.dumps(RETAIN),)).fetchall()
            if action == "due" and name.startswith("send_ledger_p")]
    assert len(ledger_due) >= 3, ledger_due

    with ThreadPoolExecutor(1) as pool, psycopg.connect(database_url) as holder:
        holder.execute("SELECT count(*) FROM send_ledger")  # its transaction left open
        pruning = pool.submit(reconciler_prune, database_url)
        wait_for(lambda: maintainer_waits_for(database_url, "send_ledger%"), timeout_s=30,
                 what="the prune waiting to drop a ledger partition")
        with psycopg.connect(database_url, autocommit=True) as reader:
            held = reader.execute("SELECT l.mode FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                                  " WHERE a.application_name = %s AND l.granted AND l.relation = 'items'::regclass",
                                  (MAINTAINER,)).fetchall()
            reader.execute("SET lock_timeout = '2s'")  # the prune's own: no reader waits longer
            try:
                (n,) = reader.execute("SELECT count(*) FROM items WHERE guid = 'g1'").fetchone()
            except psycopg.errors.LockNotAvailable:
                n = None
        holder.rollback()
        changes = pruning.result(timeout=120)
    assert held == [], "the prune holds items while it waits for the ledger"
    assert n == 0, "a reader of items waited past the lock timeout"
    assert changes[items_week] == ("dropped", None)
    assert {changes[name][0] for name in ledger_due} <= {"dropped", "skipped"}, changes
    reconciler_prune(database_url)  # what the open read made it skip goes at the next run
    with psycopg.connect(database_url) as conn:
        left = conn.execute("SELECT count(*) FROM pacer_partitions('send_ledger') WHERE partition = ANY(%s)",
                            (ledger_due,)).fetchone()
    assert left == (0,)


def test_a_newer_ticket_version_is_kept_while_an_older_ones_item_can_still_be_retried(database_url: str) -> None:
    # Version 1 of a ticket: its item failed, and its week is kept (another item of that week is
    # unverified). Version 2, two weeks later, completed, and its week went. Its job must stay:
    # whether v1's item is superseded is read from the jobs of the business id.
    now = datetime.now(UTC)
    v1_at, v2_at = now - timedelta(days=30), now - timedelta(days=16)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 31)", (now - timedelta(days=31),))
    v1, _, (failed,) = seed_job(database_url, {"g1": 1}, status="failed", created_at=v1_at)
    _, _, (in_doubt,) = seed_job(database_url, {"g2": 1}, status="unverified", created_at=v1_at)
    v2, _, _ = seed_job(database_url, {"g1": 1}, status="confirmed", created_at=v2_at)

    def retry() -> tuple[str, str]:
        with psycopg.connect(database_url, autocommit=True) as conn:
            outcome, _, message = conn.execute("SELECT * FROM pacer_retry_item(%s, 'ops:alice')", (failed,)).fetchone()
        return str(outcome), str(message)

    def prune_jobs() -> int:
        with psycopg.connect(database_url, autocommit=True) as conn:
            (n,) = conn.execute("SELECT pacer_prune_jobs(%s - interval '7 days')", (now,)).fetchone()
        return int(n)

    with psycopg.connect(database_url, autocommit=True) as conn:
        for job, version in ((v1, 1), (v2, 2)):
            conn.execute("UPDATE jobs SET kind = 'ticket_notify', status = 'completed', coalesce_key = 'T-1',"
                         " coalesce_version = %s WHERE job_id = %s", (version, job))
    outcome, message = retry()
    assert (outcome, "superseded" in message) == ("refused", True), message

    with psycopg.connect(database_url, autocommit=True) as conn:
        changes = prune(conn, now)
    assert changes[f"items_p{week(v2_at)}"] == ("dropped", None)
    assert changes[f"item_events_p{week(v2_at)}"] == ("dropped", None)
    assert changes[f"items_p{week(v1_at)}"] == ("kept", "holds unfinished items")
    pruned = prune_jobs()
    outcome, message = retry()
    assert (outcome, "superseded" in message) == ("refused", True), message
    assert pruned == 0, "version 2 stays while version 1 has items"

    # Once version 1's week goes, nothing of it can be retried or sent: both go in one run,
    # whatever version 1's status (a paused one never completes; only its items matter).
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE items SET status = 'confirmed' WHERE item_id = %s", (in_doubt,))
        assert prune(conn, now)[f"items_p{week(v1_at)}"] == ("dropped", None)
    assert prune_jobs() == 2
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM jobs WHERE coalesce_key = 'T-1'").fetchone() == (0,)


def test_a_write_to_the_default_partition_while_its_period_gets_a_partition_moves_with_the_rest(
        database_url: str) -> None:
    # An item of a period with no partition yet waits in the default partition; another one of
    # that period is being written while the partition is made. Both end in it, none is lost,
    # and the call goes on (it once failed the ATTACH's check of the default's rows).
    ahead = datetime.now(UTC) + timedelta(days=30)  # past the partitions made ahead
    _, _, (first,) = seed_job(database_url, {"g1": 1}, created_at=ahead)
    (second,) = new_item_ids(1, ahead)
    job = str(uuid.uuid4())
    with psycopg.connect(database_url) as conn:
        assert partition_of(conn, first) == "items_default"

    def make() -> Changes:
        with psycopg.connect(database_url, autocommit=True, application_name=MAINTAINER) as conn:
            rows = conn.execute("SELECT * FROM pacer_ensure_partitions(%s, 0, interval '60 seconds')",
                                (ahead,)).fetchall()
        return {name: (action, detail) for name, action, detail in rows}

    with ThreadPoolExecutor(1) as pool, psycopg.connect(database_url) as writer:
        writer.execute("INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,"
                       " target_mode, total, request, created_at) VALUES (%s, %s, 'campaign', 3, 't', '{}', 1,"
                       " 'snapshot', 1, '{}', %s)", (job, f"req-{job}", ahead))
        (shard,) = writer.execute("INSERT INTO shards (job_id, guid, total) VALUES (%s, 'g2', 1) RETURNING shard_id",
                                  (job,)).fetchone()
        writer.execute("INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind,"
                       " status) VALUES (%s, %s, %s, 'g2', 'room-0', 'hi', %s, 3, 'campaign', 'pending')",
                       (second, job, shard, f"k-{second}"))
        making = pool.submit(make)
        wait_for(lambda: maintainer_waits_for(database_url, "items_default"), timeout_s=30,
                 what="the partition's creation waiting for the default partition's writer")
        writer.commit()
        try:
            made = making.result(timeout=120)
        except psycopg.errors.CheckViolation as exc:
            pytest.fail(f"the partition's creation failed: {exc}")
    assert made[f"items_p{week(ahead)}"] == ("created", "2 rows moved from the default partition")
    with psycopg.connect(database_url) as conn:
        assert {partition_of(conn, first), partition_of(conn, str(second))} == {f"items_p{week(ahead)}"}
        assert conn.execute("SELECT count(*) FROM items_default").fetchone() == (0,)


def test_a_creation_waiting_for_a_ledger_lock_holds_no_lock_on_the_items(database_url: str) -> None:
    # A session reading the ledger's default partition keeps the new ledger partition waiting
    # up to the lock timeout. The items partition made before it in the same run must not keep
    # the items' default partition locked meanwhile: every query by guid reads it.
    now = datetime.now(UTC)
    with ThreadPoolExecutor(1) as pool, psycopg.connect(database_url) as holder:
        holder.execute("SELECT count(*) FROM send_ledger_default")  # its transaction left open
        making = pool.submit(reconciler_ensure, database_url, 21)
        wait_for(lambda: maintainer_waits_for(database_url, "send_ledger_default"), timeout_s=30,
                 what="the creation waiting for the ledger's default partition")
        with psycopg.connect(database_url, autocommit=True) as reader:
            held = reader.execute("SELECT l.relation::regclass::text FROM pg_locks l JOIN pg_stat_activity a"
                                  " ON a.pid = l.pid WHERE a.application_name = %s AND l.granted"
                                  " AND l.relation IN ('items'::regclass, 'items_default'::regclass)",
                                  (MAINTAINER,)).fetchall()
            reader.execute("SET lock_timeout = '1s'")  # under the creation's own: no reader waits longer
            try:
                (n,) = reader.execute("SELECT count(*) FROM items WHERE guid = 'g1'").fetchone()
            except psycopg.errors.LockNotAvailable:
                n = None
        holder.rollback()
        changes = making.result(timeout=120)
    items_made = [name for name, (action, _) in changes.items() if name.startswith("items_p") and action == "created"]
    ledger = {action for name, (action, _) in changes.items() if name.startswith("send_ledger_p")}
    assert held == [], "the creation holds items while it waits for the ledger"
    assert n == 0, "a reader of items waited for the creation"
    assert items_made and f"items_p{week(now + timedelta(days=21))}" in items_made, changes
    assert ledger and ledger <= {"created", "skipped"}, changes
    assert reconciler_ensure(database_url, 21) == {name: ("created", None) for name, (action, _) in changes.items()
                                                   if action == "skipped"}, "any skipped made at the next run, nothing else"

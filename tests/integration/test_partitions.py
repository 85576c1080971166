"""Time partitions on real Postgres: where a job's rows land, what retention drops and what it
must never touch (unfinished items, unapplied events, ledger keys still needed), the ledger's
one-row-per-key across partitions, and the upgrade of tables that held rows before."""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg.conninfo import make_conninfo

from pacer_common.db.migrate import migrate
from pacer_common.db.sql import migrations
from tests.integration.helpers import away_from_midnight, prune_partitions, seed_job, wait_for

RETAIN = {"items": 7, "item_events": 7, "send_ledger": 35, "audit_log": 400, "operator_conflicts": 90,
          "guid_state_history": 90}


def week(at: datetime) -> str:
    """The name suffix of the partition holding ``at`` in a table cut in 7-day periods (whole
    UTC days counted from the epoch)."""
    days = int(at.timestamp() // 86400)
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=days - days % 7)).strftime("%Y%m%d")


def partition_of(conn: psycopg.Connection[Any], table: str, item_id: str) -> str:
    row = conn.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE item_id = %s LIMIT 1",
                       (item_id,)).fetchone()
    assert row is not None, f"no {table} row of {item_id}"
    return str(row[0])


def sent(conn: psycopg.Connection[Any], item: str, key: str, guid: str = "g1") -> str:
    """Claim, reserve the key and confirm ``item`` as a sender would; the begin outcome."""
    conn.execute("SELECT pacer_acquire_guids(ARRAY[%s], 'w1', interval '1 hour')", (guid,))
    outcome, epoch = conn.execute(
        "SELECT outcome, epoch FROM pacer_begin_send(%s, 'w1', interval '1 minute', %s, %s, 'room')",
        (item, key, guid)).fetchone()
    if outcome == "submitted":
        conn.execute("SELECT * FROM pacer_confirm_many(ARRAY[%s]::uuid[], ARRAY[%s]::bigint[], ARRAY[%s],"
                     " ARRAY['{\"code\": 0}']::jsonb[])", (item, epoch, key))
    return str(outcome)


def cursors_at_the_end(conn: psycopg.Connection[Any]) -> None:
    """Every event so far applied: a reconciler cursor past the last one."""
    conn.execute("INSERT INTO log_cursors (name, last_xid, last_seq) VALUES ('reconciler/0of1', "
                 "pg_current_xact_id(), (SELECT max(seq) FROM item_events)) ON CONFLICT (name) DO UPDATE "
                 "SET last_xid = EXCLUDED.last_xid, last_seq = EXCLUDED.last_seq")


def prune(conn: psycopg.Connection[Any], now: datetime, retain: dict[str, int] | None = None,
          one_call: bool = False) -> dict[str, tuple[str, str | None]]:
    """The reconciler's prune, or (``one_call``) the one call a reconciler older than the
    schema makes (``pacer_prune_partitions``: everything in one transaction)."""
    if one_call:
        return {name: (action, detail) for name, action, detail in conn.execute(
            "SELECT * FROM pacer_prune_partitions(%s, %s::jsonb)", (now, json.dumps(retain or RETAIN))).fetchall()}
    return prune_partitions(conn, now, retain or RETAIN)


def test_a_jobs_items_events_and_ledger_keys_are_in_the_partitions_of_its_week(database_url: str) -> None:
    now = datetime.now(UTC)
    _, _, (item,) = seed_job(database_url, {"g1": 1}, created_at=now)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert sent(conn, item, "k-today") == "submitted"
        assert partition_of(conn, "items", item) == f"items_p{week(now)}"
        assert partition_of(conn, "item_events", item) == f"item_events_p{week(now)}"
        (ledger,) = conn.execute("SELECT partition FROM pacer_partitions('send_ledger') "
                                 "WHERE starts <= %s AND ends > %s", (now, now)).fetchone()
        assert ledger == f"send_ledger_p{week(now)}" == partition_of(conn, "send_ledger", item)
        # and nothing of it in a default partition
        for table in ("items", "item_events", "send_ledger"):
            (n,) = conn.execute(f"SELECT count(*) FROM {table}_default").fetchone()
            assert n == 0, table


def test_an_operators_retry_weeks_later_is_in_its_jobs_partition(database_url: str) -> None:
    then = datetime.now(UTC) - timedelta(days=10)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 0)", (then,))
    _, _, (item,) = seed_job(database_url, {"g1": 1}, status="failed", created_at=then)
    with psycopg.connect(database_url, autocommit=True) as conn:
        outcome, retry, _ = conn.execute("SELECT * FROM pacer_retry_item(%s, 'op')", (item,)).fetchone()
        assert outcome == "created"
        assert partition_of(conn, "items", str(retry)) == partition_of(conn, "items", item) == f"items_p{week(then)}"
        assert week(then) != week(datetime.now(UTC))


@pytest.mark.parametrize("one_call", [False, True], ids=["per_partition", "older_reconciler"])
def test_pruning_drops_finished_days_past_retention_and_keeps_unfinished_work_and_needed_keys(
        database_url: str, one_call: bool) -> None:
    now = datetime.now(UTC)
    # two weeks past the items' retention, within the ledger's 35 days
    old, older = now - timedelta(days=20), now - timedelta(days=27)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 30)", (now - timedelta(days=30),))
    _, _, (done_a, done_b) = seed_job(database_url, {"g1": 2}, created_at=older, key_prefix="reply:")
    _, _, (open_item,) = seed_job(database_url, {"g2": 1}, created_at=old)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert sent(conn, done_a, "reply:g1:0") == "submitted"
        assert sent(conn, done_b, "reply:g1:1") == "submitted"
        cursors_at_the_end(conn)
        ledger_week = partition_of(conn, "send_ledger", done_a)

        changes = prune(conn, now, one_call=one_call)
        assert changes[f"items_p{week(older)}"] == ("dropped", None)
        assert changes[f"item_events_p{week(older)}"] == ("dropped", None)
        assert changes[f"items_p{week(old)}"] == ("kept", "holds unfinished items")
        assert changes[f"item_events_p{week(old)}"] == ("kept", "the items of its days are still kept")
        assert ledger_week not in changes, "within the ledger's 35 days: not even a candidate"
        # the unfinished item and its history are all there; the finished day is gone
        (status,) = conn.execute("SELECT status::text FROM items WHERE item_id = %s", (open_item,)).fetchone()
        assert status == "pending"
        assert conn.execute("SELECT count(*) FROM item_events WHERE item_id = %s", (open_item,)).fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM items WHERE item_id IN (%s, %s)", (done_a, done_b)).fetchone() == (0,)

        # The key outlives its items: today's duplicate of that reply is still intercepted.
        _, _, (again,) = seed_job(database_url, {"g1": 1}, key_prefix="reply:")
        assert sent(conn, again, "reply:g1:0") == "duplicate"

        # Past the ledger's retention its weeks go, unless items of their days are still kept.
        open_week = f"send_ledger_p{week(old)}"
        later = prune(conn, now + timedelta(days=30), one_call=one_call)
        assert later[ledger_week] == ("dropped", None)
        assert later[f"items_p{week(old)}"] == ("kept", "holds unfinished items")
        assert later[open_week] == ("kept", "the items of its days are still kept")
        conn.execute("UPDATE items SET status = 'abandoned' WHERE item_id = %s", (open_item,))
        cursors_at_the_end(conn)
        last = prune(conn, now + timedelta(days=30), one_call=one_call)
        assert last[f"items_p{week(old)}"] == ("dropped", None) and last[open_week] == ("dropped", None)


def test_events_a_reconciler_has_not_applied_are_kept(database_url: str) -> None:
    now = datetime.now(UTC)
    old = now - timedelta(days=20)  # its week ended at least 13 days ago: past the items' 7
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 0)", (old,))
        conn.execute("INSERT INTO log_cursors (name) VALUES ('reconciler/0of1')")  # at the start of the log
    _, _, (item,) = seed_job(database_url, {"g1": 1}, created_at=old)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert sent(conn, item, "k-old") == "submitted"
        changes = prune(conn, now)
        assert changes[f"items_p{week(old)}"] == ("dropped", None)
        assert changes[f"item_events_p{week(old)}"] == ("kept", "holds events a reconciler cursor has not passed")
        assert conn.execute("SELECT count(*) FROM item_events WHERE item_id = %s", (item,)).fetchone()[0] > 0


def test_a_key_reserved_in_one_partition_is_a_duplicate_for_an_item_of_another(database_url: str) -> None:
    """No index spans the ledger's partitions: the key's lock makes the second reservation wait
    for the first, then see it."""
    now = datetime.now(UTC)
    _, _, (first,) = seed_job(database_url, {"g1": 1}, created_at=now - timedelta(days=8), key_prefix="reply:")
    _, _, (second,) = seed_job(database_url, {"g2": 1}, key_prefix="reply:")
    holder = psycopg.connect(database_url)
    holder.execute("SELECT pacer_acquire_guids(ARRAY['g1'], 'w1', interval '1 hour')")
    (outcome,) = holder.execute("SELECT outcome FROM pacer_begin_send(%s, 'w1', interval '1 minute', 'reply:x', "
                                "'g1', 'room')", (first,)).fetchone()
    assert outcome == "submitted"  # not committed yet
    other = psycopg.connect(database_url, autocommit=True)
    pid = other.info.backend_pid
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(sent(other, second, "reply:x", guid="g2")))
    thread.start()
    with psycopg.connect(database_url, autocommit=True) as watch:
        wait_for(lambda: watch.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                                       (pid,)).fetchone() == ("advisory",), what="the second reservation waiting")
    holder.commit()
    thread.join(timeout=30)
    holder.close()
    other.close()
    assert result == ["duplicate"]
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT item_id::text, tableoid::regclass::text FROM send_ledger "
                            "WHERE idem_key = 'reply:x'").fetchall()
    assert [r[0] for r in rows] == [first]


def test_rows_of_a_day_without_a_partition_wait_in_the_default_and_move_when_it_is_created(
        database_url: str) -> None:
    ahead = datetime.now(UTC) + timedelta(days=30)  # past the partitions made ahead
    _, _, (item,) = seed_job(database_url, {"g1": 1}, created_at=ahead)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert partition_of(conn, "items", item) == "items_default"
        assert "items_default" in prune(conn, datetime.now(UTC))  # reported: the default holds rows
        made = {name: detail for name, action, detail in conn.execute(
            "SELECT * FROM pacer_ensure_partitions(%s, 0)", (ahead,)).fetchall() if action == "created"}
        assert made[f"items_p{week(ahead)}"] == "1 rows moved from the default partition"
        assert partition_of(conn, "items", item) == f"items_p{week(ahead)}"
        assert "items_default" not in prune(conn, datetime.now(UTC))


def test_tables_that_held_rows_before_partitioning_keep_them_and_their_keys(database_url: str) -> None:
    """Upgrade: a database at migration 26 with rows, then migrate(): the rows are read through
    the partitioned tables, identities go on from where they stood, a ledger key is still one."""
    head, _, _ = database_url.rpartition("/")
    name = "pacer_upgrade_27"
    with psycopg.connect(f"{head}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    url = f"{head}/{name}"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
                         " applied_at timestamptz NOT NULL DEFAULT now())")
            for version, mig, sql in migrations():
                if version >= 27:
                    break
                conn.execute(sql)
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, mig))
            conn.execute("INSERT INTO audit_log (actor, action, target_type, target_id) VALUES ('a', 'x', 'job', '1')")
            conn.execute("INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state) VALUES "
                         "('old-key', '6f1c1bde-43a1-4a4e-9d1e-5d0f0f0f0f0f', 'g1', 'room', 'sent')")
        migrate(url)
        _, _, (item,) = seed_job(url, {"g1": 1})
        with psycopg.connect(url, autocommit=True) as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM audit_log ORDER BY id")]
            conn.execute("INSERT INTO audit_log (actor, action, target_type, target_id) VALUES ('a', 'y', 'job', '1')")
            after = [r[0] for r in conn.execute("SELECT id FROM audit_log ORDER BY id")]
            assert len(ids) == 1 and after[-1] > ids[0]
            assert sent(conn, item, "old-key") == "duplicate"
            assert conn.execute("SELECT tableoid::regclass::text FROM send_ledger WHERE idem_key = 'old-key'"
                                ).fetchone() == ("send_ledger_default",)
            # a second migrate() is a no-op, and the partitions of today exist
            migrate(url)
            assert partition_of(conn, "items", item) == f"items_p{week(datetime.now(UTC))}"
    finally:
        with psycopg.connect(f"{head}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_finished_jobs_go_with_their_items_and_no_sooner(database_url: str) -> None:
    """A finished job past the items' retention whose items all went with their partitions is
    deleted with its shards, counts and target pages; a job with an item left, an unfinished
    job and a recent one stay."""
    now = datetime.now(UTC)
    gone_at, kept_at = now - timedelta(days=27), now - timedelta(days=20)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 30)", (now - timedelta(days=30),))
    done, done_shards, (done_item,) = seed_job(database_url, {"g1": 1}, created_at=gone_at)
    with_item, _, _ = seed_job(database_url, {"g2": 1}, created_at=kept_at)  # its item is unfinished
    running, _, _ = seed_job(database_url, {}, created_at=gone_at)  # no items, still running
    recent, _, _ = seed_job(database_url, {}, created_at=now - timedelta(days=1))
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert sent(conn, done_item, "k-done") == "submitted"
        conn.execute("UPDATE jobs SET status = 'completed' WHERE job_id = ANY(%s::uuid[])",
                     ([done, with_item, recent],))
        conn.execute("INSERT INTO job_target_pages (job_id, page_no, fetched, added, duplicates, invalid, fetched_at)"
                     " VALUES (%s, 1, 1, 1, 0, 0, now())", (done,))
        cursors_at_the_end(conn)
        before = prune(conn, now)
        assert before[f"items_p{week(gone_at)}"] == ("dropped", None)
        assert before[f"items_p{week(kept_at)}"] == ("kept", "holds unfinished items")

        (pruned,) = conn.execute("SELECT pacer_prune_jobs(%s - interval '7 days')", (now,)).fetchone()
        assert pruned == 1
        left = {str(j) for (j,) in conn.execute("SELECT job_id FROM jobs")}
        assert left == {with_item, running, recent}
        for table in ("shards", "job_target_pages"):
            (n,) = conn.execute(f"SELECT count(*) FROM {table} WHERE job_id = %s", (done,)).fetchone()
            assert n == 0, table
        (n,) = conn.execute("SELECT count(*) FROM shard_status_counts WHERE shard_id = %s", (done_shards["g1"],)
                            ).fetchone()
        assert n == 0, "shard_status_counts"
        (n,) = conn.execute("SELECT count(*) FROM shards WHERE job_id = %s", (with_item,)).fetchone()
        assert n == 1, "a job with an item left keeps its shards"
        # nothing more to do: a second run deletes nothing
        assert conn.execute("SELECT pacer_prune_jobs(%s - interval '7 days')", (now,)).fetchone() == (0,)


def test_a_finished_job_stays_while_a_lagging_reconciler_has_its_events_to_apply(database_url: str) -> None:
    """Past retention, with every item finished, the items' partition goes at once; the events'
    partition stays while a reconciler cursor is short of its events, and so does the job
    (with its shards and counts, which applying those events needs). It goes once the cursor
    has passed them and their partition is dropped."""
    now = datetime.now(UTC)
    old = now - timedelta(days=27)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 30)", (now - timedelta(days=30),))
    job, _, (item,) = seed_job(database_url, {"g1": 1}, created_at=old)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert sent(conn, item, "k-lag") == "submitted"
        conn.execute("UPDATE jobs SET status = 'completed' WHERE job_id = %s", (job,))
        conn.execute("INSERT INTO log_cursors (name, last_xid, last_seq) VALUES ('reconciler/0of1', '0', 0)")
        first = prune(conn, now)
        assert first[f"items_p{week(old)}"] == ("dropped", None)
        assert first[f"item_events_p{week(old)}"] == ("kept", "holds events a reconciler cursor has not passed")
        assert conn.execute("SELECT pacer_prune_jobs(%s - interval '7 days')", (now,)).fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM shards WHERE job_id = %s", (job,)).fetchone() == (1,)

        cursors_at_the_end(conn)
        assert prune(conn, now)[f"item_events_p{week(old)}"] == ("dropped", None)
        assert conn.execute("SELECT pacer_prune_jobs(%s - interval '7 days')", (now,)).fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM jobs WHERE job_id = %s", (job,)).fetchone() == (0,)


def test_an_items_partition_holding_an_item_in_any_status_it_can_leave_is_kept(database_url: str) -> None:
    """The items' guard asks of a literal list of statuses, each of a partial index: it must be
    every status an item can still leave (item_transitions), or a partition holding an item in
    a status it left out would be dropped with it."""
    now = datetime.now(UTC)
    old = now - timedelta(days=20)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 30)", (now - timedelta(days=30),))
        unfinished = [s for (s,) in conn.execute("SELECT DISTINCT from_status::text FROM item_transitions ORDER BY 1")]
        (guard,) = conn.execute("SELECT guard FROM partitioned_tables WHERE parent = 'items'").fetchone()
    assert len(unfinished) >= 6
    # written out in the guard, not read from item_transitions (which no index answers)
    assert "item_transitions" not in guard
    assert sorted(set(re.findall(r"'(\w+)'", guard))) == unfinished
    partition = f"items_p{week(old)}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        for status in unfinished:
            _, _, (item,) = seed_job(database_url, {"g1": 1}, status=status, created_at=old)
            assert prune(conn, now, {"items": 7})[partition] == ("kept", "holds unfinished items"), status
            conn.execute("UPDATE items SET status = 'abandoned' WHERE item_id = %s", (item,))
        assert prune(conn, now, {"items": 7})[partition] == ("dropped", None), "finished items only: it goes"


def test_a_partition_that_cannot_be_dropped_stops_neither_the_others_nor_the_rest_of_the_maintenance(
        database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """An items partition past retention whose DROP fails (a view depends on it) is reported by
    name, counted, and left for the next run; the partitions after it are dropped, and the
    finished jobs and the tenants' send counts past retention are pruned all the same."""

    from pacer_reconciler.metrics import ReconcilerMetrics

    now = datetime.now(UTC)
    stuck_at, gone_at = now - timedelta(days=27), now - timedelta(days=20)  # the stuck one first
    stuck, gone = f"items_p{week(stuck_at)}", f"items_p{week(gone_at)}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 30)", (now - timedelta(days=30),))
    stuck_job, _, _ = seed_job(database_url, {"g1": 1}, status="confirmed", created_at=stuck_at)
    done_job, _, _ = seed_job(database_url, {"g2": 1}, status="confirmed", created_at=gone_at)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE jobs SET status = 'completed' WHERE job_id = ANY(%s::uuid[])", ([stuck_job, done_job],))
        conn.execute("INSERT INTO tenant_usage (tenant, day, sends) VALUES ('default', current_date - 500, 5)")
        conn.execute(f"CREATE VIEW stuck_items AS SELECT item_id FROM {stuck}")
    registry = CollectorRegistry()
    m = ReconcilerMetrics(registry, lambda: True)
    def failed() -> float | None:
        return registry.get_sample_value("pacer_reconciler_partitions_total", {"table": "items", "action": "failed"})

    def left() -> tuple[set[str], set[str], int]:
        with psycopg.connect(database_url) as conn:
            partitions = {p for (p,) in conn.execute("SELECT partition FROM pacer_partitions('items')")}
            jobs = {str(j) for (j,) in conn.execute("SELECT job_id FROM jobs")}
            (usage,) = conn.execute("SELECT count(*) FROM tenant_usage WHERE day < current_date - 400").fetchone()
        return partitions, jobs, usage

    with caplog.at_level(logging.INFO, logger="pacer.reconciler.retention"):
        maintenance_round(database_url, 3, m)
    partitions, jobs, usage = left()
    assert stuck in partitions and gone not in partitions, "the partition after the stuck one is dropped"
    assert done_job not in jobs and stuck_job in jobs, "the jobs whose items went are pruned; the other waits"
    assert usage == 0, "the send counts past retention are pruned"
    assert failed() == 1
    said = [r for r in caplog.records if r.name == "pacer.reconciler.retention" and r.levelno == logging.ERROR]
    assert [getattr(r, "partition", None) for r in said] == [stuck]
    assert stuck in said[0].getMessage() and "DependentObjectsStillExist" in said[0].getMessage()
    assert "view stuck_items depends on" in said[0].getMessage(), "what keeps it"

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP VIEW stuck_items")
    maintenance_round(database_url, 3, m)  # fixed: the next run drops it, and its job goes
    partitions, jobs, _ = left()
    assert stuck not in partitions and stuck_job not in jobs
    assert failed() == 1, "counted once, when it failed"


def test_a_partition_that_cannot_be_made_stops_neither_the_others_nor_the_rest_of_the_maintenance(
        database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A partition of the days ahead whose CREATE fails (a stray table has its name) is reported
    by name, counted, and tried again next run; every other partition ahead is made, and the
    pruning after it runs all the same."""

    from pacer_reconciler.metrics import ReconcilerMetrics

    ahead = 60
    with psycopg.connect(database_url, autocommit=True) as conn:
        missing = [(p, s) for p, s, _ in conn.execute("SELECT * FROM pacer_partitions_missing(now(), %s)", (ahead,))]
        stray = next(f"{p}_p{s.astimezone(UTC):%Y%m%d}" for p, s in missing if p == "items")
        conn.execute(f"CREATE TABLE {stray} (note text)")
        conn.execute("INSERT INTO tenant_usage (tenant, day, sends) VALUES ('default', current_date - 500, 5)")
    registry = CollectorRegistry()
    m = ReconcilerMetrics(registry, lambda: True)
    def failed() -> float | None:
        return registry.get_sample_value("pacer_reconciler_partitions_total", {"table": "items", "action": "failed"})

    def left_missing() -> list[str]:
        with psycopg.connect(database_url) as conn:
            return [f"{p}_p{s.astimezone(UTC):%Y%m%d}"
                    for p, s, _ in conn.execute("SELECT * FROM pacer_partitions_missing(now(), %s)", (ahead,))]

    with caplog.at_level(logging.INFO, logger="pacer.reconciler.retention"):
        maintenance_round(database_url, ahead, m)
    assert left_missing() == [stray], "every partition but the stray one's is made"
    assert failed() == 1
    said = [r for r in caplog.records if r.name == "pacer.reconciler.retention" and r.levelno == logging.ERROR]
    assert [getattr(r, "partition", None) for r in said] == [stray]
    assert "could not be created: DuplicateTable" in said[0].getMessage()
    with psycopg.connect(database_url) as conn:
        (usage,) = conn.execute("SELECT count(*) FROM tenant_usage WHERE day < current_date - 400").fetchone()
    assert usage == 0, "the pruning after the partitions ran"

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {stray}")
    maintenance_round(database_url, ahead, m)  # fixed: the next run makes it
    assert left_missing() == []
    assert failed() == 1, "counted once, when it failed"


def test_days_of_tenant_send_counts_past_retention_are_deleted_and_the_rest_kept(database_url: str) -> None:
    import asyncio

    from pacer_common.db.pool import open_pool
    from pacer_reconciler.adapters.partitions import PostgresPartitions

    away_from_midnight()  # the prune and the reads below each count the days back from their own today
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme')")
        conn.execute("INSERT INTO tenant_usage (tenant, day, sends) SELECT t, (now() AT TIME ZONE 'UTC')::date - d, 5"
                     " FROM unnest(ARRAY['default', 'acme']) AS t, unnest(ARRAY[0, 1, 30, 31, 400]) AS d")

    async def prune(days: int) -> int:
        pool = await open_pool(database_url, min_size=1, max_size=1)
        try:
            return await PostgresPartitions(pool).prune_usage(days)
        finally:
            await pool.close()

    assert asyncio.run(prune(30)) == 4  # days 31 and 400 of both tenants
    assert asyncio.run(prune(30)) == 0
    with psycopg.connect(database_url) as conn:
        left = conn.execute("SELECT tenant, (now() AT TIME ZONE 'UTC')::date - day FROM tenant_usage"
                            " ORDER BY 1, 2").fetchall()
    assert left == [(t, d) for t in ("acme", "default") for d in (0, 1, 30)]


def test_a_senders_published_limits_live_while_it_does_and_go_a_day_after_it_stopped(database_url: str) -> None:
    import asyncio

    from pacer_common.db.pool import open_pool
    from pacer_common.lifecycle import every
    from pacer_reconciler.adapters.partitions import PostgresPartitions
    from pacer_sender.adapters.postgres import publish_limits

    async def scenario() -> tuple[int, int]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            stop = asyncio.Event()
            task = asyncio.create_task(every(lambda: publish_limits(pool, "alive", {"per_day": 7}), stop, 300.0,
                                             "publishing"))
            await publish_limits(pool, "gone", {"per_day": 9})
            async with pool.connection() as conn:
                await conn.execute("UPDATE sender_limits SET seen_at = now() - interval '25 hours'"
                                   " WHERE owner = 'gone'")
            stop.set()
            await task
            partitions = PostgresPartitions(pool)
            return await partitions.prune_senders(), await partitions.prune_senders()
        finally:
            await pool.close()

    assert asyncio.run(scenario()) == (1, 0)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT owner, limits FROM sender_limits").fetchall() == [("alive", {"per_day": 7})]


TABLES = ("items", "item_events", "send_ledger", "audit_log", "operator_conflicts", "guid_state_history")


def current_partition(conn: psycopg.Connection[Any], table: str) -> str:
    return str(conn.execute("SELECT partition FROM pacer_partitions(%s) WHERE starts <= now() AND ends > now()",
                            (table,)).fetchone()[0])


def reltuples(conn: psycopg.Connection[Any], partition: str) -> float:
    return float(conn.execute("SELECT reltuples FROM pg_class WHERE relname = %s", (partition,)).fetchone()[0])


def fill_unanalyzed(conn: psycopg.Connection[Any], partition: str, rows: int) -> None:
    """``rows`` audit rows (about 1.8 MB for 4,000) in ``partition``, the audit log's current
    one, with autovacuum kept off it so that nothing but the test analyzes it."""
    conn.execute(psycopg.sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
        psycopg.sql.Identifier(partition)))
    conn.execute("INSERT INTO audit_log (actor, action, target_type, target_id, reason)"
                 " SELECT 'op', 'retry', 'item', g::text, repeat('x', 400) FROM generate_series(1, %s) g", (rows,))


def stats_rounds(url: str, rounds: int) -> tuple[list[int], CollectorRegistry]:
    """``rounds`` runs of the reconciler's first-statistics keeper on ``url``: what each analyzed."""
    import asyncio

    from pacer_common.db.pool import open_pool
    from pacer_reconciler.adapters.partitions import PostgresPartitions
    from pacer_reconciler.metrics import ReconcilerMetrics
    from pacer_reconciler.retention import PartitionStats

    registry = CollectorRegistry()

    async def run() -> list[int]:
        pool = await open_pool(url, min_size=1, max_size=1)
        try:
            stats = PartitionStats(PostgresPartitions(pool), ReconcilerMetrics(registry, lambda: True), TABLES)
            return [await stats.round() for _ in range(rounds)]
        finally:
            await pool.close()

    return asyncio.run(run()), registry


def test_a_partition_filled_before_autovacuum_reached_it_is_analyzed_once(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        big, small = current_partition(conn, "audit_log"), current_partition(conn, "guid_state_history")
        fill_unanalyzed(conn, big, 4000)
        conn.execute(psycopg.sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
            psycopg.sql.Identifier(small)))
        conn.execute("INSERT INTO guid_state_history (guid, state, event_ts, source)"
                     " SELECT 'g' || g, 'online', now(), 'test' FROM generate_series(1, 10) g")
        assert reltuples(conn, big) < 0 and reltuples(conn, small) < 0  # never analyzed

    analyzed, registry = stats_rounds(database_url, 2)
    assert analyzed == [1, 0]  # once: then it has statistics
    with psycopg.connect(database_url) as conn:
        assert reltuples(conn, big) == 4000
        assert reltuples(conn, small) < 0, "10 rows are below the size worth analyzing"
    assert registry.get_sample_value("pacer_reconciler_partitions_total",
                                     {"table": "audit_log", "action": "analyzed"}) == 1


def test_a_partition_analyzed_while_empty_is_analyzed_again_once_it_holds_rows(database_url: str) -> None:
    # An ANALYZE of the whole database (after an upgrade, say) gives the empty partitions of
    # the days ahead statistics that say "empty"; plans made from them scan the partition.
    with psycopg.connect(database_url, autocommit=True) as conn:
        big = current_partition(conn, "audit_log")
        conn.execute(psycopg.sql.SQL("ANALYZE {}").format(psycopg.sql.Identifier(big)))
        assert reltuples(conn, big) == 0
        fill_unanalyzed(conn, big, 4000)
        wait_for(lambda: conn.execute("SELECT pg_stat_get_live_tuples(%s::regclass)", (big,)).fetchone()[0] > 0,
                 what="the cumulative statistics to count the rows")
        assert reltuples(conn, big) == 0

    analyzed, registry = stats_rounds(database_url, 2)
    assert analyzed == [1, 0]
    with psycopg.connect(database_url) as conn:
        assert reltuples(conn, big) == 4000
    assert registry.get_sample_value("pacer_reconciler_partitions_without_statistics", {"table": "audit_log"}) == 0


def test_a_partition_this_user_may_not_analyze_is_reported_once_and_left_to_its_owner(
        database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    # Postgres skips, with a warning and no error, a table the user neither owns nor may
    # maintain: a service user with only the rights to read and write rows, say.
    import asyncio

    from pacer_common.db.pool import open_pool
    from pacer_reconciler.adapters.partitions import PostgresPartitions
    from pacer_reconciler.metrics import ReconcilerMetrics
    from pacer_reconciler.retention import PartitionStats

    role = f"pacer_rows_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        big = current_partition(conn, "audit_log")
        fill_unanalyzed(conn, big, 4000)
        conn.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(psycopg.sql.Identifier(role)))
        conn.execute(psycopg.sql.SQL("GRANT SELECT ON partitioned_tables TO {}").format(psycopg.sql.Identifier(role)))
    registry = CollectorRegistry()

    def without() -> float | None:
        return registry.get_sample_value("pacer_reconciler_partitions_without_statistics", {"table": "audit_log"})

    async def run() -> tuple[list[int], list[float | None]]:
        pool = await open_pool(make_conninfo(database_url, user=role), min_size=1, max_size=1)
        try:
            stats = PartitionStats(PostgresPartitions(pool), ReconcilerMetrics(registry, lambda: True), TABLES)
            rounds, gauges = [], [without()]
            for k in range(3):
                if k == 2:  # its owner analyzes it
                    with psycopg.connect(database_url, autocommit=True) as conn:
                        conn.execute(psycopg.sql.SQL("ANALYZE {}").format(psycopg.sql.Identifier(big)))
                rounds.append(await stats.round())
                gauges.append(without())
            return rounds, gauges
        finally:
            await pool.close()

    try:
        with caplog.at_level(logging.INFO, logger="pacer.reconciler.retention"):
            rounds, gauges = asyncio.run(run())
            with psycopg.connect(database_url) as conn:
                assert reltuples(conn, big) == 4000  # the owner's ANALYZE, not the role's
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(psycopg.sql.Identifier(role)))
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))
    assert rounds == [0, 0, 0]
    assert gauges == [0, 1, 1, 0], "counted while it has no statistics, 0 once its owner analyzed it"
    said = [r.getMessage() for r in caplog.records if r.name == "pacer.reconciler.retention"]
    assert len(said) == 1 and big in said[0] and "may not ANALYZE" in said[0], said
    assert registry.get_sample_value("pacer_reconciler_partitions_total",
                                     {"table": "audit_log", "action": "not_analyzed"}) == 1
    assert registry.get_sample_value("pacer_reconciler_partitions_total",
                                     {"table": "audit_log", "action": "analyzed"}) is None


def test_a_grant_on_a_partitioned_table_reaches_its_partitions_old_and_new(database_url: str) -> None:
    # Postgres carries no grant of a partitioned table to its partitions: a reconciler user
    # granted MAINTAIN on audit_log could not ANALYZE one of them. The partition run copies it.
    role = f"pacer_maint_{uuid.uuid4().hex[:8]}"
    ident = psycopg.sql.Identifier(role)

    def partitions(conn: psycopg.Connection[Any], table: str) -> list[str]:
        return [r[0] for r in conn.execute("SELECT inhrelid::regclass::text FROM pg_inherits"
                                           " WHERE inhparent = %s::regclass ORDER BY 1", (table,))]

    def may(conn: psycopg.Connection[Any], partition: str, privilege: str) -> bool:
        return bool(conn.execute("SELECT has_table_privilege(%s, %s, %s)", (role, partition, privilege)).fetchone()[0])

    def ensure(conn: psycopg.Connection[Any], days_on: int) -> list[tuple[str, str, str | None]]:
        return conn.execute("SELECT * FROM pacer_ensure_partitions(now() + make_interval(days => %s), 3)",
                            (days_on,)).fetchall()

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(ident))
        try:
            # The days ahead of now made first: the template database made them ahead of when the
            # suite started, and the role, which may make none, asks for those ahead of now below.
            ensure(conn, 0)
            conn.execute(psycopg.sql.SQL("GRANT SELECT, MAINTAIN ON audit_log TO {}").format(ident))
            conn.execute(psycopg.sql.SQL("GRANT SELECT ON items TO {} WITH GRANT OPTION").format(ident))
            before = partitions(conn, "audit_log")
            assert not any(may(conn, p, "MAINTAIN") for p in before), "Postgres itself does not carry it"

            first = ensure(conn, 60)  # two months on: new partitions, and the grants on all
            audit, items = partitions(conn, "audit_log"), partitions(conn, "items")
            created = {p for p, action, _ in first if action == "created"}
            granted = {(p, d) for p, action, d in first if action == "granted"}
            assert set(audit) - set(before) <= created and len(audit) > len(before)
            assert all(may(conn, p, "MAINTAIN") and may(conn, p, "SELECT") for p in audit)
            assert not any(may(conn, p, "UPDATE") for p in audit), "only what the table has"
            assert all(may(conn, p, "SELECT WITH GRANT OPTION") for p in items)
            assert {p for p, _ in granted} == set(audit) | set(items)
            assert (audit[0], f"MAINTAIN, SELECT to {role}, as on audit_log") in granted
            assert (items[0], f"SELECT to {role} with grant option, as on items") in granted
            assert [r for r in ensure(conn, 60) if r[1] == "granted"] == [], "nothing lacking: nothing granted"

            # A user that acts for no partition's owner grants nothing (and fails nothing).
            conn.execute(psycopg.sql.SQL("GRANT INSERT ON audit_log TO {}").format(ident))
            conn.execute(psycopg.sql.SQL("GRANT SELECT ON partitioned_tables TO {}").format(ident))
            with psycopg.connect(make_conninfo(database_url, user=role), autocommit=True) as theirs:
                assert [r for r in ensure(theirs, 0) if r[1] == "granted"] == []
            assert not may(conn, audit[0], "INSERT")
            assert {p for p, action, _ in ensure(conn, 0) if action == "granted"} == set(audit)
            assert all(may(conn, p, "INSERT") for p in audit)

            # With it, the role gives a new partition its first statistics.
            big = current_partition(conn, "audit_log")
            fill_unanalyzed(conn, big, 4000)
            analyzed, _ = stats_rounds(make_conninfo(database_url, user=role), 1)
            assert analyzed == [1] and reltuples(conn, big) == 4000
        finally:
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(ident))
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(ident))


@pytest.mark.parametrize("mode", ["SHARE UPDATE EXCLUSIVE", "ACCESS EXCLUSIVE"])
def test_a_partition_another_session_has_locked_is_left_for_the_next_round(database_url: str, mode: str) -> None:
    # Autovacuum analyzing it (SHARE UPDATE EXCLUSIVE), or DDL on it (ACCESS EXCLUSIVE): the
    # round waits at most its lock timeout, analyzes nothing, and the next one gets it.
    with psycopg.connect(database_url, autocommit=True) as conn:
        big = current_partition(conn, "audit_log")
        fill_unanalyzed(conn, big, 4000)
    with psycopg.connect(database_url) as holder:
        holder.execute(psycopg.sql.SQL("LOCK TABLE {} IN " + mode + " MODE").format(psycopg.sql.Identifier(big)))
        busy, registry = stats_rounds(database_url, 1)
        holder.rollback()
    assert busy == [0]
    assert registry.get_sample_value("pacer_reconciler_partitions_without_statistics", {"table": "audit_log"}) == 0
    assert stats_rounds(database_url, 1)[0] == [1]
    with psycopg.connect(database_url) as conn:
        assert reltuples(conn, big) == 4000


def test_while_another_replica_analyzes_this_one_does_nothing(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        big = current_partition(conn, "audit_log")
        fill_unanalyzed(conn, big, 4000)
    with psycopg.connect(database_url) as other:
        other.execute("SELECT pg_advisory_xact_lock(hashtext('pacer_partition_stats'))")
        rounds, _ = stats_rounds(database_url, 1)
        with psycopg.connect(database_url) as conn:
            assert reltuples(conn, big) < 0
        other.rollback()
    assert rounds == [0]
    assert stats_rounds(database_url, 1)[0] == [1]


def test_an_item_id_gives_back_the_time_it_was_made_from(database_url: str) -> None:
    at = datetime(2026, 12, 4, 13, 5, 7, 123456, tzinfo=UTC)
    with psycopg.connect(database_url) as conn:
        made, floor = conn.execute("SELECT pacer_item_id_time(pacer_item_id(%s)), pacer_item_id_time("
                                   "pacer_uuid7_floor(%s))", (at, at)).fetchone()
    assert made == floor == at.replace(microsecond=123000)


def maintenance_round(url: str, ahead_days: int, metrics: Any = None, period_days: int = 7) -> None:
    """One run of the reconcilers' partition maintenance (items kept 7 days), counted in
    ``metrics`` (a ``ReconcilerMetrics``; one of its own if none)."""
    import asyncio

    from pacer_common.db.pool import open_pool
    from pacer_reconciler.adapters.partitions import PostgresPartitions
    from pacer_reconciler.domain.retention import Retention
    from pacer_reconciler.metrics import ReconcilerMetrics
    from pacer_reconciler.retention import PartitionKeeper

    retention = Retention(items_days=7, ledger_days=35, audit_days=400, conflicts_days=90, state_history_days=90,
                          usage_days=400)
    m = metrics or ReconcilerMetrics(CollectorRegistry(), lambda: True)

    async def run() -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            await PartitionKeeper(PostgresPartitions(pool), retention, ahead_days, m, period_days).round()
        finally:
            await pool.close()

    asyncio.run(run())


def spans(conn: psycopg.Connection[Any], table: str) -> list[tuple[str, datetime, datetime]]:
    return [(str(n), s, e) for n, s, e in conn.execute("SELECT * FROM pacer_partitions(%s)", (table,)).fetchall()]


def assert_end_to_end(parts: list[tuple[str, datetime, datetime]]) -> None:
    """Each partition starts where the one before ends (no gap, no overlap), and is named after
    the day it starts (its bounds read back as created)."""
    assert all(a[2] == b[1] for a, b in itertools.pairwise(parts)), parts
    assert all(name.endswith(s.astimezone(UTC).strftime("%Y%m%d")) for name, s, _ in parts), parts


def test_a_change_of_period_cuts_the_partitions_made_after_it_end_to_end(
        database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """PACER_RECONCILER_PARTITION_PERIOD_DAYS changed on a running installation: the
    maintenance run cuts the partitions of items and their events that it makes from then on
    by the new period, from where the ones made already end; the ledger keeps its weeks."""


    now = datetime.now(UTC)
    with psycopg.connect(database_url, autocommit=True) as conn:
        weekly = spans(conn, "items")
        assert weekly and all(e - s == timedelta(days=7) for _, s, e in weekly)

        # Far enough ahead for a few days past the weeks made already, whatever today's weekday.
        ahead = (weekly[-1][2] - now).days + 4
        with caplog.at_level(logging.INFO, logger="pacer.reconciler.retention"):
            maintenance_round(database_url, ahead, period_days=1)
        said = [r.getMessage() for r in caplog.records if "made from now on" in r.getMessage()]
        assert sorted(said) == [f"partitions of {t} made from now on hold 1 day each (were 7 days); those made already "
                                "keep theirs" for t in ("item_events", "items")]
        daily = spans(conn, "items")
        assert daily[:len(weekly)] == weekly, "the partitions made already keep their periods"
        new = daily[len(weekly):]
        assert len(new) >= 3 and all(e - s == timedelta(days=1) for _, s, e in new)
        assert_end_to_end(daily)
        assert daily[-1][2] >= now + timedelta(days=ahead)

        _, _, (item,) = seed_job(database_url, {"g1": 1}, created_at=new[1][1] + timedelta(hours=12))
        assert partition_of(conn, "items", item) == new[1][0]

        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pacer.reconciler.retention"):
            maintenance_round(database_url, ahead + 21, period_days=7)
        assert sum("made from now on hold 7 days each (were 1 day)" in r.getMessage() for r in caplog.records) == 2
        after = spans(conn, "items")
        assert after[:len(daily)] == daily
        back = after[len(daily):]
        assert_end_to_end(after)
        assert back[0][2] - back[0][1] <= timedelta(days=7), "up to the next week's start"
        assert len(back) >= 2 and all(e - s == timedelta(days=7) for _, s, e in back[1:])
        assert [(s, e) for _, s, e in spans(conn, "item_events")] == [(s, e) for _, s, e in after]
        ledger = spans(conn, "send_ledger")
        assert_end_to_end(ledger)
        assert all(e - s == timedelta(days=7) for _, s, e in ledger) and ledger[-1][2] >= now + timedelta(days=ahead + 21)
        assert conn.execute("SELECT count(*) FROM items_default").fetchone()[0] == 0

        # Each partition goes by its own period, whatever period_days says now: an hour past the
        # retention (7 days) of the first daily partition's end drops it and the weeks before
        # it, not the daily ones after it.
        at = new[0][2] + timedelta(days=7, hours=1)
        items = {n: a for n, (a, _) in prune(conn, at).items() if n.startswith("items_p")}
        assert items == {n: "dropped" for n, _, _ in [*weekly, new[0]]}, items


def test_a_reconciler_segment_with_no_events_does_not_keep_old_event_partitions_for_ever(
        database_url: str, kafka_config: dict[str, str], topic_prefix: str) -> None:
    """Two segments; every event of an old, finished week is in one of them. The other's cursor
    is where a new layout starts it: it has nothing to read and, until it moves, the prune keeps
    every event partition newer than it. With nothing to read, its reconciler moves it past the
    finished transactions, and the week's events go."""
    import asyncio

    from pacer_common.db.pool import open_pool
    from pacer_common.kafka import make_producer
    from pacer_reconciler.adapters.kafka import KafkaPublisher
    from pacer_reconciler.adapters.postgres import PostgresLog
    from pacer_reconciler.core import Reconciler

    now = datetime.now(UTC)
    older = now - timedelta(days=27)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pacer_ensure_partitions(%s, 30)", (now - timedelta(days=30),))
        (busy,) = conn.execute("SELECT (hashtext('g1') & 2147483647) % 2").fetchone()
    quiet = 1 - busy
    _, _, (done,) = seed_job(database_url, {"g1": 1}, created_at=older, key_prefix="reply:")
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert sent(conn, done, "reply:g1:0") == "submitted"
        conn.execute("INSERT INTO log_cursors (name, last_xid, last_seq) VALUES (%s, pg_current_xact_id(),"
                     " (SELECT max(seq) FROM item_events)), (%s, '0', 0)",
                     (f"reconciler/{busy}of2", f"reconciler/{quiet}of2"))
        assert prune(conn, now)[f"item_events_p{week(older)}"] == (
            "kept", "holds events a reconciler cursor has not passed")

    async def tail_the_quiet_segment() -> int:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            log_ = PostgresLog(pool, f"reconciler/{quiet}of2", timedelta(seconds=60), segments=2, segment=quiet)
            publisher = KafkaPublisher(make_producer(kafka_config), f"{topic_prefix}.item-outcomes",
                                       lambda lane: f"{topic_prefix}.item-commands")
            return await Reconciler(log_, log_, publisher).tail_once()
        finally:
            await pool.close()

    assert asyncio.run(tail_the_quiet_segment()) == 0, "nothing of its own to read"
    with psycopg.connect(database_url, autocommit=True) as conn:
        (passed,) = conn.execute("SELECT last_xid >= (SELECT max(xid) FROM item_events) FROM log_cursors"
                                 " WHERE name = %s", (f"reconciler/{quiet}of2",)).fetchone()
        assert passed, "the quiet segment's cursor moved past the finished transactions"
        assert prune(conn, now)[f"item_events_p{week(older)}"] == ("dropped", None)

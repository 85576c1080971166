"""Indexes of ``db/schema/indexes/`` are built by migrate partition by partition, concurrently:
item writes go on during the build, a build cut short is finished by the next migrate, a
second migrate waiting for the first does not hold its builds up, and the sweep uses the
bucket index only once it is valid."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from pacer_common.db.migrate import _LOCK_ID, migrate
from pacer_common.db.online_indexes import declared, ensure_online_indexes, partition_index_name
from pacer_sender.adapters.queue import PostgresGuidQueue
from tests.integration.helpers import run, seed_job, sql, wait_for

BUCKET = "items_guid_queued_bucket"


def _state(url: str, index: str = BUCKET) -> tuple[bool | None, dict[str, tuple[str, bool]]]:
    """The parent index's validity (None: absent) and, for each leaf partition of its table,
    the name and validity of the partition index attached to it."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (index,)).fetchone()
        attached = conn.execute(
            "SELECT x.indrelid::regclass::text, t.relid::regclass::text, x.indisvalid"
            " FROM pg_partition_tree(%s::regclass) t JOIN pg_index x ON x.indexrelid = t.relid"
            " WHERE t.isleaf", (index,)).fetchall() if row else []
    by_table = {table: (name, bool(valid)) for table, name, valid in attached}
    return (None if row is None else bool(row[0])), by_table


def _leaves(url: str, table: str = "items") -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute(
            "SELECT relid::regclass::text FROM pg_partition_tree(%s::regclass) WHERE isleaf", (table,))}


def test_migrate_builds_every_declared_index_on_every_partition_and_then_leaves_it_be(database_url: str) -> None:
    tables = {i.name: i.table for i in declared()}
    assert tables == {"audit_log_tail": "audit_log", BUCKET: "items", "items_expire_due": "items"}
    for name, table in tables.items():
        valid, parts = _state(database_url, name)
        assert valid is True, name
        assert set(parts) == _leaves(database_url, table) and len(parts) >= 2, "the default partition and the days ahead"
        assert all(ok for _, ok in parts.values()), name
        assert parts[f"{table}_default"] == (f"{name}_default", True)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert ensure_online_indexes(conn) == [], "a valid index is not built again"


@contextmanager
def _old_snapshot(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A transaction holding a snapshot and no lock on items: a concurrent index build waits
    for it to end before it is done; a plain CREATE INDEX does not."""
    with psycopg.connect(url) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT count(*) FROM jobs").fetchone()
        yield conn
        conn.rollback()


def _with_lock_timeout(url: str) -> str:
    """``url`` whose sessions give up on a lock after 2 s."""
    return f"{url}{'&' if '?' in url else '?'}options=-c%20lock_timeout%3D2s"


def _concurrent_build(url: str) -> dict[str, Any] | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT command, phase, relid::regclass::text AS partition"
                           " FROM pg_stat_progress_create_index WHERE datname = current_database()").fetchone()
    return None if row is None else {"command": row[0], "phase": row[1], "partition": row[2]}


def test_item_writes_go_on_while_the_bucket_index_is_built(database_url: str) -> None:
    """Dropped, then rebuilt by migrate over items in the table: while a partition's index is
    being built, an item is updated and a new job's items are inserted, each under a lock
    timeout. The whole-table CREATE INDEX held them until the build was done."""
    _, _, items = seed_job(database_url, {f"wx-{n}": 5 for n in range(40)})
    sql(database_url, f"DROP INDEX {BUCKET}")
    errors: list[BaseException] = []

    def migrating() -> None:
        try:
            migrate(database_url)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    with _old_snapshot(database_url) as old:
        builder = threading.Thread(target=migrating)
        builder.start()
        # A partition's build, not the parent's (made ON ONLY items at once, empty: seen by chance).
        seen = wait_for(lambda: (b := _concurrent_build(database_url)) and b["partition"] != "items" and b, 30,
                        "a build of a partition's index")
        assert seen["command"] == "CREATE INDEX CONCURRENTLY"
        with psycopg.connect(database_url, autocommit=True) as writer:
            writer.execute("SET lock_timeout = '2s'")
            assert writer.execute("UPDATE items SET updated_at = now() WHERE item_id = %s", (items[0],)).rowcount == 1
        _, _, more = seed_job(_with_lock_timeout(database_url), {"wx-new": 3})
        assert _concurrent_build(database_url) is not None, "the writes went through while the build was under way"
        assert _state(database_url)[0] is False, "the parent index is not valid until every partition's is attached"
        old.rollback()
    builder.join(60)
    assert not builder.is_alive() and not errors, errors
    valid, parts = _state(database_url)
    assert valid is True and set(parts) == _leaves(database_url)
    found = run(database_url, lambda pool: PostgresGuidQueue(pool).waiting_guids(
        horizon_s=30, grace_s=20, owned=[(1, 0)]))
    assert {w.guid for w in found} == {f"wx-{n}" for n in range(40)} | {"wx-new"}, more


def test_a_build_cut_short_is_finished_by_the_next_migrate(database_url: str) -> None:
    """A partition's concurrent build cancelled leaves an invalid index and the parent invalid;
    the next migrate drops that one, builds it again and attaches every partition's."""
    seed_job(database_url, {"wx-1": 3, "wx-2": 3})
    sql(database_url, f"DROP INDEX {BUCKET}")
    (index,) = [i for i in declared() if i.name == BUCKET]
    child = partition_index_name(BUCKET, "items", "items_default")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE INDEX {BUCKET} ON ONLY items {index.definition}")
        with _old_snapshot(database_url):
            conn.execute("SET statement_timeout = '300ms'")
            with pytest.raises(psycopg.errors.QueryCanceled):
                conn.execute(f"CREATE INDEX CONCURRENTLY {child} ON items_default {index.definition}")
    with psycopg.connect(database_url) as conn:
        left = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (child,)).fetchone()
    assert left == (False,), "the cancelled build left an invalid index"
    assert _state(database_url)[0] is False

    migrate(database_url)
    valid, parts = _state(database_url)
    assert valid is True and set(parts) == _leaves(database_url)
    assert parts["items_default"] == (child, True)


def _session(url: str, application_name: str) -> tuple[str, str | None, str] | None:
    """(state, backend_xmin, last statement) of the session named ``application_name``."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT state, backend_xmin::text, query FROM pg_stat_activity"
                           " WHERE datname = current_database() AND application_name = %s",
                           (application_name,)).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def test_a_migrate_waiting_for_another_holds_no_snapshot_and_goes_on_once_it_is_done(
        database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """While a session holds the migration lock, as a running migrate does, a second migrate
    waits for it idle between tries, with no snapshot: the first one's CREATE INDEX
    CONCURRENTLY, which waits for every older snapshot, is not held up by it. (Waiting inside
    pg_advisory_lock, each waited for the other and Postgres aborted one.) Once the lock is
    released, the second migrate takes it and finishes."""
    caplog.set_level(logging.INFO, logger="pacer_common.db.migrate")
    name = "pacer-test-second-migrate"
    second_url = f"{database_url}{'&' if '?' in database_url else '?'}application_name={name}"
    applied: list[list[str]] = []
    errors: list[BaseException] = []

    def second() -> None:
        try:
            applied.append(migrate(second_url))
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    with psycopg.connect(database_url, autocommit=True) as first:
        first.execute("SELECT pg_advisory_lock(%s)", (_LOCK_ID,))
        waiting = threading.Thread(target=second)
        waiting.start()
        try:
            def idle_without_snapshot() -> bool:
                seen = _session(database_url, name)
                return seen is not None and seen[:2] == ("idle", None) and "pg_try_advisory_lock" in seen[2]

            wait_for(idle_without_snapshot, 15, "the second migrate idle between its tries for the lock, holding"
                     " no snapshot", describe=lambda: _session(database_url, name))
            first.execute("SET statement_timeout = '30s'")
            first.execute("CREATE TABLE concurrent_probe (n int)")
            first.execute("CREATE INDEX CONCURRENTLY concurrent_probe_n ON concurrent_probe (n)")
            assert waiting.is_alive() and not errors, errors
            assert any("waiting for the migration lock" in r.getMessage() for r in caplog.records)
        finally:
            first.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
        waiting.join(60)
    assert not waiting.is_alive() and not errors, errors
    assert applied == [[]]


def test_the_sweep_walks_every_guid_while_the_bucket_index_is_not_yet_valid(database_url: str) -> None:
    """An index made ON ONLY items with no partition's attached is there but not usable: the
    sweep walks every queued guid (and keeps its own) rather than probe the buckets without
    an index."""
    guids = [f"wx-{n}" for n in range(30)]
    seed_job(database_url, dict.fromkeys(guids, 1))
    sql(database_url, f"DROP INDEX {BUCKET}")
    (index,) = [i for i in declared() if i.name == BUCKET]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE INDEX {BUCKET} ON ONLY items {index.definition}")
    assert _state(database_url)[0] is False

    def walks(url: str) -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            row = conn.execute("SELECT sum(s.idx_scan)::int FROM pg_inherits i JOIN pg_stat_user_indexes s"
                               " ON s.indexrelid = i.inhrelid WHERE i.inhparent = 'items_guid_queued'::regclass"
                               ).fetchone()
        return row[0] if row else 0

    before = walks(database_url)
    found = run(database_url, lambda pool: PostgresGuidQueue(pool).waiting_guids(
        horizon_s=30, grace_s=20, owned=[(1, 0)]))
    assert {w.guid for w in found} == set(guids)
    # The walk: a probe per guid (and per partition of items), against at least one per bucket
    # (all 5760 of a one-partition topic) if it probed the buckets.
    assert 0 < walks(database_url) - before < 5760, "the walk over every queued guid, not the buckets"


def test_an_index_whose_condition_is_false_is_not_built(database_url: str) -> None:
    """Where the server has no CRC (before PostgreSQL 18) there is no bucket index."""
    sql(database_url, f"DROP INDEX {BUCKET}")
    sql(database_url, "CREATE OR REPLACE FUNCTION pacer_guid_crc(p_guid text) RETURNS bigint"
                      " LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT NULL::bigint $fn$")
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert ensure_online_indexes(conn) == []
    assert _state(database_url)[0] is None


def test_pacer_migrate_builds_the_event_index_for_the_segment_count_it_is_given(
        database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from pacer_common.cli import main

    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    with pytest.raises(SystemExit) as refused:
        main(["migrate", "--event-segments", "2000"])
    assert refused.value.code == 2
    assert "a segment count from 1 to 1024 (PACER_RECONCILER_SEGMENTS), not '2000'" in capsys.readouterr().err
    assert _state(database_url, "item_events_segment_8")[0] is None

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        with pytest.raises(SystemExit) as done:
            main(["migrate", "--event-segments", "8"])
    finally:  # the command's JSON logging, undone for the tests after this one
        root.handlers[:], root.level = handlers, level
    assert done.value.code == 0
    valid, parts = _state(database_url, "item_events_segment_8")
    assert valid is True and set(parts) == _leaves(database_url, "item_events")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    built = [(x["index"], x["partition"]) for x in lines if x["msg"] == "index built"]
    assert sorted(built) == sorted((name, table) for table, (name, _) in parts.items()), lines
    assert [x["index"] for x in lines if x["msg"].startswith("index valid")] == ["item_events_segment_8"]
    # JSON lines of the migrate service; none an error. A warning may come on a busy machine: a
    # build that waits past 10 s for an older transaction says so, and goes on.
    assert all(x["service"] == "migrate" for x in lines), lines
    assert not [x for x in lines if x["level"] not in ("info", "warning")], lines


def test_postgres_refuses_a_concurrent_build_on_a_partitioned_table(database_url: str) -> None:
    """Why the build goes partition by partition: the one-statement way is refused."""
    with psycopg.connect(database_url, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.FeatureNotSupported, match="partitioned"):
        conn.execute("CREATE INDEX CONCURRENTLY item_events_segment_3 ON item_events"
                     " (((hashtext(guid) & 2147483647) % 3), xid, seq)")


def test_a_partition_dropped_during_the_build_is_skipped_and_the_index_ends_valid(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Retention drops old partitions while migrate may be building: the partition gone is
    passed over, the others are built and attached."""
    from pacer_common.db import online_indexes

    sql(database_url, f"DROP INDEX {BUCKET}")
    victim = sorted(_leaves(database_url) - {"items_default"})[0]
    real = online_indexes._attach_partition

    def dropped_first(conn: psycopg.Connection[Any], index: str, table: str, definition: Any, partition: str,
                      partitioned: bool) -> int:
        if partition == victim:
            sql(database_url, f"DROP TABLE {victim}")
        return real(conn, index, table, definition, partition, partitioned)

    monkeypatch.setattr(online_indexes, "_attach_partition", dropped_first)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert ensure_online_indexes(conn) == [BUCKET]
    valid, parts = _state(database_url)
    assert victim not in _leaves(database_url)
    assert valid is True and set(parts) == _leaves(database_url)


def test_a_build_held_by_an_old_transaction_says_which_session_holds_it(
        database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A concurrent build outwaits every older transaction; while it does, it logs the session
    it waits for (pid, application, how long open, last statement), so that an operator can
    end it rather than watch the migrate Job run into its deadline."""
    from pacer_common.db import online_indexes

    monkeypatch.setattr(online_indexes, "WAIT_REPORT_S", 0.1)
    sql(database_url, f"DROP INDEX {BUCKET}")
    caplog.set_level(logging.INFO, logger="pacer_common.db.online_indexes")
    with psycopg.connect(database_url, autocommit=True) as conn, _old_snapshot(database_url) as old:
        old.execute("SET application_name = 'nightly-report'")
        holder = old.info.backend_pid
        builder = threading.Thread(target=lambda: ensure_online_indexes(conn))
        builder.start()
        try:
            waits = wait_for(lambda: [r for r in caplog.records if r.levelname == "WARNING"], 30,
                             "a warning naming the transaction the build waits for")
        finally:
            old.rollback()
            builder.join(60)
    detail = waits[0].__dict__["detail"]
    assert f"pid {holder} (nightly-report)" in detail and "waiting for old snapshots" in detail, detail
    assert "SET application_name" in detail, "its last statement"
    assert waits[0].__dict__["index"].startswith("items_guid_queued_bucket_")
    assert _state(database_url)[0] is True


def test_an_index_of_a_table_that_is_not_partitioned_is_built_concurrently_too(database_url: str) -> None:
    """``ON ONLY`` a plain table would build it there and then, holding its writes."""
    from pacer_common.db.online_indexes import OnlineIndex, build

    seed_job(database_url, {"wx-1": 2})
    index = OnlineIndex("jobs_created_by_online", "jobs", "(created_by)")
    with psycopg.connect(database_url, autocommit=True) as conn, _old_snapshot(database_url) as old:
        builder = threading.Thread(target=lambda: build(conn, index))
        builder.start()
        seen = wait_for(lambda: _concurrent_build(database_url), 30, "a concurrent build of the index")
        old.rollback()
        builder.join(60)
    assert seen == {"command": "CREATE INDEX CONCURRENTLY", "phase": seen["phase"], "partition": "jobs"}
    assert _state(database_url, "jobs_created_by_online") == (True, {})

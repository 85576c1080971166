"""Bring a database to today's schema, under an advisory lock.

Four parts, in this order, on every run:

1. the numbered migrations (``db/migrations/NNNN_name.sql``), each applied once, in order:
   tables, columns, indexes, types, data;
2. today's stored functions and triggers (``db/schema/functions/<name>.sql``,
   ``db/schema/triggers/<name>.sql``), all re-created in one transaction — each file is
   idempotent (``CREATE OR REPLACE``), so a database at any migration ends with exactly the
   definitions in those files;
3. the time partitions of the days ahead (``pacer_partitions_missing``, each made by ``pacer_create_partition``; the reconciler keeps
   creating them, and drops the ones past retention);
4. the indexes of ``db/schema/indexes/`` not yet valid, and the event log's index for the
   reconcilers' segment count when one is given, built partition by partition without
   holding the tables' writes (:mod:`pacer_common.db.online_indexes`);
5. audit entries restored from a logical backup put before the ones written here (their
   transaction ids are ahead of this cluster's; ``queries/audit_restored.sql``).

Migrations up to :data:`LAST_MIGRATION_WITH_FUNCTIONS` still define functions, as history;
a later one must not (``tests/unit/test_schema_files.py`` fails if one does).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import psycopg

from pacer_common.db.online_indexes import (
    SCHEMA_LOCK_TIMEOUT,
    WAIT_REPORT_S,
    ensure_online_indexes,
    event_segments_index,
    lock_retries,
)
from pacer_common.db.sql import migrations, query, schema_objects

log = logging.getLogger(__name__)
_LOCK_ID = 0x7061636572  # "pacer"
LOCK_POLL_S = 0.2  # between two tries for the migration lock held by another migrate
MIN_SERVER_VERSION = 140000
LAST_MIGRATION_WITH_FUNCTIONS = 18
PARTITIONS_AHEAD_DAYS = 3  # created at every migration (the reconciler keeps making them)
MOVE_TO_SCHEMA = (
    "stored functions and triggers are not defined in migrations after {last:04d}: put each in "
    "libs/common/pacer_common/db/schema/functions/<function>.sql or schema/triggers/<trigger>.sql "
    "(CREATE OR REPLACE; DROP FUNCTION IF EXISTS the old signature first if it changes), which "
    "migrate() re-applies after the migrations, then run `make schema-sql` (docs/architecture.md, "
    "\"Where the schema lives\")"
)
_ROUTINE = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:CONSTRAINT\s+)?(FUNCTION|PROCEDURE|TRIGGER)\s+([\w.\"]+)", re.IGNORECASE)
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)


def migrate(url: str, event_segments: int | None = None) -> list[str]:
    """Apply pending migrations, re-create every stored function and trigger, make the time
    partitions ahead and build the online indexes not yet built (with ``event_segments``,
    also the event log's index for that many reconciler segments); returns the names of the
    migrations applied. Safe to run concurrently."""
    extra = [event_segments_index(event_segments)] if event_segments and event_segments > 1 else []
    with psycopg.connect(url, autocommit=True) as conn:
        wait_for_migration_lock(conn)
        try:
            refuse_foreign_event_log(conn)
            applied = apply_migrations(conn)
            apply_schema_objects(conn)
            ensure_partitions(conn)
            ensure_online_indexes(conn, extra)
            settle_restored_audit(conn)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
    return applied


def wait_for_migration_lock(conn: psycopg.Connection[Any]) -> None:
    """Take the migration lock (``conn`` in autocommit), waiting as long as another migrate
    holds it, by trying it again between short sleeps, never in ``pg_advisory_lock``: a
    session waiting inside a statement holds a snapshot all the while, and the running
    migrate's ``CREATE INDEX CONCURRENTLY`` waits for every snapshot older than its own to go.
    Each waiting for the other, PostgreSQL breaks the deadlock by aborting one of them (a failed
    upgrade hook, an online build thrown away). Between tries this session is idle, with no
    snapshot; a try is a statement of its own that ends at once."""
    started = time.monotonic()
    reported: float | None = None
    while True:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK_ID,)).fetchone()
        if row is not None and row[0]:
            if reported is not None:
                log.info("took the migration lock", extra={"waited_s": round(time.monotonic() - started, 1)})
            return
        now = time.monotonic()
        if reported is None or now - reported >= WAIT_REPORT_S:
            log.info("waiting for the migration lock: another migrate is running",
                     extra={"waited_s": round(now - started, 1)})
            reported = now
        time.sleep(LOCK_POLL_S)


def apply_migrations(conn: psycopg.Connection[Any]) -> list[str]:
    """The numbered migrations not yet applied, each in its own transaction. A migration
    that alters a table waits for its lock at most ``SCHEMA_LOCK_TIMEOUT`` at a time (tried
    again with backoff, as the schema objects are): waiting longer, behind a long read of that
    table, it would queue every service's writes to it behind itself."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
    applied: list[str] = []
    for version, name, sql in migrations():
        if version in done:
            continue
        for attempt in lock_retries():
            with attempt, conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{SCHEMA_LOCK_TIMEOUT}'")
                conn.execute(sql)
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        log.info("applied migration", extra={"migration": name})
        applied.append(name)
    return applied


def ensure_partitions(conn: psycopg.Connection[Any]) -> None:
    """(``conn`` in autocommit.) The time partitions from yesterday to :data:`PARTITIONS_AHEAD_DAYS` ahead, each made in
    a transaction of its own (as the reconciler makes them: no table's default partition is
    held through another's lock wait), then the parents' grants given to them."""
    missing = conn.execute("SELECT * FROM pacer_partitions_missing(now(), %s)", (PARTITIONS_AHEAD_DAYS,)).fetchall()
    changes = []
    for parent, starts, ends in missing:
        with conn.transaction():
            changes += conn.execute("SELECT * FROM pacer_create_partition(%s, %s, %s)", (parent, starts, ends)).fetchall()
    with conn.transaction():
        changes += conn.execute("SELECT * FROM pacer_grant_partitions()").fetchall()
    for name, action, detail in changes:
        log.info("partition %s", action, extra={"partition": name, "detail": detail})


class ForeignEventLog(RuntimeError):
    """The reconcilers' cursors carry transaction ids this cluster has not reached."""


def refuse_foreign_event_log(conn: psycopg.Connection[Any]) -> None:
    """Refuse a database whose reconciler cursors carry transaction ids this cluster has not
    reached: a logical backup (pg_dump) restored into another cluster. The tails read events
    in transaction-id order after their cursors, so they would pass over every event written
    from now on until this cluster's ids overtook the old ones (docs/runbook.md, "Restoring
    Postgres from a backup"). Never true of a database that has only ever run here."""
    (present,) = conn.execute("SELECT to_regclass('log_cursors') IS NOT NULL").fetchone()  # type: ignore[misc]
    if not present:  # a new database
        return
    row = conn.execute("SELECT max(last_xid)::text, pg_snapshot_xmax(pg_current_snapshot())::text FROM log_cursors"
                       " WHERE last_xid >= pg_snapshot_xmax(pg_current_snapshot())").fetchone()
    if row is not None and row[0] is not None:
        raise ForeignEventLog(
            f"the reconcilers' log cursors are at transaction {row[0]}, which this cluster has not reached (it is"
            f" at {row[1]}): this database was restored from a logical backup (pg_dump) into another cluster, and"
            " its event log cannot be tailed here. Restore a physical backup (base backup or point-in-time recovery)"
            " instead (docs/runbook.md, \"Restoring Postgres from a backup\").")


def settle_restored_audit(conn: psycopg.Connection[Any]) -> None:
    """Audit entries with transaction ids this cluster has not reached yet (a logical restore)
    take position 0, so the audit tail does not wait for the cluster's ids to pass theirs."""
    if n := conn.execute(query("audit_restored")).rowcount:
        log.warning("audit entries restored from another cluster put first in the tail", extra={"entries": n})


def apply_schema_objects(conn: psycopg.Connection[Any]) -> None:
    """Every function file, then every trigger file, in one transaction."""
    if conn.info.server_version < MIN_SERVER_VERSION:
        raise RuntimeError(f"Pacer needs PostgreSQL 14 or later (CREATE OR REPLACE TRIGGER); "
                           f"this server is {conn.info.server_version}")
    for attempt in lock_retries():
        with attempt, conn.transaction():
            # Re-creating a trigger locks its table against writes until commit: never queue
            # the services' writes behind a long transaction for more than a moment.
            conn.execute(f"SET LOCAL lock_timeout = '{SCHEMA_LOCK_TIMEOUT}'")
            for path, sql in schema_objects():
                try:
                    conn.execute(sql)
                except psycopg.Error as exc:
                    exc.add_note(f"while applying pacer_common/db/schema/{path}")
                    raise


def defined_routines(sql: str) -> list[str]:
    """``"function <name>"`` / ``"trigger <name>"`` for each one ``sql`` creates (comments aside)."""
    return [f"{kind.lower()} {name}" for kind, name in _ROUTINE.findall(_COMMENT.sub("", sql))]

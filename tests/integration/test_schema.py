"""The migrated database is exactly ``schema.sql``, whatever migration it started from."""

from __future__ import annotations

import difflib
import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from pacer_common.db.migrate import migrate
from pacer_common.db.sql import migrations, schema_objects
from pacer_common.domain.commands import ItemCommand
from pacer_dev.infra import Infra
from pacer_dev.schema_dump import SCHEMA_SQL, dump, normalise
from tests.integration.helpers import seed_job


@pytest.fixture
def empty_db(infra_env: Infra) -> Iterator[str]:
    """A database with nothing in it (template0: not the suite's migrated template)."""
    head = infra_env.database_url.rpartition("/")[0]
    name = f"s_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(f"{head}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    yield f"{head}/{name}"
    with psycopg.connect(f"{head}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def migrated_by_an_earlier_release(url: str, upto: int) -> None:
    """The state an earlier release's ``migrate()`` left: the numbered migrations up to
    ``upto`` and nothing else (functions then lived only in migrations)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())")
        for version, name, sql in migrations():
            if version <= upto:
                with conn.transaction():
                    conn.execute(sql)
                    conn.execute("INSERT INTO schema_migrations VALUES (%s, %s)", (version, name))


def assert_is_schema_sql(url: str) -> None:
    got, want = dump(url), SCHEMA_SQL.read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "schema.sql", "migrated", n=2))
    assert got == want, f"the migrated database differs from schema.sql (run `make schema-sql` if intended):\n{diff}"


def test_a_fresh_database_migrates_to_schema_sql(empty_db: str) -> None:
    migrate(empty_db)
    assert_is_schema_sql(empty_db)


@pytest.mark.parametrize("upto", [18, 12, 8])
def test_a_database_migrated_by_an_earlier_release_reaches_the_same_schema(empty_db: str, upto: int) -> None:
    migrated_by_an_earlier_release(empty_db, upto)
    migrate(empty_db)
    assert_is_schema_sql(empty_db)


def test_a_job_stored_before_jobs_kept_their_trace_takes_it_from_a_planned_item(empty_db: str) -> None:
    """Migration 0029: a job's trace context, until then kept only on its items, moves onto the
    job from an item the planner stored, not from a compensation (which carries none); a job
    whose items carry none stays without."""
    trace = f"00-{'b' * 32}-{'2' * 16}-01"
    migrated_by_an_earlier_release(empty_db, 28)
    traced, _, (*rest, planned) = seed_job(empty_db, {"g1": 3})
    untraced, _, _ = seed_job(empty_db, {"g2": 1})
    with psycopg.connect(empty_db) as conn:
        conn.execute("UPDATE items SET compensates = %s WHERE item_id = ANY(%s::uuid[])", (planned, rest))
        # sent: after the pending compensations in the job's index and written after them
        conn.execute("UPDATE items SET traceparent = %s, status = 'confirmed' WHERE item_id = %s", (trace, planned))
    migrate(empty_db)
    with psycopg.connect(empty_db) as conn:
        got: dict[str, str | None] = dict(conn.execute("SELECT job_id::text, traceparent FROM jobs").fetchall())
    assert got == {traced: trace, untraced: None}


def test_a_job_completed_over_an_open_shard_runs_again_and_its_held_items_are_released(empty_db: str) -> None:
    """Migration 0035: a job a segment completed while another reopened one of its shards (the
    race refresh_shards.sql now closes) runs again, and the release sweep then frees the
    shard's items held "job completed"; a job whose shards are all completed stays completed."""
    migrated_by_an_earlier_release(empty_db, 34)
    stuck, _, (held,) = seed_job(empty_db, {"g1": 1})
    done, _, _ = seed_job(empty_db, {"g2": 1})
    with psycopg.connect(empty_db) as conn:
        conn.execute("UPDATE jobs SET status = 'completed', finished_at = now() WHERE job_id = ANY(%s::uuid[])",
                     ([stuck, done],))
        conn.execute("UPDATE shards SET status = CASE WHEN job_id = %s THEN 'running' ELSE 'completed' END"
                     " WHERE job_id = ANY(%s::uuid[])", (stuck, [stuck, done]))
        conn.execute("UPDATE items SET held = true WHERE item_id = %s", (held,))
    migrate(empty_db)
    with psycopg.connect(empty_db, autocommit=True) as conn:
        jobs = {j: (st, fin) for j, st, fin in conn.execute(
            "SELECT job_id::text, status, finished_at IS NOT NULL FROM jobs").fetchall()}
        assert jobs == {stuck: ("running", False), done: ("completed", True)}
        assert conn.execute("SELECT pacer_release_held(100)").fetchone() == (1,)
        assert conn.execute("SELECT held, status FROM items WHERE item_id = %s", (held,)).fetchone() == (False,
                                                                                                      "pending")


def test_every_migrate_restores_the_functions_and_triggers_in_the_files(empty_db: str) -> None:
    migrate(empty_db)
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("CREATE OR REPLACE FUNCTION pacer_hold_reason(p_job_status text, p_job_reason text,"
                     " p_shard_status text, p_shard_reason text, p_guid_reason text) RETURNS text"
                     " LANGUAGE sql IMMUTABLE AS $$ SELECT NULL::text $$")
        conn.execute("DROP TRIGGER jobs_hold_lifted ON jobs")
    assert migrate(empty_db) == []
    assert_is_schema_sql(empty_db)


def test_the_database_has_exactly_the_functions_and_triggers_that_have_files(empty_db: str) -> None:
    migrate(empty_db)
    files = {p.removesuffix(".sql") for p, _ in schema_objects()}
    with psycopg.connect(empty_db) as conn:
        functions = {f"functions/{r[0]}" for r in conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'")}
        triggers = {f"triggers/{r[0]}" for r in conn.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")}
        overloads = conn.execute("SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                                 " WHERE n.nspname = 'public' GROUP BY proname HAVING count(*) > 1").fetchall()
    assert functions | triggers == files
    assert overloads == []


def test_the_comparison_ignores_what_varies_with_pg_dump_and_nothing_else() -> None:
    header = ("--\n-- PostgreSQL database dump\n--\n\n\\restrict AbC123\n\n-- Dumped from database version 18.1\n"
              "-- Dumped by pg_dump version 18.1\n\nSET statement_timeout = 0;\nSET transaction_timeout = 0;\n"
              "SELECT pg_catalog.set_config('search_path', '', false);\n\n")
    body = "CREATE TABLE public.t (\n    a integer\n);\n\n\n\nCREATE INDEX i ON public.t USING btree (a);\n"
    assert normalise(header + body + "\n\\unrestrict AbC123\n") == normalise(body)
    assert normalise(body) != normalise(body.replace("integer", "bigint"))


def test_the_item_command_columns_are_those_of_an_item_command(database_url: str) -> None:
    """pacer_item_command is the one list of the columns a command is read back with."""
    with psycopg.connect(database_url) as conn:
        cur = conn.execute("SELECT * FROM pacer_item_command(NULL::items)")
        columns = [d.name for d in cur.description or []]
    assert columns == [f for f in ItemCommand.model_fields if f != "schema_version"]


def test_a_migration_that_finds_its_table_locked_gives_up_its_turn_and_applies_once_it_is_free(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A migration waiting for a table's lock queues every write to that table behind it: it
    waits a moment at a time and, after its tries, fails without applying anything."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

    from pacer_common.db import migrate as m

    probe = (99_001, "9001_lock_probe", "ALTER TABLE guid_leases ADD COLUMN lock_probe integer")
    monkeypatch.setattr(m, "migrations", lambda: [probe])
    monkeypatch.setattr(m, "SCHEMA_LOCK_TIMEOUT", "200ms")
    monkeypatch.setattr(m, "lock_retries", lambda: Retrying(
        retry=retry_if_exception_type(psycopg.errors.LockNotAvailable), stop=stop_after_attempt(2), reraise=True))
    with psycopg.connect(database_url) as reader:  # a long read of the table, its transaction open
        reader.execute("SELECT count(*) FROM guid_leases")
        with psycopg.connect(database_url, autocommit=True) as conn:
            met: list[BaseException] = []

            def apply() -> None:
                try:
                    m.apply_migrations(conn)
                except BaseException as exc:
                    met.append(exc)

            worker = threading.Thread(target=apply)
            worker.start()
            worker.join(30)
            queued = worker.is_alive()
            reader.rollback()  # lets a migration still queued go on
            worker.join()
            assert not queued, "the migration waited behind the long read, every writer queued behind it"
            assert len(met) == 1 and isinstance(met[0], psycopg.errors.LockNotAvailable), met
            applied = conn.execute("SELECT count(*) FROM schema_migrations WHERE version = 99001").fetchone()
            assert applied == (0,), "nothing of it is applied"
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert m.apply_migrations(conn) == ["9001_lock_probe"]
        assert conn.execute("SELECT count(lock_probe) FROM guid_leases").fetchone() == (0,)

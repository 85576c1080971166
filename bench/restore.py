"""``bench restore``: how fast ``pacer after-restore`` puts items in doubt, and how its
batches' time changes as the run goes on.

A database restored from a backup holds items scheduled later (left alone) as well as items
that may have been sent since (put in doubt). Here ``BENCH_RESTORE_LATER`` items scheduled a
day ahead are planned first, so they lie ahead of the ``BENCH_RESTORE_DUE`` due items in the
table, then the command's batches run (``BENCH_RESTORE_BATCH`` items each) as ``pacer
after-restore`` runs them, on one connection, nothing else running. ``items_per_s`` over the
whole run; ``ratio`` = the first full batch's time / the last one's (1: every batch costs the
same; below 1: later batches cost more). See docs/performance.md, "After a restore".
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg

from bench.common import CORES, drop_db, env_int, fresh_db, real_infra, seed_items
from pacer_common.db.sql import query

GUIDS = 1_000


def restore() -> str:
    due, later, batch = env_int("BENCH_RESTORE_DUE", 200_000), env_int("BENCH_RESTORE_LATER", 800_000), env_int(
        "BENCH_RESTORE_BATCH", 20_000)
    url = fresh_db(real_infra(), "restore")
    try:
        seed_items(url, GUIDS, later // GUIDS, not_before=datetime.now(UTC) + timedelta(days=1))
        seed_items(url, GUIDS, due // GUIDS)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE items")
            times: list[float] = []
            moved = 0
            started = time.monotonic()
            while True:
                t = time.monotonic()
                with conn.transaction():
                    rows = conn.execute(query("after_restore"), {"actor": "bench", "reason": "bench",
                                                                 "limit": batch}).fetchall()
                if not rows:
                    break
                times.append(time.monotonic() - t)
                moved += sum(r[1] for r in rows)
            total_s = time.monotonic() - started
    finally:
        drop_db(url)
    full = times[:-1] if len(times) > 1 and moved % batch else times
    return (f"bench restore: due={due} later={later} batch={batch} put_in_doubt={moved} batches={len(times)}"
            f" items_per_s={moved / total_s:.0f} first_batch_s={full[0]:.2f} last_batch_s={full[-1]:.2f}"
            f" ratio={full[0] / full[-1]:.2f} cores={CORES}")

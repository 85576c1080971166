"""``bench reconciler``: events per second one reconciler process applies, against a bare read
of the same events, and two processes against one.

``BENCH_RECONCILER_ITEMS`` confirmed items (three events each: claimed, submitted, confirmed)
are written straight into the log over 1,000 guids. Then, on that log:

* raw read: the reconciler's own tail SELECT over the whole log (one segment of one), 2,000
  rows a round, by the same driver (psycopg async, dict rows), nothing else;
* one: a reconciler process (16 segments, all its own) from ready until every segment's
  cursor stands at its last event: read, publish to Kafka, project, commit the cursor;
* two: the cursors and the projection are put back, and two processes share the segments.

``ratio`` = one / raw read; ``scaling`` = two / one; ``cpu_us_per_event_*``: the reconciler
processes' CPU time per event. Two processes do twice the work of one only with a core each
to spare: on a machine that Postgres and Kafka share, the CPU per event shows whether a
process got slower or only had no core to run on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from bench.common import CORES, cpu_s, env_int, fresh_db, real_infra, seed_items
from pacer_common.db.migrate import migrate
from pacer_dev.infra import Infra
from pacer_dev.segments import confirm_job, segment_ends, segments_behind
from pacer_dev.stack import Stack, drop_database, prepare
from pacer_reconciler.adapters.layout import segment_sql

SEGMENTS = 16
RESET = ("UPDATE log_cursors SET last_xid = '0', last_seq = 0",
         "DELETE FROM shard_status_counts",
         "INSERT INTO shard_status_counts (shard_id, status, n) SELECT shard_id, 'pending', total FROM shards",
         "UPDATE shards SET status = 'pending'", "UPDATE jobs SET status = 'running', finished_at = NULL")


def reconciler() -> str:
    items = env_int("BENCH_RECONCILER_ITEMS", 50_000)
    inf = real_infra()
    url = fresh_db(inf, "reconciler")
    try:
        migrate(url)
        seeded = seed_items(url, guids=1000, per_guid=max(1, items // 1000))
        events = confirm_job(url, seeded.job_id)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE item_events")
        raw_s = asyncio.run(_raw_read(url))
        ends = segment_ends(url, SEGMENTS)
        one_s, one_cpu = _run(inf, url, ends, replicas=1)
        with psycopg.connect(url) as conn:
            for sql in RESET:
                conn.execute(sql)
        two_s, two_cpu = _run(inf, url, ends, replicas=2)
    finally:
        drop_database(url)
    one, raw, two = events / one_s, events / raw_s, events / two_s
    return (f"bench reconciler: events={events} one_per_s={one:.0f} raw_read_per_s={raw:.0f} ratio={one / raw:.2f} "
            f"two_per_s={two:.0f} scaling={two / one:.2f} cpu_us_per_event_one={one_cpu / events * 1e6:.0f} "
            f"cpu_us_per_event_two={two_cpu / events * 1e6:.0f} cores={CORES}")


async def _raw_read(url: str) -> float:
    sql = segment_sql("read_events", 1)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        started = time.perf_counter()
        xid, seq = "0", 0
        while rows := await (await conn.execute(sql, {"segment": 0, "xid": xid, "seq": seq, "limit": 2000})).fetchall():
            xid, seq = rows[-1]["xid"], rows[-1]["seq"]
        return time.perf_counter() - started


def _run(inf: Infra, url: str, ends: dict[str, tuple[int, int]], replicas: int) -> tuple[float, float]:
    """Seconds from the processes' readiness until every segment's cursor is at its end, and
    the CPU seconds the processes spent meanwhile."""
    state = Path(".pacer") / "bench" / "runs" / f"reconciler-{replicas}"
    st = Stack(state, Infra(inf.kafka_bootstrap, url, state), topic_prefix=f"b{uuid.uuid4().hex[:10]}",
               env_extra={"PACER_RECONCILER_SEGMENTS": str(SEGMENTS)})
    prepare(url, {"bootstrap.servers": inf.kafka_bootstrap}, st.topic_prefix)
    try:
        procs = [st.start_service("reconciler", f"reconciler-{k}", wait=False) for k in range(replicas)]
        for p in procs:
            st.wait_ready(p)
        started, cpu0 = time.monotonic(), sum(cpu_s(p.pid) for p in procs)
        while segments_behind(url, ends):
            if time.monotonic() - started > 1800:
                raise SystemExit("bench reconciler: the cursors did not reach the end in 30 minutes")
            time.sleep(0.1)
        return time.monotonic() - started, sum(cpu_s(p.pid) for p in procs) - cpu0
    finally:
        st.stop_all()

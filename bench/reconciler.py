"""``bench reconciler``: events per second one reconciler process applies, against a bare read
of the same events, and two processes against one.

Two jobs of ``BENCH_RECONCILER_ITEMS`` items each are seeded over 1,000 guids. Each run starts
its processes on the log first and waits until they share the 16 segments evenly (16, or 8
and 8): the time a joining replica takes to get its share is the lease rounds', not the
tail's. Then, behind a gate (an open transaction whose xid is older than every event, so no
tail may read past it), one job's items are confirmed (three events each: claimed,
submitted, confirmed); the clock starts when the gate closes and stops when every segment's
cursor stands at its last event.

* one: one reconciler process (16 segments, all its own): read, publish to Kafka, project,
  commit the cursor;
* two: two processes, 8 segments each, on the other job's events;
* raw read: afterwards, the reconciler's own tail SELECT over the whole log (one segment of
  one), 2,000 rows a round, by the same driver (psycopg async, dict rows), nothing else.

``ratio`` = one / raw read; ``scaling`` = two / one; ``cpu_us_per_event_*``: the reconciler
processes' CPU time per event. Two processes do twice the work of one only with a core each
to spare: on a machine that Postgres and Kafka share, the CPU per event shows whether a
process got slower or only had no core to run on. ``others_cpu_us_per_event_two``: every
other process's CPU per event in the two-process run (Postgres, Kafka, this driver's polls);
``two_cpu_bound_per_s``: what the machine's cores allow at the two runs' CPU per event, all
processes counted (``bench.common.cpu_bound_per_s``), and ``scaling_cpu_bound`` that over
one, the most ``scaling`` this machine can show. ``two_cpu_us_per_event_<role>``: the
two-process run's CPU per event by process (``postgres``, ``kafka``, ``reconciler``, ``driver``
— this process —, ``other``).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import psycopg
from psycopg.rows import dict_row

from bench.common import (
    CORES,
    CpuByRole,
    analyze_as_autovacuum,
    cpu_bound_per_s,
    cpu_s,
    env_int,
    fresh_db,
    machine_busy_s,
    per_unit,
    real_infra,
    seed_items,
    state_dir,
    wait_until,
)
from pacer_common.db.migrate import migrate
from pacer_dev.infra import Infra
from pacer_dev.segments import confirm_job, segment_ends, segments_behind, segments_shared
from pacer_dev.stack import Stack, drop_database, prepare
from pacer_reconciler.adapters.layout import segment_sql

SEGMENTS = 16


def reconciler() -> str:
    items = env_int("BENCH_RECONCILER_ITEMS", 50_000)
    inf = real_infra()
    url = fresh_db(inf, "reconciler")
    try:
        migrate(url)
        jobs = [seed_items(url, guids=1000, per_guid=max(1, items // 1000)).job_id for _ in range(2)]
        with psycopg.connect(url, autocommit=True) as conn:
            analyze_as_autovacuum(conn, "items")
        one, one_cpu, _, _ = _run(inf, url, jobs[0], replicas=1)
        two, two_cpu, two_busy, two_spent = _run(inf, url, jobs[1], replicas=2)
        raw = asyncio.run(_raw_read(url))
    finally:
        drop_database(url)
    bound = cpu_bound_per_s(two.events, two_busy)
    return (f"bench reconciler: events={one.events} one_per_s={one.per_s:.0f} raw_read_per_s={raw.per_s:.0f} "
            f"ratio={one.per_s / raw.per_s:.2f} two_per_s={two.per_s:.0f} scaling={two.per_s / one.per_s:.2f} "
            f"cpu_us_per_event_one={one_cpu / one.events * 1e6:.0f} "
            f"cpu_us_per_event_two={two_cpu / two.events * 1e6:.0f} "
            f"others_cpu_us_per_event_two={(two_busy - two_cpu) / two.events * 1e6:.0f} "
            f"two_cpu_bound_per_s={bound:.0f} scaling_cpu_bound={bound / one.per_s:.2f} "
            f"{per_unit(two_spent, two.events, 1e6, 'two_cpu_us_per_event')} cores={CORES}")


class Rate:
    def __init__(self, events: int, seconds: float) -> None:
        self.events = events
        self.per_s = events / seconds


async def _raw_read(url: str) -> Rate:
    sql = segment_sql("read_events", 1)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        started = time.perf_counter()
        xid, seq, n = "0", 0, 0
        while rows := await (await conn.execute(sql, {"segment": 0, "xid": xid, "seq": seq, "limit": 2000})).fetchall():
            xid, seq, n = rows[-1]["xid"], rows[-1]["seq"], n + len(rows)
        return Rate(n, time.perf_counter() - started)


def _run(inf: Infra, url: str, job_id: str, replicas: int) -> tuple[Rate, float, float, dict[str, float]]:
    """The events of ``job_id``'s confirmation applied per second by ``replicas`` processes
    sharing the segments evenly, the CPU seconds the processes spent on them, the CPU
    seconds the whole machine spent meanwhile, and those by role (``CpuByRole``)."""
    state = state_dir() / "runs" / f"reconciler-{replicas}"
    st = Stack(state, Infra(inf.kafka_bootstrap, url, state), topic_prefix=f"b{uuid.uuid4().hex[:10]}",
               env_extra={"PACER_RECONCILER_SEGMENTS": str(SEGMENTS)})
    prepare(url, {"bootstrap.servers": inf.kafka_bootstrap}, st.topic_prefix)
    try:
        procs = [st.start_service("reconciler", f"reconciler-{k}", wait=False) for k in range(replicas)]
        for p in procs:
            st.wait_ready(p)
        if not wait_until(lambda: segments_shared(url, SEGMENTS, replicas), 120, poll_s=0.05):
            raise SystemExit("bench reconciler: the processes did not share the segments in 120 s")
        with psycopg.connect(url) as gate:
            gate.execute("SELECT pg_current_xact_id()")  # no event written after this is read before the gate closes
            events = confirm_job(url, job_id)
            ends = segment_ends(url, SEGMENTS)
            with psycopg.connect(url, autocommit=True) as conn:
                analyze_as_autovacuum(conn, "item_events", vacuum=False)
            cpu0, busy0, roles = sum(cpu_s(p.pid) for p in procs), machine_busy_s(), CpuByRole().start()
            gate.rollback()
            started = time.monotonic()
        if not wait_until(lambda: not segments_behind(url, ends), 1800, poll_s=0.05):
            raise SystemExit("bench reconciler: the cursors did not reach the end in 30 minutes")
        elapsed, busy, spent = time.monotonic() - started, machine_busy_s() - busy0, roles.split()
        return Rate(events, elapsed), sum(cpu_s(p.pid) for p in procs) - cpu0, busy, spent
    finally:
        st.dispose()


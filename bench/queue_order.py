"""Benchmarks of a guid's queue order at depth: the refill query on a 100,000-item backlog,
the sweep over 100,000 queued guids, fair share between a small job and a deep one,
scheduled work beside ready work, shedding.

``python -m bench refill fairness schedule shed``; sizes via BENCH_* variables (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.common import (
    CORES,
    analyze_as_autovacuum,
    count,
    drop_db,
    env_int,
    fresh_db,
    gateway,
    publish_commands,
    real_infra,
    seed_items,
    stack,
    teardown,
    wait_planner_consuming,
    wait_until,
)
from pacer_common.db.pool import open_pool
from pacer_common.db.sql import loader, query
from pacer_common.domain.ids import Guid
from pacer_common.kafka import make_producer, produce_all
from pacer_dev.stack import Stack
from pacer_sender.adapters.queue import NEXT_READY_SETTINGS, PostgresGuidQueue, shed_params
from pacer_sender.domain.pacing import Drain
from pacer_sender.domain.partitions import partition_of

_sender_sql = loader("pacer_sender.adapters.sql")
_control_sql = loader("pacer_control.adapters.sql")


def _guids_page(inf: Any, guids: int) -> tuple[int, float, float, float]:
    """The console's Guids page over a fleet's guids, on a database of its own: ``guids`` guids
    listed (two thirds leased, two thirds with a lifecycle state, a third both; one in 500
    of the states not online, one in 1,000 leases paused), the first thousand with 100
    queued items each. Returns the guids listed and the median ms of the first page, a page
    from the middle, and the held ones only."""
    url = fresh_db(inf, "guids")
    try:
        seed_items(url, min(1_000, guids), 100)  # guids bg00000… with queued items
        third = guids // 3
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO guid_leases (guid, owner, epoch, since, lease_until, paused_reason)"
                         " SELECT 'bg' || lpad(g::text, 5, '0'), 'bench', 1, now(), now() + interval '1 minute',"
                         " CASE WHEN g %% 1000 = 999 THEN 'bench' END FROM generate_series(0, %(n)s - 1) g",
                         {"n": 2 * third}, prepare=False)
            conn.execute("INSERT INTO guid_states (guid, state, source, event_ts)"
                         " SELECT 'bg' || lpad(g::text, 5, '0'),"
                         " (CASE WHEN g %% 500 = 0 THEN 'kicked' ELSE 'online' END)::guid_state, 'callback', now()"
                         " FROM generate_series(%(n)s, %(n)s + 2 * %(n)s - 1) g", {"n": third}, prepare=False)
            analyze_as_autovacuum(conn, "guid_leases", "guid_states", "items")
            listed = int(conn.execute("SELECT count(*) FROM (SELECT guid FROM guid_leases UNION"
                                      " SELECT guid FROM guid_states) u").fetchone()[0])
            page = {"after": None, "start": None, "paused_only": False, "state": None, "limit": 200}
            settings = ("SELECT set_config('plan_cache_mode', 'force_custom_plan', true)",)  # as the adapter
            first_ms = _explain_ms(conn, _control_sql("guids"), page, runs=3, settings=settings)
            middle_ms = _explain_ms(conn, _control_sql("guids"), {**page, "after": f"bg{guids // 2:05d}"}, runs=3,
                                    settings=settings)
            held_ms = _explain_ms(conn, _control_sql("guids"), {**page, "paused_only": True}, runs=3,
                                  settings=settings)
    finally:
        drop_db(url)
    return listed, first_ms, middle_ms, held_ms


def _explain_ms(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any], runs: int = 5,
                settings: tuple[str, ...] = ()) -> float:
    """Median execution time (EXPLAIN ANALYZE) of ``sql`` over ``runs`` runs, in ms, with the
    session ``settings`` the adapter runs it with."""
    times = []
    for _ in range(runs):
        with conn.transaction():
            for setting in settings:
                conn.execute(setting)
            plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()[0]
        times.append(float(plan[0]["Execution Time"]))
    return statistics.median(times)


def _sweep(inf: Any, guids: int) -> tuple[float, float, float, float, int]:
    """The sender's sweep (``waiting_guids``) over ``guids`` guids with queued work, on a
    database of its own, through the sender's adapter: every guid read and this sender's kept
    in Python (no partition pairs, as before PostgreSQL 18), against only the guids of one
    partition in 16 read. Median wall and client CPU ms of three runs each, and the rows of the
    latter."""
    url = fresh_db(inf, "sweep")
    try:
        seed_items(url, guids, 1)
        with psycopg.connect(url, autocommit=True) as conn:
            analyze_as_autovacuum(conn, "items")
        return asyncio.run(_sweeps(url))
    finally:
        drop_db(url)


async def _sweeps(url: str) -> tuple[float, float, float, float, int]:
    pool = await open_pool(url, min_size=1, max_size=1)
    queue, owned = PostgresGuidQueue(pool), [(16, 5)]
    kept = 0

    async def once(pairs: list[tuple[int, int]] | None) -> tuple[float, float]:
        nonlocal kept
        t0, c0 = time.perf_counter(), time.process_time()
        found = await queue.waiting_guids(horizon_s=40, grace_s=20, owned=pairs)
        kept = sum(1 for w in found if partition_of(Guid(w.guid), 16) == 5)  # the sweep's own check
        return (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000

    try:
        every = [await once(None) for _ in range(3)]
        mine = [await once(owned) for _ in range(3)]
    finally:
        await pool.close()
    return (statistics.median(w for w, _ in every), statistics.median(c for _, c in every),
            statistics.median(w for w, _ in mine), statistics.median(c for _, c in mine), kept)


def refill() -> str:
    """The refill (next_ready.sql) and the other queue reads on one guid with a deep backlog."""
    deep = env_int("BENCH_REFILL_BACKLOG", 100_000)
    guids = env_int("BENCH_REFILL_GUIDS", 99_999)
    inf = real_infra()
    url = fresh_db(inf, "refill")
    try:
        seed_items(url, 1, deep)                                            # the broadcast
        seed_items(url, 1, 1_000)                                           # a later job, same guid
        seed_items(url, 1, 10_000, not_before=datetime.now(UTC) + timedelta(hours=1))  # scheduled
        seed_items(url, 1, 100, priority=2, kind="ticket_notify")           # tickets
        with psycopg.connect(url, autocommit=True) as conn:
            p = {"guid": "bg00000", "exclude": [], "limit": 50}
            fresh_ms = _explain_ms(conn, _sender_sql("next_ready"), p, settings=NEXT_READY_SETTINGS)  # no statistics yet
            analyze_as_autovacuum(conn, "items")
            refill_ms = _explain_ms(conn, _sender_sql("next_ready"), p, settings=NEXT_READY_SETTINGS)
            old_ms = _explain_ms(conn, "SELECT item_id FROM items WHERE guid = %(guid)s AND status = 'pending'"
                                 " AND NOT held AND (not_before IS NULL OR not_before <= now())"
                                 " AND item_id::text <> ALL(%(exclude)s::text[])"
                                 " ORDER BY priority, created_at, item_id LIMIT %(limit)s", p)
            shed_ms = _explain_ms(conn, _sender_sql("shed"), {"guid": "bg00000", **shed_params(Drain(1.0)),
                                                              "min_priority": 2}, runs=3)
            list_ms = _explain_ms(conn, query("guid_backlogs"), {"sort": "backlog", "limit": 10}, runs=3)
            conn.execute("ANALYZE items")  # the partitioned table's own statistics, which autovacuum never takes
            list_parent_ms = _explain_ms(conn, query("guid_backlogs"), {"sort": "backlog", "limit": 10}, runs=3)
    finally:
        drop_db(url)
    listed, first_ms, middle_ms, held_ms = _guids_page(inf, guids)
    sweep_guids = env_int("BENCH_SWEEP_GUIDS", 100_000)
    every_ms, every_cpu_ms, mine_ms, mine_cpu_ms, kept = _sweep(inf, sweep_guids)
    total = deep + 11_100
    return (f"bench refill: backlog={total} next_ready_ms={refill_ms:.2f} next_ready_unanalyzed_ms={fresh_ms:.2f} "
            f"before_ms={old_ms:.2f} "
            f"shed_check_ms={shed_ms:.0f} backlog_list_ms={list_ms:.0f} backlog_list_parent_stats_ms={list_parent_ms:.0f} "
            f"guids={listed} "
            f"guids_first_page_ms={first_ms:.1f} guids_middle_page_ms={middle_ms:.1f} "
            f"guids_held_page_ms={held_ms:.1f} sweep_guids={sweep_guids} sweep_every_guid_ms={every_ms:.0f} "
            f"sweep_every_guid_client_cpu_ms={every_cpu_ms:.0f} sweep_own_partition_ms={mine_ms:.0f} "
            f"sweep_own_partition_client_cpu_ms={mine_cpu_ms:.0f} sweep_own_partition_guids={kept} "
            f"sweep_ratio={every_ms / mine_ms:.2f} cores={CORES}")


def _paced(interval_ms: int) -> dict[str, str]:
    return {"PACER_SENDER_MIN_INTERVAL_MS": str(interval_ms), "PACER_SENDER_JITTER_MS": "0",
            "PACER_SENDER_ONLINE_RESERVE": "0", "PACER_SENDER_MAX_BUFFERED": "20000",
            "PACER_SENDER_DB_POOL_MAX": "40"}


def _publish_request(st: Stack, *bodies: dict[str, Any]) -> float:
    """Publish job requests, in this order (one key: one partition, planned in turn); when."""
    key = bodies[0]["request_id"].encode()
    produce_all(make_producer({"bootstrap.servers": st.infra.kafka_bootstrap}),
                [(f"{st.topic_prefix}.job-requests", key, json.dumps(body).encode(), None) for body in bodies])
    return time.time()


def _small_job(guids: int, label: str = "small") -> dict[str, Any]:
    rid = f"{label}-{uuid.uuid4().hex[:8]}"
    return {"request_id": rid, "kind": "campaign", "created_by": "bench", "message": {"type": "text", "content": "hi"},
            "targets": {"mode": "snapshot", "items": [{"guid": f"bg{g:05d}", "to_id": f"{label}-{g}"}
                                                      for g in range(guids)]},
            "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}


def _sends(gw: str) -> list[dict[str, Any]]:
    return gateway(gw, "/_admin/sends?limit=1000000")["sends"]


def _sent(gw: str, label: str, guids: int, since: float) -> list[dict[str, Any]]:
    """The sends of the small job ``label`` (one per guid) once all have gone."""
    done: list[dict[str, Any]] = []

    def all_sent() -> bool:
        done[:] = [s for s in _sends(gw) if s["toId"].startswith(f"{label}-") and s["at"] > since]
        return len(done) >= guids

    if not wait_until(all_sent, 600, poll_s=0.2):
        raise SystemExit(f"bench fairness: {len(done)} of {guids} sends of the {label} job within 600 s")
    return done


def _behind_s(backlog: int, guids: int, interval_ms: int) -> tuple[float, list[int]]:
    """Seconds from publishing the small job until its last item is sent, behind ``backlog``,
    and for each guid how many sends of other work came first."""
    inf = real_infra()
    st = stack(inf, "fairness", _paced(interval_ms))
    try:
        gw = st.start_gateway()
        st.start_service("planner")
        seeded = seed_items(st.infra.database_url, guids, backlog // guids)
        publish_commands(inf.kafka_bootstrap, f"{st.topic_prefix}.item-commands.batch", seeded.commands)
        st.start_service("sender", "sender-1")
        if not wait_until(lambda: gateway(gw, "/_admin/stats")["sends"] >= 3 * guids, 300):
            raise SystemExit(f"bench fairness: {gateway(gw, '/_admin/stats')['sends']} backlog sends within 300 s,"
                             f" {3 * guids} expected before the small job")
        wait_planner_consuming(st)
        t0 = _publish_request(st, _small_job(guids))
        done = _sent(gw, "small", guids, t0)
        sends = _sends(gw)
        ahead = [sum(1 for s in sends if s["guid"] == d["guid"] and t0 < s["at"] < d["at"]) for d in done]
        return max(d["at"] for d in done) - t0, ahead
    finally:
        teardown(st)


def _alone_s(guids: int, interval_ms: int) -> tuple[float, float]:
    """The same job on the same guids at the same pace with nothing else queued, twice:
    published right behind a one-item warm-up job (each guid has just sent when its item
    arrives, so the item waits one pacing gap — as it must behind any backlog, where every
    guid sent within the last gap), and published when the guids have been idle for longer
    than a gap (the item goes at once)."""
    inf = real_infra()
    st = stack(inf, "fairness-alone", _paced(interval_ms))
    try:
        gw = st.start_gateway()
        st.start_service("planner")
        st.start_service("sender", "sender-1")
        _publish_request(st, _small_job(guids, "first"))  # workers, leases and connections warm
        _sent(gw, "first", guids, 0.0)
        time.sleep(2 * interval_ms / 1000)
        t0 = _publish_request(st, _small_job(guids, "warm"), _small_job(guids, "small"))
        just_sent = max(d["at"] for d in _sent(gw, "small", guids, t0)) - t0
        time.sleep(2 * interval_ms / 1000)  # every guid idle for longer than its gap
        t1 = _publish_request(st, _small_job(guids, "idle"))
        idle = max(d["at"] for d in _sent(gw, "idle", guids, t1)) - t1
        return just_sent, idle
    finally:
        teardown(st)


def fairness() -> str:
    """A 100-item job (one per guid) published behind a deep job on the same 100 guids, vs alone.

    ``small_job_alone_s`` — the baseline of ``ratio`` — is the same job on the same guids at
    the same pace with nothing else queued, each guid having just sent (a one-item warm-up job
    published just before it): behind a backlog every guid has sent within its last pacing gap,
    so its item must wait up to one gap whatever the order, and the baseline waits that gap
    too. ``small_job_idle_s`` (and ``ratio_idle``) is the earlier baseline, guids idle for
    longer than a gap, whose items go at once: it is printed beside it, and cannot be met
    behind a paced backlog (the gap alone exceeds twice it)."""
    backlog, guids = env_int("BENCH_FAIRNESS_BACKLOG", 100_000), 100
    interval_ms = env_int("BENCH_FAIRNESS_INTERVAL_MS", 500)
    behind, ahead = _behind_s(backlog, guids, interval_ms)
    alone, idle = _alone_s(guids, interval_ms)
    return (f"bench fairness: backlog={backlog} guids={guids} interval_ms={interval_ms} small_job_s={behind:.2f} "
            f"small_job_alone_s={alone:.2f} ratio={behind / alone:.2f} small_job_idle_s={idle:.2f} "
            f"ratio_idle={behind / idle:.2f} sends_ahead_max={max(ahead)} "
            f"sends_ahead_mean={statistics.mean(ahead):.2f} cores={CORES}")


def schedule() -> str:
    """Items scheduled ahead on 100 guids, a ready campaign on the same guids: the campaign's
    achieved ratio until the scheduled items come due, then how late their guids start them —
    after their due time (``lateness_p99_s``, which includes the pacing gap a guid that has
    just sent must wait out), and after the later of their due time and the guid's previous
    send plus its interval (``lateness_past_gap_p99_s``: what Pacer adds to what pacing forces)."""
    n, guids = env_int("BENCH_SCHEDULE_ITEMS", 10_000), 100
    horizon = env_int("BENCH_SCHEDULE_HORIZON_S", 60)
    interval = 1.0
    inf = real_infra()
    st = stack(inf, "schedule", _paced(int(interval * 1000)))
    try:
        gw = st.start_gateway(min_interval_ms=int(interval * 1000) - 5)
        due = datetime.now(UTC) + timedelta(seconds=horizon)
        scheduled = seed_items(st.infra.database_url, guids, n // guids, not_before=due)
        campaign = seed_items(st.infra.database_url, guids, horizon + 60)
        topic = f"{st.topic_prefix}.item-commands.batch"
        publish_commands(inf.kafka_bootstrap, topic, scheduled.commands)
        publish_commands(inf.kafka_bootstrap, topic, campaign.commands)
        st.start_service("sender", "sender-1")
        if not wait_until(lambda: gateway(gw, "/_admin/stats")["sends"] >= guids, 120):
            raise SystemExit(f"bench schedule: {gateway(gw, '/_admin/stats')['sends']} campaign sends within 120 s,"
                             f" {guids} expected before the window opens")
        t0 = time.time()
        window = due.timestamp() - t0 - 1
        time.sleep(max(0.0, window))  # the measurement window itself: until the scheduled items are due
        sends = _sends(gw)
        in_window = [s for s in sends if t0 <= s["at"] < t0 + window]
        firsts: dict[str, float] = {}

        def started() -> bool:
            for s in _sends(gw):
                if s["idempotencyKey"].startswith(f"bench:{scheduled.job_id}:") and s["guid"] not in firsts:
                    firsts[s["guid"]] = s["at"]
            return len(firsts) >= guids

        if not wait_until(started, 120, poll_s=0.5):
            raise SystemExit(f"bench schedule: {len(firsts)} of {guids} guids started their scheduled items"
                             " within 120 s of the due time")
        sends = _sends(gw)
        dupes = gateway(gw, "/_admin/stats")["duplicates"]
    finally:
        teardown(st)
    achieved = len(in_window) / (guids * window / interval) if window > 0 else float("nan")
    late = sorted(max(0.0, at - due.timestamp()) for at in firsts.values())
    # How late beyond what pacing allows: a guid that sent just before the items came due may
    # not send again for one interval, whatever it sends next.
    past_gap = sorted(max(0.0, at - max([due.timestamp()] + [s["at"] + interval for s in sends
                                                              if s["guid"] == guid and s["at"] < at]))
                      for guid, at in firsts.items())
    p99 = statistics.quantiles(late, n=100)[98] if len(late) >= 2 else float("nan")
    gap_p99 = statistics.quantiles(past_gap, n=100)[98] if len(past_gap) >= 2 else float("nan")
    return (f"bench schedule: scheduled={n} guids={guids} horizon_s={horizon} campaign_achieved_ratio={achieved:.3f} "
            f"scheduled_started={len(firsts)}/{guids} lateness_p99_s={p99:.2f} lateness_past_gap_p99_s={gap_p99:.2f} "
            f"interval_s={interval:g} duplicates={dupes} cores={CORES}")


def shed() -> str:
    """A backlog that cannot drain before its expire_at (one send a second per guid): sends
    after expire_at (target 0) and items shed early."""
    guids, per_guid = 100, env_int("BENCH_SHED_PER_GUID", 120)
    expire_s = env_int("BENCH_SHED_EXPIRE_S", 60)
    inf = real_infra()
    st = stack(inf, "shed", _paced(1000) | {"PACER_SENDER_SHED_EVERY_S": "10"})
    try:
        gw = st.start_gateway()
        expire_at = datetime.now(UTC) + timedelta(seconds=expire_s)
        seeded = seed_items(st.infra.database_url, guids, per_guid, expire_at=expire_at)
        publish_commands(inf.kafka_bootstrap, f"{st.topic_prefix}.item-commands.batch", seeded.commands)
        st.start_service("sender", "sender-1")
        url = st.infra.database_url
        unsettled = "SELECT count(*) FROM items WHERE status IN ('pending', 'claimed', 'submitted')"
        if not wait_until(lambda: count(url, unsettled) == 0, expire_s + 120, poll_s=1.0):
            raise SystemExit(f"bench shed: {count(url, unsettled)} of {guids * per_guid} items still pending, claimed"
                             f" or submitted {expire_s + 120} s in, 0 expected")
        sends = _sends(gw)
        late = sum(1 for s in sends if s["at"] > expire_at.timestamp())
        with psycopg.connect(url) as conn:
            rows: dict[str, int] = dict(conn.execute("SELECT COALESCE(last_error_class, status::text), count(*) FROM items"
                                     " GROUP BY 1").fetchall())
    finally:
        teardown(st)
    return (f"bench shed: items={guids * per_guid} guids={guids} expire_s={expire_s} sent={len(sends)} "
            f"sent_late={late} shed={rows.get('shed', 0)} expired_at_turn={rows.get('expired', 0)} cores={CORES}")

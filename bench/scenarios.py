"""The benchmark scenarios; each prints one line with figures measured in the same run."""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg

from bench.common import (
    CORES,
    CpuByRole,
    SendsTail,
    count,
    cpu_bound_per_s,
    cpu_s,
    drop_db,
    env_int,
    fresh_db,
    gateway,
    machine_busy_s,
    per_unit,
    publish_commands,
    real_infra,
    rss_mib,
    seed_items,
    stack,
    teardown,
    wait_planner_consuming,
    wait_until,
)
from bench.console import console
from bench.fleet import fleet
from bench.footprint import footprint
from bench.intake import intake
from bench.online_index import index
from bench.paced import allowed, pacer_window
from bench.peer import peer
from bench.queue_order import fairness, refill, schedule, shed
from bench.reconciler import reconciler
from bench.restore import restore
from bench.steps import steps
from pacer_common.db.pool import open_pool
from pacer_common.kafka import ensure_topics, make_consumer, make_producer, produce_all
from pacer_dev.stack import drop_topics_or_warn
from pacer_planner.adapters.kafka import KafkaCommandBus
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.core import Planner
from pacer_sender.core import YIELDED_REASON

FAST = {"PACER_SENDER_MIN_INTERVAL_MS": "0", "PACER_SENDER_JITTER_MS": "0", "PACER_SENDER_MAX_BUFFERED": "20000",
        "PACER_SENDER_DB_POOL_MAX": "40"}


def planner() -> str:
    """Plan a snapshot job (rows durable + commands produced) vs COPY of the same rows + a bare produce."""
    n, guids = env_int("BENCH_PLANNER_ITEMS", 1_000_000), 1000
    inf = real_infra()
    url = fresh_db(inf, "planner")
    prefix = f"b{uuid.uuid4().hex[:8]}"
    topics = {lane: f"{prefix}.item-commands.{lane}" for lane in ("online", "batch")}
    ensure_topics({"bootstrap.servers": inf.kafka_bootstrap},
                  {t: (16, {}) for t in [*topics.values(), f"{prefix}.dlq", f"{prefix}.raw"]})
    body = json.dumps({
        "request_id": f"bench-{uuid.uuid4().hex[:8]}", "kind": "campaign", "created_by": "bench",
        "message": {"type": "text", "content": "Hello {n}"},
        "targets": {"mode": "snapshot", "items": [
            {"guid": f"g{i % guids:04d}", "to_id": f"room-{i:07d}", "vars": {"n": str(i)}} for i in range(n)]},
        "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}).encode()

    async def plan_it() -> float:
        pool = await open_pool(url, min_size=1, max_size=2)
        bus = KafkaCommandBus(make_producer({"bootstrap.servers": inf.kafka_bootstrap}), topics.__getitem__,
                              f"{prefix}.dlq")
        t0 = time.perf_counter()
        result = await Planner(PostgresJobStore(pool), bus).handle(None, body)
        elapsed = time.perf_counter() - t0
        assert result.outcome == "planned" and result.items == n, result
        await pool.close()
        return elapsed

    pacer_s = asyncio.run(plan_it())
    # The raw limit: the same rows by COPY into a fresh database, then the same number of
    # messages of the same size produced bare.
    raw_url = fresh_db(inf, "planner_raw")
    with psycopg.connect(url) as src:
        rows = src.execute("SELECT item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind"
                           " FROM items").fetchall()
        sample = src.execute("SELECT length(content) FROM items LIMIT 1").fetchone()
    value = b"x" * (300 + (sample[0] if sample else 0))
    t0 = time.perf_counter()
    with psycopg.connect(raw_url) as dst, dst.cursor().copy(
            "COPY items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind) FROM STDIN") as cp:
        for r in rows:
            cp.write_row(r)
    produce_all(make_producer({"bootstrap.servers": inf.kafka_bootstrap}),
                ((f"{prefix}.raw", r[3].encode(), value, None) for r in rows))
    raw_s = time.perf_counter() - t0
    drop_db(url)
    drop_db(raw_url)
    drop_topics_or_warn({"bootstrap.servers": inf.kafka_bootstrap}, prefix)
    return (f"bench planner: items={n} items_per_s={n / pacer_s:.0f} raw_copy_produce_per_s={n / raw_s:.0f} "
            f"ratio={raw_s / pacer_s:.2f} cores={CORES}")


def sender() -> str:
    """One sender process, pacing off, zero-latency gateway, vs a bare consume → POST loop on
    each client the sender's gateway adapter is built from; the ratio is to the fastest.

    Where the CPU goes, per item: the sender's own (``sender_cpu_ms_per_item``), every other
    process's meanwhile (``others_cpu_ms_per_item``: Postgres, Kafka, the gateway, this
    driver's polls) and the whole machine's in the fastest bare loop (``bare_cpu_ms_per_item``);
    ``cpu_bound_per_s``, what the cores allow at the sender run's CPU per item, and
    ``ratio_cpu_bound`` that over the bare loop: the most ``ratio`` this machine can show.
    ``cpu_ms_per_item_<role>``: the sender run's CPU per item by process (``CpuByRole``):
    ``postgres``, ``kafka``, ``gateway``, ``sender``, ``driver`` (this process), ``other``,
    and Postgres' by its processes (``cpu_ms_per_item_postgres_parts``);
    ``bare_cpu_ms_per_item_<role>`` the same for the fastest bare loop (its client is the
    ``driver``)."""
    guids, per_guid = env_int("BENCH_SENDER_GUIDS", 200), env_int("BENCH_SENDER_PER_GUID", 100)
    n = guids * per_guid
    inf = real_infra()
    st = stack(inf, "sender", FAST)
    try:
        st.start_gateway()
        seeded = seed_items(st.infra.database_url, guids, per_guid)
        topic = f"{st.topic_prefix}.item-commands.batch"
        publish_commands(inf.kafka_bootstrap, topic, seeded.commands)
        proc = st.start_service("sender", "sender-1")
        url = st.infra.database_url
        # Polled on one connection: a connection per poll costs the machine ~4 ms of CPU each.
        with psycopg.connect(url, autocommit=True) as poll:
            roles = CpuByRole().start()
            t0, cpu0, busy0 = time.perf_counter(), cpu_s(proc.pid), machine_busy_s()
            if not wait_until(lambda: poll.execute("SELECT count(*) FROM items WHERE status = 'confirmed'"
                                                   " HAVING count(*) >= %s", (n,)).fetchone() is not None, 900):
                confirmed = poll.execute("SELECT count(*) FROM items WHERE status = 'confirmed'").fetchone()
                raise SystemExit(f"bench sender: {confirmed[0] if confirmed else 0} of {n} items confirmed"
                                 " within 900 s")
            pacer_s, sender_cpu, busy = time.perf_counter() - t0, cpu_s(proc.pid) - cpu0, machine_busy_s() - busy0
            spent = roles.split()
        rss = rss_mib(proc.pid)
        st.stop("sender-1")
        bare, bare_busy, bare_spent = {}, {}, {}
        for c in BARE_CLIENTS:
            b0, bare_roles = machine_busy_s(), CpuByRole().start()
            bare[c] = asyncio.run(_bare_loop(inf.kafka_bootstrap, topic, st.gateway_url or "", n, c))
            bare_busy[c], bare_spent[c] = machine_busy_s() - b0, bare_roles.split()
    finally:
        teardown(st)
    pacer_rps = n / pacer_s
    fastest = max(bare, key=lambda c: bare[c])
    loops = " ".join(f"bare_{c}_per_s={rps:.0f}" for c, rps in bare.items())
    bound = cpu_bound_per_s(n, busy)
    return (f"bench sender: items_per_s={pacer_rps:.0f} bare_loop_per_s={bare[fastest]:.0f} "
            f"ratio={pacer_rps / bare[fastest]:.2f} fastest={fastest} {loops} rss_mib={rss:.0f} items={n} "
            f"sender_cpu_ms_per_item={sender_cpu * 1000 / n:.3f} others_cpu_ms_per_item={(busy - sender_cpu) * 1000 / n:.3f} "
            f"bare_cpu_ms_per_item={bare_busy[fastest] * 1000 / n:.3f} cpu_bound_per_s={bound:.0f} "
            f"ratio_cpu_bound={bound / bare[fastest]:.2f} {per_unit(spent, n, 1000, 'cpu_ms_per_item')} "
            f"{per_unit(bare_spent[fastest], n, 1000, 'bare_cpu_ms_per_item')} cores={CORES}")


# The bare loop's clients: httpx's API on aiohttp (what the gateway adapter offers every call)
# and the adapter's aiohttp session used directly (what its send uses).
BARE_CLIENTS = ("httpx", "aiohttp")


async def _bare_loop(bootstrap: str, topic: str, gateway_url: str, n: int, client_kind: str) -> float:
    """Consume the same commands and POST each, 200 in flight, nothing else."""
    from pacer_common.domain.commands import ItemCommand
    from pacer_common.gateway import make_client

    consumer = make_consumer({"bootstrap.servers": bootstrap}, f"bare-{uuid.uuid4().hex}")
    consumer.subscribe([topic])
    client = make_client(gateway_url, 10, max_connections=200)
    sem = asyncio.Semaphore(200)
    done = 0

    async def post(cmd: ItemCommand) -> None:
        nonlocal done
        body = {"guid": cmd.guid, "toId": cmd.to_id, "content": cmd.content}
        headers = {"X-Idempotency-Key": f"{cmd.idem_key}:bare-{client_kind}"}
        async with sem:
            if client_kind == "httpx":
                await client.post("/message/sendText", json=body, headers=headers)
            else:
                async with client.session().post(f"{gateway_url}/message/sendText", json=body, headers=headers) as r:
                    await r.read()
            done += 1

    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    t0 = time.perf_counter()
    while len(tasks) < n and time.perf_counter() - t0 < 300:
        for m in await loop.run_in_executor(None, consumer.consume, 500, 0.1):
            if m.error() is None:
                tasks.append(asyncio.create_task(post(ItemCommand.model_validate_json(m.value() or b""))))
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    consumer.close()
    await client.aclose()
    return done / elapsed


def pacing() -> str:
    """Many guids paced at about one send per second each: achieved rate and interval violations."""
    guids, seconds = env_int("BENCH_PACING_GUIDS", 2000), env_int("BENCH_PACING_SECONDS", 300)
    window = pacer_window(guids, seconds, "pacing")
    achieved = window.sends / allowed(guids, seconds)
    return (f"bench pacing: guids={guids} rate_per_guid=1/s seconds={seconds} achieved_ratio={achieved:.3f} "
            f"violations={window.violations} cores={CORES}")


def recovery() -> str:
    """kill -9 the sender that owns every guid; time until each guid sends again, and duplicates."""
    guids, lease = env_int("BENCH_RECOVERY_GUIDS", 1000), 10
    inf = real_infra()
    st = stack(inf, "recovery", {"PACER_SENDER_MIN_INTERVAL_MS": "200", "PACER_SENDER_JITTER_MS": "100",
                                 "PACER_SENDER_LEASE_TTL_S": str(lease), "PACER_SENDER_GATEWAY_TIMEOUT_S": "2",
                                 "PACER_RECONCILER_SWEEP_INTERVAL_S": "0.5", "PACER_RECONCILER_VERIFY_AFTER_S": "3"})
    try:
        st.start_gateway()
        seeded = seed_items(st.infra.database_url, guids, 60)
        publish_commands(inf.kafka_bootstrap, f"{st.topic_prefix}.item-commands.batch", seeded.commands)
        st.start_service("reconciler")
        st.start_service("sender", "victim")
        gw = st.gateway_url or ""
        if not wait_until(lambda: len(gateway(gw, "/_admin/stats?detail=1").get("by_guid_count", {})) >= guids, 300):
            sent = len(gateway(gw, "/_admin/stats?detail=1").get("by_guid_count", {}))
            raise SystemExit(f"bench recovery: {sent} of {guids} guids sent within 300 s, before the kill")
        st.start_service("sender", "heir")
        # The group settled with both members, each sending for its half, before the kill (a
        # fixed pause let the kill land before, during or after the rebalance: the victim
        # then owned 1,000, some or 500 of the guids).
        if not wait_until(lambda: all((st.metric(n, "pacer_sender_partitions_assigned") or 0) > 0
                                      for n in ("victim", "heir"))
                          and (st.metric("heir", "pacer_sender_items_total", {"outcome": "confirmed"}) or 0) > 0, 120):
            raise RuntimeError("recovery: the heir was not given partitions, or did not send, within 120 s")
        sends = SendsTail.from_now(gw)
        st.kill("victim")
        killed_at = time.time()
        seen: dict[str, float] = {}

        def every_guid_resumed() -> bool:
            for s in sends.read():
                if s["at"] > killed_at and s["guid"] not in seen:
                    seen[s["guid"]] = s["at"] - killed_at
            return len(seen) >= guids

        wait_until(every_guid_resumed, lease * 6 + 60, poll_s=0.5)
        dupes = gateway(gw, "/_admin/stats")["duplicates"]
    finally:
        teardown(st)
    p100 = max(seen.values()) if len(seen) == guids else float("inf")
    # The target: every guid sends again within the lease TTL + 5 s.
    return (f"bench recovery: guids={guids} resumed={len(seen)} resume_p100_s={p100:.1f} lease_ttl_s={lease} "
            f"resume_over_target={p100 / (lease + 5):.2f} duplicates={dupes} cores={CORES}")


ONLINE_RESERVE = 0.2  # the sender's default: batch sends are spaced interval / (1 - reserve)


def priority() -> str:
    """Auto-replies published while a campaign backlog waits on the same guids: request → gateway.
    A ticket notification is batch work more urgent than the campaign: once its coalescing
    window ends it takes its guid's next send, one interval after the last (the online reserve
    spaces campaign sends only; ``batch_interval_ms`` is the campaign's spacing). Replies and
    tickets go to separate halves of the guids, each behind the same backlog. ``yields``: campaign
    items claimed ahead of their gap's end that gave their turn to a reply arriving meanwhile."""
    backlog, guids, replies = env_int("BENCH_PRIORITY_BACKLOG", 100_000), 100, env_int("BENCH_PRIORITY_REPLIES", 100)
    interval_ms = 1000
    coalesce_ms = env_int("BENCH_PRIORITY_COALESCE_MS", 3000)  # the planner's default ticket coalescing window
    inf = real_infra()
    st = stack(inf, "priority", {"PACER_SENDER_MIN_INTERVAL_MS": str(interval_ms), "PACER_SENDER_JITTER_MS": "0",
                                 "PACER_SENDER_MAX_BUFFERED": "5000",
                                 "PACER_SENDER_ONLINE_RESERVE": str(ONLINE_RESERVE),
                                 "PACER_PLANNER_COALESCE_WINDOW_S": str(coalesce_ms / 1000)})
    try:
        st.start_gateway()
        seeded = seed_items(st.infra.database_url, guids, backlog // guids)
        publish_commands(inf.kafka_bootstrap, f"{st.topic_prefix}.item-commands.batch", seeded.commands)
        st.start_service("planner")
        st.start_service("sender", "sender-1")
        gw = st.gateway_url or ""
        if not wait_until(lambda: gateway(gw, "/_admin/stats")["sends"] > guids, 120):
            raise SystemExit(f"bench priority: {gateway(gw, '/_admin/stats')['sends']} campaign sends within 120 s,"
                             f" more than {guids} expected before the replies")
        producer = make_producer({"bootstrap.servers": inf.kafka_bootstrap})
        wait_planner_consuming(st)
        published: dict[str, float] = {}
        for i in range(replies):
            rid = f"reply-{uuid.uuid4().hex[:8]}"
            guid = f"bg{i % (guids // 2):05d}"  # replies on one half of the guids, tickets on the other
            body = json.dumps({"request_id": rid, "kind": "auto_reply", "created_by": "bench",
                               "source_msg_uid": rid, "message": {"type": "text", "content": "on it"},
                               "targets": {"mode": "snapshot", "items": [{"guid": guid, "to_id": f"cust-{i}"}]}})
            published[f"cust-{i}"] = time.time()
            produce_all(producer, [(f"{st.topic_prefix}.job-requests", rid.encode(), body.encode(), None)])
            # A ticket notification on a guid of the other half, behind the same backlog (batch lane,
            # priority 2). On a guid where an auto-reply is also waiting, the reply goes first (it
            # outranks the ticket) and the ticket one interval later: that is the order, not a delay.
            tid = f"ticket-{uuid.uuid4().hex[:8]}"
            body = json.dumps({"request_id": tid, "kind": "ticket_notify", "created_by": "bench",
                               "business_id": tid, "status_version": 1, "message": {"type": "text", "content": "done"},
                               "targets": {"mode": "snapshot", "items": [
                                   {"guid": f"bg{guids // 2 + i % (guids // 2):05d}", "to_id": f"tick-{i}"}]}})
            published[f"tick-{i}"] = time.time()
            produce_all(producer, [(f"{st.topic_prefix}.job-requests", tid.encode(), body.encode(), None)])
            time.sleep(0.05)  # replies trickle in, as customers write
        latencies: list[float] = []
        tickets: list[float] = []
        sends = SendsTail(gw)

        def collect() -> bool:
            for s in sends.read():
                if s["toId"] in published:
                    (tickets if s["toId"].startswith("tick-") else latencies).append(
                        (s["at"] - published[s["toId"]]) * 1000)
            return len(latencies) >= replies and len(tickets) >= replies

        if not wait_until(collect, 120, poll_s=1.0):
            raise SystemExit(f"bench priority: {len(latencies)} of {replies} auto-replies and {len(tickets)} of"
                             f" {replies} tickets sent within 120 s")
        queued = count(st.infra.database_url, "SELECT count(*) FROM items WHERE status = 'pending'")
        # Campaign items claimed ahead that gave their turn to a reply arriving within the claim's lead
        # (no gateway asks for quiet here, the reason's other case).
        yields = count(st.infra.database_url, "SELECT count(*) FROM item_events WHERE type = 'ItemRetryScheduled'"
                                              " AND payload ->> 'error' = %s", YIELDED_REASON)
        planned, after_due = _ticket_breakdown(st.infra.database_url, gw, published)
    finally:
        teardown(st)
    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
    t = statistics.quantiles(tickets, n=100) if len(tickets) >= 2 else [float("nan")] * 99
    # The targets: an auto-reply within one interval + 250 ms, a ticket within one interval +
    # the coalescing window + 250 ms.
    reply_target_ms, ticket_target_ms = interval_ms + 250, interval_ms + coalesce_ms + 250
    return (f"bench priority: backlog={backlog} still_queued={queued} replies={len(latencies)}/{replies} "
            f"autoreply_p50_ms={q[49]:.0f} p99_ms={q[98]:.0f} p99_over_target={q[98] / reply_target_ms:.2f} "
            f"yields={yields} tickets={len(tickets)}/{replies} ticket_p50_ms={t[49]:.0f} ticket_p99_ms={t[98]:.0f} "
            f"ticket_p99_over_target={t[98] / ticket_target_ms:.2f} coalesce_window_ms={coalesce_ms} "
            f"ticket_planned_p99_ms={_p99(planned):.0f} ticket_after_due_p99_ms={_p99(after_due):.0f} "
            f"interval_ms={interval_ms} batch_interval_ms={interval_ms / (1 - ONLINE_RESERVE):.0f} cores={CORES}")


def _p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98] if len(xs) >= 2 else float("nan")


def _ticket_breakdown(url: str, gw: str, published: dict[str, float]) -> tuple[list[float], list[float]]:
    """Where a ticket's time goes: request → its item stored (``planned``), and its send time
    (``not_before``, the end of the coalescing window) → the gateway (``after_due``: waiting
    for the guid's next send slot, and Pacer's own delay)."""
    sent = {s["toId"]: s["at"] for s in gateway(gw, "/_admin/sends?limit=200000")["sends"]}
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT to_id, extract(epoch FROM created_at)::float8, extract(epoch FROM not_before)::float8"
                            " FROM items WHERE to_id LIKE 'tick-%%'").fetchall()
    planned = [(created - published[to]) * 1000 for to, created, _ in rows if to in published]
    after_due = [(sent[to] - due) * 1000 for to, _, due in rows if to in sent and due is not None]
    return planned, after_due


def scale() -> str:
    """Many active guids on one sender process: memory and achieved rate; the CPU per send of
    the sender (``sender_cpu_ms_per_send``) and of every part of the machine over the window
    (``cpu_ms_per_send_<role>``: Postgres, Kafka, the gateway, the sender, this driver)."""
    guids, seconds = env_int("BENCH_SCALE_GUIDS", 10_000), env_int("BENCH_SCALE_SECONDS", 60)
    interval = 10.0  # slow per guid, so the total stays within one process's reach
    # Items queued per guid: enough for the run, or more (a campaign's deep queue: the windows
    # then hold a part of it, within the memory budget, and read the rest as they go).
    depth = max(int(seconds / interval) + 3, env_int("BENCH_SCALE_DEPTH", 0))
    inf = real_infra()
    st = stack(inf, "scale", {"PACER_SENDER_MIN_INTERVAL_MS": str(int(interval * 1000)),
                              "PACER_SENDER_JITTER_MS": "0", "PACER_SENDER_ONLINE_RESERVE": "0"})
    try:
        st.start_gateway(min_interval_ms=int(interval * 1000) - 50)
        seeded = seed_items(st.infra.database_url, guids, depth)
        publish_commands(inf.kafka_bootstrap, f"{st.topic_prefix}.item-commands.batch", seeded.commands)
        proc = st.start_service("sender", "sender-1")
        if not wait_until(lambda: gateway(st.gateway_url or "", "/_admin/stats")["sends"] >= guids, 600):
            raise SystemExit(f"bench scale: {gateway(st.gateway_url or '', '/_admin/stats')['sends']} sends within"
                             f" 600 s, {guids} expected before the window opens")
        start = gateway(st.gateway_url or "", "/_admin/stats")["sends"]
        opened, cpu0, roles = time.time(), cpu_s(proc.pid), CpuByRole().start()
        time.sleep(seconds)  # the measurement window itself
        stats, cpu, spent = gateway(st.gateway_url or "", "/_admin/stats"), cpu_s(proc.pid) - cpu0, roles.split()
        rss = rss_mib(proc.pid)
        late = _late_s(st.gateway_url or "", opened, interval)
    finally:
        teardown(st)
    sent = stats["sends"] - start
    achieved = sent / (guids * seconds / interval)
    return (f"bench scale: guids={guids} depth={depth} rss_mib={rss:.0f} achieved_ratio={achieved:.3f} "
            f"violations={stats['interval_violations']} late_p50_s={late[0]:.2f} late_p99_s={late[1]:.2f} "
            f"sender_cpu_ms_per_send={cpu * 1000 / max(1, sent):.2f} sender_cores={cpu / seconds:.2f} "
            f"{per_unit(spent, max(1, sent), 1000, 'cpu_ms_per_send')} cores={CORES}")


def _late_s(gw: str, since: float, interval: float) -> tuple[float, float]:
    """How much longer than the interval each guid's gaps between sends were in the window
    (p50, p99): what the achieved ratio loses, send by send."""
    by_guid: dict[str, list[float]] = {}
    for s in SendsTail(gw).read():
        by_guid.setdefault(s["guid"], []).append(s["at"])
    late = sorted(b - a - interval for ats in by_guid.values() for a, b in itertools.pairwise(sorted(ats))
                  if b >= since)
    if len(late) < 2:
        return float("nan"), float("nan")
    q = statistics.quantiles(late, n=100)
    return q[49], q[98]


SCENARIOS = {"planner": planner, "steps": steps, "sender": sender, "pacing": pacing, "priority": priority,
             "recovery": recovery, "scale": scale, "fleet": fleet, "footprint": footprint, "peer": peer}
SCENARIOS |= {"reconciler": reconciler}
SCENARIOS |= {"refill": refill, "fairness": fairness, "schedule": schedule, "shed": shed}
SCENARIOS |= {"intake": intake, "restore": restore, "index": index, "console": console}

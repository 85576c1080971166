"""``bench peer``: Pacer against the queues a Python user would pick instead, on the same paced
per-guid workload: pgqueuer (a Postgres job queue) and DBOS (durable workflows on Postgres with
a partitioned queue, ``bench.peer_dbos``).

pgqueuer runs in one worker process, set up as its documentation shows. Each guid is
an entrypoint with ``concurrency_limit=1``, which pgqueuer enforces inside its dequeue
statement for all workers: a guid's messages run one at a time. The earliest moment a guid
may send again is a row in Postgres (``peer_pace``), read before each send and moved on
after it by the gap Pacer draws (0.9 s + uniform 0–0.2 s, from when the send returned).
Messages go to the same fake gateway, with the same knobs, through the same HTTP client as
Pacer's sender. Then Pacer's sender runs the same guids for the same window (``bench.paced``).

pgqueuer's driver is asyncpg by default (``BENCH_PEER_DRIVER=psycopg`` for its psycopg 3
driver, which shares one connection between LISTEN and every query: see docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import httpx
from pgqueuer import AsyncpgDriver, PsycopgDriver, Queries, QueueManager
from pgqueuer.models import Job
from pgqueuer.ports.driver import Driver

from bench.common import CORES, drop_db, env_int, fresh_db, real_infra
from bench.paced import GATEWAY_MIN_INTERVAL_MS, INTERVAL_S, JITTER_S, Window, allowed, measure, pacer_window, per_guid
from bench.peer_dbos import dbos_window
from pacer_common.db.pool import Pool, open_pool
from pacer_common.gateway import make_client
from pacer_dev.fakegateway.process import start_fake_gateway, stop

DRIVERS = ("asyncpg", "psycopg")
BATCH_SIZE = 20  # jobs per dequeue statement (pgqueuer's default is 10)

PACE_TABLE = "CREATE TABLE peer_pace (guid text PRIMARY KEY, next_at timestamptz NOT NULL DEFAULT now())"
WAIT = ("SELECT greatest(0, extract(epoch FROM next_at - clock_timestamp()))::float8 AS wait"
        " FROM peer_pace WHERE guid = %s")
SENT = "UPDATE peer_pace SET next_at = clock_timestamp() + make_interval(secs => %s) WHERE guid = %s"


PEERS = ("pgqueuer", "dbos")


def peer() -> str:
    """Each peer vs Pacer: sends per second the gateway saw over the same window, and violations.

    One line per peer (``BENCH_PEERS``, default every one), each against the same Pacer window."""
    guids, seconds = env_int("BENCH_PEER_GUIDS", 2000), env_int("BENCH_PEER_SECONDS", 60)
    driver = os.environ.get("BENCH_PEER_DRIVER", "asyncpg")
    if driver not in DRIVERS:
        raise SystemExit(f"BENCH_PEER_DRIVER={driver!r}; choose from {DRIVERS}")
    peers = [p for p in os.environ.get("BENCH_PEERS", ",".join(PEERS)).split(",") if p]
    if unknown := set(peers) - set(PEERS):
        raise SystemExit(f"BENCH_PEERS names {sorted(unknown)}; choose from {PEERS}")
    pacer_w = pacer_window(guids, seconds, "peer_pacer")
    lines = []
    for name in peers:
        if name == "pgqueuer":
            peer_w, detail = pgqueuer_window(guids, seconds, driver), f" peer_driver={driver}"
        else:
            peer_w, detail = dbos_window(guids, per_guid(seconds), seconds), ""
        ratio = pacer_w.per_s / peer_w.per_s if peer_w.sends else float("inf")
        lines.append(f"bench peer: peer={name} peer_per_s={peer_w.per_s:.1f} pacer_per_s={pacer_w.per_s:.1f} "
                     f"ratio={ratio:.2f} allowed_per_s={allowed(guids, 1):.1f} guids={guids} seconds={seconds}"
                     f"{detail} peer_violations={peer_w.violations} pacer_violations={pacer_w.violations} "
                     f"peer_duplicates={peer_w.duplicates} pacer_duplicates={pacer_w.duplicates} cores={CORES}")
    return "\n".join(lines)


def pgqueuer_window(guids: int, seconds: int, driver: str) -> Window:
    """A fresh database and gateway; the worker runs on its own thread while this one measures."""
    url = fresh_db(real_infra(), "peer")
    gw, gw_proc = start_fake_gateway(min_interval_ms=GATEWAY_MIN_INTERVAL_MS)
    done = threading.Event()
    with ThreadPoolExecutor(1, thread_name_prefix="pgqueuer-worker") as thread:
        worker = thread.submit(asyncio.run, _worker(url, gw, driver, guids, per_guid(seconds), done))
        try:
            window = measure(gw, seconds)
        finally:
            done.set()
            try:
                worker.result(120)  # a failure of the worker surfaces here
            finally:
                stop(gw_proc)
                drop_db(url)
    return window


@asynccontextmanager
async def _driver(url: str, name: str) -> AsyncIterator[Driver]:
    """pgqueuer's own connection: LISTEN for new jobs, dequeue, completion logs, heartbeats."""
    if name == "asyncpg":
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            yield AsyncpgDriver(conn)
        finally:
            await conn.close()
    else:
        import psycopg

        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pconn:
            yield PsycopgDriver(pconn)


async def _worker(url: str, gateway_url: str, driver: str, guids: int, per_guid: int,
                  done: threading.Event) -> None:
    names = [f"bg{g:05d}" for g in range(guids)]
    pool = await open_pool(url, min_size=2, max_size=20, name="peer")
    client = make_client(gateway_url, 10, max_connections=guids)
    try:
        async with pool.connection() as conn:
            await conn.execute(PACE_TABLE)
            await conn.execute("INSERT INTO peer_pace (guid) SELECT unnest(%s::text[])", (names,))
        async with _driver(url, driver) as drv:
            queries = Queries(drv)
            await queries.install()
            # Queued before the worker starts, as Pacer's items are: message n of every guid, then n + 1.
            jobs = [(g, n) for n in range(per_guid) for g in names]
            await queries.enqueue([f"send.{g}" for g, _ in jobs],
                                  [json.dumps({"guid": g, "to_id": f"room-{n}", "content": "hello",
                                               "idem_key": f"peer:{g}:{n}"}).encode() for g, n in jobs],
                                  [0] * len(jobs))
            qm = QueueManager(queries)
            send = _send(pool, client, random.Random())
            for g in names:
                qm.entrypoint(f"send.{g}", concurrency_limit=1)(send)

            async def stop_when_done() -> None:
                await asyncio.to_thread(done.wait)
                qm.shutdown.set()

            stopper = asyncio.create_task(stop_when_done())
            await qm.run(batch_size=BATCH_SIZE)
            await stopper
    finally:
        await client.aclose()
        await pool.close()


def _send(pool: Pool, client: httpx.AsyncClient,
          rng: random.Random) -> Callable[[Job], Awaitable[None]]:
    """The handler every guid's entrypoint runs: wait for the guid's moment, send, set the next one."""

    async def send(job: Job) -> None:
        msg = json.loads(job.payload or b"{}")
        guid = msg["guid"]
        async with pool.connection() as conn:
            row = await (await conn.execute(WAIT, (guid,))).fetchone()
        if row and row["wait"] > 0:
            await asyncio.sleep(row["wait"])
        resp = await client.post("/message/sendText", json={"guid": guid, "toId": msg["to_id"],
                                                            "content": msg["content"]},
                                 headers={"X-Idempotency-Key": msg["idem_key"]})
        resp.raise_for_status()
        async with pool.connection() as conn:
            await conn.execute(SENT, (INTERVAL_S + rng.random() * JITTER_S, guid))
        if resp.json().get("code") != 0:
            raise RuntimeError(f"gateway refused {msg['idem_key']}: {resp.text}")

    return send

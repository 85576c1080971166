"""``bench console``: what the console's job page costs the Control API and Postgres while a tab
shows a large job. A job of ``BENCH_CONSOLE_SHARDS`` shards (one per guid) with
``BENCH_CONSOLE_ITEMS_PER_SHARD`` items each, most of them not delivered; each of the page's
polled parts read through the real app (in process) on a real Postgres, the median of a few
reads each; and, for scale, the whole job as ``GET /api/v1/jobs/{id}`` gives it with every
shard (what the page read every second before it was split); each read afresh
(``PACER_CONTROL_COUNTS_SHARE`` 1: nothing kept). ``tab_ms_per_s`` is the server time a shown
tab costs a second: the parts read at their poll periods for ``BENCH_CONSOLE_TAB_S`` seconds of
the app's clock (``Tab``: the time between polls passed on that clock, not waited for)
on an app with the default settings, where a job's counts that take long to read are kept a
while (``domain/reuse.py``); ``afresh_tab_ms_per_s`` the same from the reads afresh;
``ratio`` = ``tab_ms_per_s`` over one read of every shard."""

from __future__ import annotations

import asyncio
import io
import random
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from bench.common import CORES, drop_db, env_int, fresh_db, real_infra
from pacer_common.db import operations
from pacer_common.db.pool import open_pool
from pacer_common.domain.ids import new_item_ids
from pacer_common.domain.tokens import Role
from pacer_control.app import build_app

# The job page's polled parts and how often each is read while shown (job.html).
PARTS = {"progress": 1.0, "failures": 10.0, "shards": 5.0}
STATUSES = ("failed", "failed", "failed", "pending", "pending", "confirmed", "waiting_retry", "abandoned")
ERRORS = ("bad_params", "needs_human", "rate_limited", "shed")
READS = 7


def _seed(url: str, shards: int, per_shard: int) -> str:
    """A running job of ``shards`` shards, ``per_shard`` items each in a mix of statuses, its
    projection (``shard_status_counts``) level with its items; three shards paused."""
    job, now, rnd = str(uuid.uuid4()), datetime.now(UTC), random.Random(1)
    ids = iter(new_item_ids(shards * per_shard, now))
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,"
                     " target_mode, total, request, created_at, status)"
                     " VALUES (%s, %s, 'campaign', 3, 'bench', '{}', 1, 'snapshot', %s, '{}', %s, 'running')",
                     (job, f"bench-{job}", shards * per_shard, now))
        sids = [r[0] for r in conn.execute(
            "INSERT INTO shards (job_id, guid, total, status) SELECT %s, 'g-' || lpad(i::text, 6, '0'), %s, 'running'"
            " FROM generate_series(1, %s) i RETURNING shard_id", (job, per_shard, shards)).fetchall()]
        items, counts = io.StringIO(), io.StringIO()
        for n, sid in enumerate(sids):
            per: dict[str, int] = {}
            for k in range(per_shard):
                status = rnd.choice(STATUSES)
                error = rnd.choice(ERRORS) if status in ("failed", "waiting_retry", "abandoned") else "\\N"
                per[status] = per.get(status, 0) + 1
                item = next(ids)
                items.write(f"{item}\t{job}\t{sid}\tg-{n + 1:06d}\troom-{k}\thi\tk-{item}\t3\tcampaign\t{status}\t"
                            f"{error}\tcode=1 {error}\n")
            counts.writelines(f"{sid}\t{status}\t{c}\n" for status, c in per.items())
        with conn.cursor().copy("COPY items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority,"
                                " kind, status, last_error_class, last_error) FROM STDIN") as copy:
            copy.write(items.getvalue())
        with conn.cursor().copy("COPY shard_status_counts (shard_id, status, n) FROM STDIN") as copy:
            copy.write(counts.getvalue())
        conn.execute("UPDATE shards SET status = 'paused', paused_reason = 'bench' WHERE shard_id = ANY(%s)",
                     (sids[shards // 2:shards // 2 + 3],))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return job


async def _reads(url: str, job: str, tab_s: float) -> dict[str, tuple[float, int]]:
    """Each part's and the whole job's median read (ms) and size (bytes); and a tab's cost (``tab``)."""
    pool = await open_pool(url, min_size=1, max_size=4, name="bench-console")
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            token = (await operations.create_token(conn, "bench-operator", Role("operator"), "bench")).token
        paths = {name: f"/console/part/jobs/{job}/{name}" for name in PARTS}
        paths |= {"every_shard": f"/api/v1/jobs/{job}", "page": f"/api/v1/jobs/{job}?shards_limit=50"}
        out = {}
        async with _client(pool, token, counts_share=1.0) as client:
            for name, path in paths.items():
                took, size = [], 0
                for _ in range(READS):
                    t0 = time.perf_counter()
                    r = await client.get(path)
                    took.append((time.perf_counter() - t0) * 1000)
                    r.raise_for_status()
                    size = len(r.content)
                out[name] = (statistics.median(took), size)
        tab = Tab(datetime.now(UTC))
        async with _client(pool, token, clock=tab.now) as client:
            out["tab"] = (await tab.show(client, job, tab_s), 0)
        return out
    finally:
        await pool.close()


def _client(pool: Any, token: str, **kw: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(pool, **kw)), base_url="http://control",
                             headers={"Authorization": f"Bearer {token}"})


class Tab:
    """A shown tab on the app's clock (``now``): the time between its polls is passed on that
    clock, not waited for; each read takes the time it takes, and that time passes on the
    clock too, as it would for the app."""

    def __init__(self, start: datetime) -> None:
        self.start, self.elapsed = start, 0.0

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.elapsed)

    async def show(self, client: httpx.AsyncClient, job: str, seconds: float) -> float:
        """Shown for ``seconds``: each part read when its poll comes round; the server time it
        took a second (ms)."""
        due = dict.fromkeys(PARTS, 0.0)
        spent = 0.0
        while self.elapsed < seconds:
            for name, at in due.items():
                if at <= self.elapsed:
                    t0 = time.perf_counter()
                    (await client.get(f"/console/part/jobs/{job}/{name}")).raise_for_status()
                    took = time.perf_counter() - t0
                    spent += took
                    self.elapsed += took
                    due[name] = at + PARTS[name]
            self.elapsed = max(self.elapsed, min(due.values()))  # to the next poll
        return spent * 1000 / seconds


def console() -> str:
    shards, per_shard = env_int("BENCH_CONSOLE_SHARDS", 10_000), env_int("BENCH_CONSOLE_ITEMS_PER_SHARD", 30)
    tab_s = env_int("BENCH_CONSOLE_TAB_S", 20)
    inf = real_infra()
    url = fresh_db(inf, "console")
    try:
        job = _seed(url, shards, per_shard)
        read = asyncio.run(_reads(url, job, tab_s))
    finally:
        drop_db(url)
    # what a tab would cost were every read made afresh, as the figures above were
    afresh = sum(read[name][0] / every for name, every in PARTS.items())
    tab = read["tab"][0]
    parts = " ".join(f"{name}_ms={read[name][0]:.1f} {name}_kib={read[name][1] / 1024:.0f}"
                     for name in (*PARTS, "page"))
    return (f"bench console: shards={shards} items={shards * per_shard} {parts} tab_ms_per_s={tab:.1f} afresh_tab_ms_per_s={afresh:.1f} "
            f"every_shard_ms={read['every_shard'][0]:.0f} every_shard_kib={read['every_shard'][1] / 1024:.0f} "
            f"ratio={tab / read['every_shard'][0]:.3f} cores={CORES}")

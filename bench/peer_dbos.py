"""The DBOS peer of ``bench peer``: durable workflows on Postgres with a partitioned queue.

DBOS (PyPI ``dbos``) is what a Python user would pick instead of Pacer for per-account
pacing: one queue partitioned by guid, ``partition_concurrency=1`` (a guid's sends run one at
a time, across every process) and a per-partition rate limiter of one start per mean gap
(``bench.paced``: 1.0 s). Each message is a workflow with one step that posts to the same
fake gateway, through the same HTTP client, with the same idempotency key shape as Pacer.

Every message is enqueued before the worker may start any (the queue is registered once the
rows are in), as Pacer's items are seeded before its sender starts; the window counts what
the gateway saw once the first send arrived.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench.common import drop_db, fresh_db, real_infra
from bench.paced import GATEWAY_MIN_INTERVAL_MS, INTERVAL_S, JITTER_S, Window, measure
from pacer_dev.fakegateway.process import start_fake_gateway, stop

QUEUE = "pacer-peer-sends"
WORKFLOW = "peer-send"
POLL_S = 0.1  # the queue thread's polling period (DBOS's default is 1 s, which would idle guids)
ENQUEUE_THREADS = 8
log = logging.getLogger("bench.peer")


def dbos_window(guids: int, per_guid: int, seconds: int) -> Window:
    """A fresh database and gateway; DBOS runs in this process while the gateway is watched."""
    from dbos import DBOS  # imported here: DBOS keeps process-wide state

    url = fresh_db(real_infra(), "peer_dbos")
    gw, gw_proc = start_fake_gateway(min_interval_ms=GATEWAY_MIN_INTERVAL_MS)
    client = httpx.Client(base_url=gw, timeout=10, limits=httpx.Limits(max_connections=guids))
    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(config={"name": "pacer-peer", "system_database_url": url, "sys_db_pool_size": 40,
                 "log_level": "WARNING"})

    @DBOS.step(name="peer-post")
    def post(guid: str, to_id: str, idem_key: str) -> dict[str, Any]:
        resp = client.post("/message/sendText", json={"guid": guid, "toId": to_id, "content": "hello"},
                           headers={"X-Idempotency-Key": idem_key})
        resp.raise_for_status()
        body: dict[str, Any] = resp.json()
        if body.get("code") != 0:
            raise RuntimeError(f"gateway refused {idem_key}: {resp.text}")
        return body

    @DBOS.workflow(name=WORKFLOW)
    def send(guid: str, to_id: str, idem_key: str) -> None:
        post(guid, to_id, idem_key)

    try:
        DBOS.launch()
        names = [f"bg{g:05d}" for g in range(guids)]
        jobs = [(g, n) for n in range(per_guid) for g in names]

        def enqueue(chunk: list[tuple[str, int]]) -> None:
            for g, n in chunk:  # the queue is not registered yet: nothing is dequeued
                DBOS.enqueue_workflow_with_options({"workflow_name": WORKFLOW, "queue_name": QUEUE,
                                                    "queue_partition_key": g}, g, f"room-{n}", f"peer:{g}:{n}")

        t0 = time.perf_counter()
        with ThreadPoolExecutor(ENQUEUE_THREADS, thread_name_prefix="peer-enqueue") as pool:
            list(pool.map(enqueue, [jobs[i::ENQUEUE_THREADS] for i in range(ENQUEUE_THREADS)]))
        log.info("dbos peer: %d workflows enqueued in %.1f s", len(jobs), time.perf_counter() - t0)
        DBOS.register_queue(QUEUE, partition_concurrency=1, polling_interval_sec=POLL_S,
                            partition_limiter={"limit": 1, "period": INTERVAL_S + JITTER_S / 2})
        return measure(gw, seconds)
    finally:
        logging.getLogger("dbos").setLevel(logging.CRITICAL)  # workflows cut short by the shutdown
        DBOS.destroy(destroy_registry=True)
        client.close()
        stop(gw_proc)
        drop_db(url)

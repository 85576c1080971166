"""Composition root of the planner: settings, pool, Kafka, the use case, the loop."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from datetime import timedelta

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pacer_common.db.pool import open_pool
from pacer_common.kafka import MAX_REQUEST_BYTES, AsyncConsumer, make_consumer, make_producer, next_offset
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, OpsSettings, PostgresSettings
from pacer_planner.adapters.http import HttpTargetSource
from pacer_planner.adapters.kafka import KafkaCommandBus
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.adapters.postgres_targets import PostgresTargetStore
from pacer_planner.core import PagingConfig, PagingSupervisor, Planner, TargetPager
from pacer_planner.domain.sharding import DEFAULT_MAX_SHARD_ITEMS

log = logging.getLogger("pacer.planner")


class PlannerSettings(OpsSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_PLANNER_")
    port: int = 9101
    group_id: str | None = None  # default: "<topic prefix>.planner"
    max_backlog_per_guid: int = 100_000
    # Ticket notifications wait this long before sending, so a newer status of the same
    # business id arriving meanwhile replaces them (only the latest is sent). 0: no wait.
    coalesce_window_s: float = 3.0
    # A guid with more items than this in one job is split into ceil(n / max) sub-shards.
    max_shard_items: int = Field(DEFAULT_MAX_SHARD_ITEMS, ge=1)
    # Requery target sets: fetched page by page by background tasks of the planner.
    requery_max_jobs: int = Field(4, ge=1)  # jobs paged at once by one planner
    requery_sweep_s: float = Field(5.0, gt=0)  # how often to look for jobs that need paging
    requery_timeout_s: float = Field(10.0, gt=0)  # one page request
    requery_page_attempts: int = Field(5, ge=1)  # fetches of one page before the job is paused
    requery_backoff_initial_s: float = Field(0.5, ge=0)
    requery_backoff_max_s: float = Field(30.0, ge=0)
    requery_lease_s: float = Field(120.0, gt=0)  # a dead planner's jobs are taken over after this
    requery_admission_wait_s: float = Field(5.0, gt=0)  # a refused page is fetched again after this


class _PagingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.pages = Counter("pacer_planner_target_pages_total", "Requery pages stored", registry=registry)
        self.targets = Counter("pacer_planner_targets_total", "Requery targets fetched, by what became of them",
                               ["result"], registry=registry)
        self.failures = Counter("pacer_planner_target_fetch_failures_total", "Failed requery page fetches",
                                registry=registry)
        self.paused = Counter("pacer_planner_target_pauses_total", "Requery jobs paused by the planner",
                              registry=registry)

    def page_stored(self, fetched: int, added: int, duplicates: int, invalid: int) -> None:
        self.pages.inc()
        for result, n in (("added", added), ("duplicate", duplicates), ("invalid", invalid)):
            self.targets.labels(result).inc(n)

    def fetch_failed(self) -> None:
        self.failures.inc()

    def job_paused(self) -> None:
        self.paused.inc()


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: PlannerSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        handled = Counter("pacer_planner_requests_total", "Job requests handled", ["outcome"], registry=ctx.registry)
        planned = Counter("pacer_planner_items_total", "Items planned and dispatched", registry=ctx.registry)
        pool = await open_pool(pg.database_url.get_secret_value(), min_size=1,
                               max_size=4 + cfg.requery_max_jobs, name="pacer-planner")
        producer = make_producer(kafka.client_config())
        consumer = AsyncConsumer(make_consumer(
            kafka.client_config(), cfg.group_id or f"{kafka.topic_prefix}.planner",
            **{"fetch.max.bytes": MAX_REQUEST_BYTES, "receive.message.max.bytes": MAX_REQUEST_BYTES + 1_048_576},
        ))
        await consumer.call(consumer.consumer.subscribe, [kafka.job_requests])
        bus = KafkaCommandBus(producer, kafka.item_commands, kafka.job_requests_dlq)
        planner = Planner(PostgresJobStore(pool), bus, cfg.max_backlog_per_guid,
                          timedelta(seconds=cfg.coalesce_window_s), cfg.max_shard_items)
        http = httpx.AsyncClient(timeout=cfg.requery_timeout_s, follow_redirects=False)
        targets = PostgresTargetStore(pool)
        pager = TargetPager(targets, HttpTargetSource(http), bus, PagingConfig(
            owner=f"planner:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
            page_attempts=cfg.requery_page_attempts, backoff_initial_s=cfg.requery_backoff_initial_s,
            backoff_max_s=cfg.requery_backoff_max_s, lease_ttl_s=cfg.requery_lease_s,
            admission_wait_s=cfg.requery_admission_wait_s, max_backlog_per_guid=cfg.max_backlog_per_guid,
            max_shard_items=cfg.max_shard_items,
        ), _PagingMetrics(ctx.registry))
        paging = PagingSupervisor(pager, targets, cfg.requery_max_jobs, cfg.requery_sweep_s)
        Gauge("pacer_planner_paging_jobs", "Requery jobs being paged by this planner",
              registry=ctx.registry).set_function(lambda: len(paging.tasks))
        sweeper = asyncio.create_task(paging.run(ctx.stop), name="paging-sweep")
        ctx.health.set_ready(True, "consuming")
        try:
            while not ctx.stop.is_set():
                for msg in await consumer.consume(16, 0.5):
                    result = await planner.handle(msg.key(), msg.value() or b"")
                    handled.labels(result.outcome).inc()
                    planned.inc(result.items)
                    # The job and its commands are durable: only now may the offset move.
                    await consumer.commit([next_offset(msg)])
                    if result.paging and result.job_id:
                        paging.ensure(result.job_id)  # the job row holds the cursor: safe to start now
        finally:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
            await paging.close()
            await http.aclose()
            await consumer.close()
            producer.flush(10)
            await pool.close()

    await run_service("planner", cfg.ops_host, cfg.port, body)


def main() -> None:
    cfg = PlannerSettings()
    main_for("planner", cfg.log_level, run(PostgresSettings(), KafkaSettings(), cfg))  # type: ignore[call-arg]

"""Composition root of the planner: settings, pool, Kafka, the use case, the loop."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from datetime import timedelta
from typing import get_args

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pacer_common.db.pool import open_pool
from pacer_common.kafka import MAX_REQUEST_BYTES, AsyncConsumer, make_consumer, make_producer
from pacer_common.metrics import consumer_lag_config
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, OpsSettings, PostgresSettings
from pacer_planner.adapters.http import HttpTargetSource
from pacer_planner.adapters.faults import ENVIRONMENT
from pacer_planner.adapters.kafka import KafkaCommandBus, KafkaRequestSource
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.adapters.postgres_targets import PostgresTargetStore
from pacer_planner.core import Handled, PagingConfig, PagingSupervisor, Planner, TargetPager
from pacer_planner.core.consume import IntakeLoop, IntakePolicy
from pacer_planner.core.intake import Outcome
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
    # A job request that fails with an unexpected error is tried this often, then dead-lettered.
    internal_attempts: int = Field(3, ge=1)
    # Backoff between attempts at one request (the database or Kafka unavailable, or an error).
    retry_backoff_initial_s: float = Field(0.5, gt=0)
    retry_backoff_max_s: float = Field(30.0, gt=0)


class _IntakeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("pacer_planner_requests_total", "Job requests handled", ["outcome"], registry=registry)
        for outcome in get_args(Outcome):
            self.requests.labels(outcome)
        self.items = Counter("pacer_planner_items_total", "Items planned and dispatched", registry=registry)
        self.environment = Counter("pacer_planner_environment_faults_total",
                                   "Job request attempts that failed for the database or Kafka (retried)",
                                   registry=registry)
        self.internal = Counter("pacer_planner_internal_errors_total",
                                "Job request attempts that failed with an unexpected error", registry=registry)

    def handled(self, result: Handled) -> None:
        self.requests.labels(result.outcome).inc()
        self.items.inc(result.items)

    def environment_fault(self) -> None:
        self.environment.inc()

    def internal_error(self) -> None:
        self.internal.inc()


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
        pool = await open_pool(pg.database_url.get_secret_value(), min_size=1,
                               max_size=4 + cfg.requery_max_jobs, name="pacer-planner")
        # A dead-letter record is a request (up to MAX_REQUEST_BYTES) plus its reason headers.
        producer = make_producer(kafka.client_config(), **{"message.max.bytes": MAX_REQUEST_BYTES + 1_048_576})
        consumer = AsyncConsumer(make_consumer(
            kafka.client_config(), cfg.group_id or f"{kafka.topic_prefix}.planner",
            **{"fetch.max.bytes": MAX_REQUEST_BYTES, "receive.message.max.bytes": MAX_REQUEST_BYTES + 1_048_576},
            **consumer_lag_config(ctx.registry),
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
        intake = IntakeLoop(planner, KafkaRequestSource(consumer), IntakePolicy(
            ENVIRONMENT, cfg.internal_attempts, backoff_initial_s=cfg.retry_backoff_initial_s,
            backoff_max_s=cfg.retry_backoff_max_s), _IntakeMetrics(ctx.registry), ctx.stop, paging.ensure)
        ctx.health.set_ready(True, "consuming")
        try:
            await intake.run()
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

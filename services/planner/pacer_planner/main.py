"""Composition root of the planner: settings, pool, Kafka, the use case, the loop."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from datetime import timedelta

import httpx

from pacer_common.db.pool import open_pool
from pacer_common.metrics import PoolStats
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, PostgresSettings
from pacer_planner.adapters.faults import ENVIRONMENT
from pacer_planner.adapters.http import HttpTargetSource
from pacer_planner.adapters.kafka import KafkaCommandBus, KafkaRequestSource
from pacer_planner.adapters.postgres import ApprovalPolicy, PostgresJobStore, PostgresPositions
from pacer_planner.adapters.postgres_targets import PostgresTargetStore
from pacer_planner.core import PagingConfig, PagingSupervisor, Planner, TargetPager
from pacer_planner.core.consume import IntakeLoop, IntakePolicy
from pacer_planner.metrics import PlannerMetrics
from pacer_planner.settings import PlannerSettings


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: PlannerSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        m = PlannerMetrics(ctx.registry)
        pool = await open_pool(pg.database_url.get_secret_value(), min_size=1,
                               max_size=4 + cfg.requery_max_jobs, name="pacer-planner")
        PoolStats(pool, ctx.registry)
        bus = KafkaCommandBus.create(kafka, cfg.publish_stall_s)
        group = cfg.group_id or f"{kafka.topic_prefix}.planner"
        requests = await KafkaRequestSource.create(kafka, group, ctx.registry, PostgresPositions(pool, group).save)
        store = PostgresJobStore(pool, ApprovalPolicy(cfg.approval_above_items, cfg.approve_new_content))
        planner = Planner(store, bus, cfg.max_backlog_per_guid,
                          timedelta(seconds=cfg.coalesce_window_s), cfg.max_shard_items)
        http = httpx.AsyncClient(timeout=cfg.requery_timeout_s, follow_redirects=False)
        source = HttpTargetSource(http, deadline_s=cfg.requery_timeout_s, max_bytes=cfg.requery_max_page_bytes)
        targets = PostgresTargetStore(pool, cfg.approval_above_items)
        pager = TargetPager(targets, source, bus, PagingConfig(
            owner=f"planner:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
            page_attempts=cfg.requery_page_attempts, backoff_initial_s=cfg.requery_backoff_initial_s,
            backoff_max_s=cfg.requery_backoff_max_s, lease_ttl_s=cfg.requery_lease_s,
            admission_wait_s=cfg.requery_admission_wait_s, max_backlog_per_guid=cfg.max_backlog_per_guid,
            max_shard_items=cfg.max_shard_items,
        ), m.paging)
        paging = PagingSupervisor(pager, targets, cfg.requery_max_jobs, cfg.requery_sweep_s)
        m.paging_jobs.set_function(lambda: len(paging.tasks))
        sweeper = asyncio.create_task(paging.run(ctx.stop), name="paging-sweep")
        intake = IntakeLoop(planner, requests, IntakePolicy(
            ENVIRONMENT, cfg.internal_attempts, backoff_initial_s=cfg.retry_backoff_initial_s,
            backoff_max_s=cfg.retry_backoff_max_s), m.intake, ctx.stop, paging.ensure)
        ctx.health.set_ready(True, "consuming")
        try:
            await intake.run()
        finally:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
            await paging.close()
            await http.aclose()
            await requests.close()
            bus.close()
            await pool.close()

    await run_service("planner", cfg.ops_host, cfg.port, body, consumes=(kafka.job_requests,))


def main() -> None:
    cfg = PlannerSettings()
    main_for("planner", cfg, run(PostgresSettings(), KafkaSettings(), cfg))

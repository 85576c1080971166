"""Composition root of the sender: settings, pool, gateway, dispatcher, sweep, the Kafka loop."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import uuid
from datetime import time as dtime
from datetime import timedelta
from typing import Literal

from prometheus_client import Counter, Gauge, Histogram
from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from pacer_common.db.pool import open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, RetryPolicy
from pacer_common.gateway import GatewayClient, make_client
from pacer_common.kafka import AsyncConsumer, make_consumer
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, OpsSettings, PostgresSettings
from pacer_sender.adapters.kafka import ConsumerLoop
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository, PostgresLimitsSource
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.core import Executed, Executor
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.pacing import Limits
from pacer_sender.leases import GuidLeases
from pacer_sender.limits import LimitsBook
from pacer_sender.sweeper import Sweeper, Trigger

log = logging.getLogger("pacer.sender")


class SenderSettings(OpsSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_SENDER_")
    port: int = 9102
    group_id: str | None = None  # default: "<topic prefix>.sender"
    # This process's identity on leases: the name given (default <hostname>:<pid>) plus a
    # random suffix drawn once per start, so two containers with the same hostname and pid 1,
    # or a restarted one, never share an owner (and never renew each other's leases).
    owner: str = Field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}", validate_default=True)
    gateway_url: str = Field(default="http://127.0.0.1:8080", validation_alias="PACER_GATEWAY_URL")
    gateway_timeout_s: float = 10.0
    lease_ttl_s: float = 60.0
    min_interval_ms: int = 1000
    jitter_ms: int = 500
    jitter_dist: Literal["uniform", "exponential"] = "uniform"
    online_reserve: float = 0.2
    per_minute: int | None = None
    per_hour: int | None = None
    per_day: int | None = None
    quiet_hours: str | None = Field(default=None, description='batch sends wait, e.g. "22:00-08:00"')
    timezone: str = "Asia/Shanghai"
    limits_refresh_s: float = 1.0
    max_attempts: int = 5
    retry_base_s: float = 1.0
    max_buffered: int = 20_000
    guid_buffer: int = Field(default=50, ge=2)
    sweep_s: float = Field(default=20.0, gt=0)
    item_error_attempts: int = Field(default=3, ge=1)
    failure_codes: dict[int, FailureClass] = Field(default_factory=lambda: dict(DEFAULT_CODE_TABLE))
    db_pool_max: int = 20
    shed: bool = True  # default for every guid; per guid: the ``shed`` limit
    online_yield_s: float = Field(default=10.0, ge=0)  # per guid: the ``online_yield_s`` limit
    shed_every_s: float = Field(default=30.0, gt=0)

    @field_validator("owner")
    @classmethod
    def _unique_owner(cls, name: str) -> str:
        return f"{name}:{uuid.uuid4().hex[:12]}"

    def limits(self) -> Limits:
        quiet = None
        if self.quiet_hours:
            start, _, end = self.quiet_hours.partition("-")
            quiet = (dtime.fromisoformat(start.strip()), dtime.fromisoformat(end.strip()))
        return Limits(self.min_interval_ms / 1000, self.jitter_ms / 1000, self.jitter_dist, self.online_reserve,
                      self.per_minute, self.per_hour, self.per_day, quiet, self.timezone,
                      shed=self.shed, online_yield_s=self.online_yield_s)

    @model_validator(mode="after")
    def _lease_covers_a_send(self) -> SenderSettings:
        self.limits()  # refuse bad pacing settings at start-up
        # A claim must outlive the longest send it covers (the send deadline is a quarter of
        # the lease, the gateway timeout at most a quarter more), so item leases need no renewal.
        if self.gateway_timeout_s > self.lease_ttl_s / 4:
            raise ValueError(
                f"PACER_SENDER_GATEWAY_TIMEOUT_S ({self.gateway_timeout_s}) must be at most a quarter of "
                f"PACER_SENDER_LEASE_TTL_S ({self.lease_ttl_s})")
        return self


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: SenderSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        executed = Counter("pacer_sender_items_total", "Items executed, by outcome", ["outcome"], registry=ctx.registry)
        bad = Counter("pacer_sender_bad_commands_total", "Unreadable item commands", registry=ctx.registry)
        internal = Counter("pacer_sender_internal_errors_total", "Unexpected errors while executing an item",
                           registry=ctx.registry)
        swept = Counter("pacer_sender_swept_guids_total",
                        "Guids with overdue queued work and no worker, found in Postgres by the sweep",
                        ["trigger"], registry=ctx.registry)
        Gauge("pacer_sender_buffered_items", "Commands held in memory", registry=ctx.registry).set_function(
            lambda: dispatcher.buffered)
        Gauge("pacer_sender_active_guids", "Guids with work in hand", registry=ctx.registry).set_function(
            lambda: dispatcher.active_guids)

        rate_limited = Counter("pacer_sender_rate_limited_total", "Rate-limited gateway answers: the guid slowed, "
                               "the item deferred (no attempt, no budget used)", registry=ctx.registry)

        def on_executed(cmd: ItemCommand, res: Executed) -> None:
            executed.labels(res.outcome).inc()
            if res.outcome == "rate_limited":
                rate_limited.inc()

        shed = Counter("pacer_sender_shed_items_total", "Batch items expired early (reason shed): they could not "
                       "go out before their expire_at at their guid's rate", registry=ctx.registry)
        waited = Histogram("pacer_sender_wait_seconds", "From ready (created or due) to the gateway call, by lane "
                           "and kind", ["lane", "kind"], registry=ctx.registry,
                           buckets=(0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600))

        def on_swept(trigger: Trigger, n: int) -> None:
            swept.labels(trigger).inc(n)

        pool = await open_pool(pg.database_url.get_secret_value(), min_size=2, max_size=cfg.db_pool_max,
                               name="pacer-sender")
        http = make_client(cfg.gateway_url, cfg.gateway_timeout_s)
        gateway = GatewayClient(http, cfg.failure_codes)
        repo = PostgresItemRepository(pool, timedelta(seconds=cfg.lease_ttl_s))
        queue = PostgresGuidQueue(pool)
        retry = RetryPolicy(cfg.max_attempts, timedelta(seconds=cfg.retry_base_s))
        executor = Executor(repo, gateway, cfg.owner, retry, send_deadline_s=cfg.lease_ttl_s / 4)
        defaults = cfg.limits()
        leases = GuidLeases(PostgresGuidLeases(pool, timedelta(seconds=cfg.lease_ttl_s)), cfg.owner, cfg.lease_ttl_s)
        Gauge("pacer_sender_guid_leases_held", "Guid leases this sender holds", registry=ctx.registry).set_function(
            lambda: len(leases.held))
        Gauge("pacer_sender_guid_takeovers", "Guid leases taken over from another owner since start",
              registry=ctx.registry).set_function(lambda: leases.takeovers)
        limits = LimitsBook(defaults, PostgresLimitsSource(pool))
        await limits.refresh()
        # Kafka 4's consumer group protocol (KIP-848) rebalances incrementally, and its range
        # assignor gives partition N of both lane topics to the same sender: a guid's online
        # and batch commands meet in one process.
        consumer = AsyncConsumer(make_consumer(kafka.client_config(), cfg.group_id or f"{kafka.topic_prefix}.sender",
                                               protocol="consumer", remote_assignor="range"))
        dispatcher = Dispatcher(executor, limits, leases, queue, on_executed=on_executed,
                                on_internal_error=internal.inc, job_interval=limits.job_interval,
                                job_weight=limits.job_weight, shed_every_s=cfg.shed_every_s, on_shed=shed.inc,
                                on_sent=lambda lane, kind, s: waited.labels(lane, kind).observe(s),
                                guid_cap=cfg.guid_buffer, max_buffered=cfg.max_buffered, horizon_s=2 * cfg.sweep_s,
                                error_attempts=cfg.item_error_attempts)
        loop = ConsumerLoop(consumer, dispatcher, bad, kafka.item_commands("online"), kafka.item_commands("batch"))
        dispatcher.owns = loop.owns
        sweeper = Sweeper(dispatcher, queue, loop.ownership, cfg.sweep_s, on_swept)
        loop.on_assigned = sweeper.request
        limits.on_change = dispatcher.wake
        refresher = asyncio.create_task(limits.keep_fresh(ctx.stop, cfg.limits_refresh_s))
        renewals = asyncio.create_task(leases.keep_renewed(ctx.stop))
        sweeps = asyncio.create_task(sweeper.run(ctx.stop))
        ctx.health.set_ready(True, "consuming")
        try:
            await loop.run(ctx.stop)
        finally:
            ctx.stop.set()
            await sweeps
            await consumer.close()
            await renewals
            await refresher
            await leases.release(list(leases.held))
            await http.aclose()
            await pool.close()

    log.info("sender settings: %s", json.dumps(cfg.model_dump(mode="json")))
    await run_service("sender", cfg.ops_host, cfg.port, body)


def main() -> None:
    cfg = SenderSettings()
    main_for("sender", cfg.log_level, run(PostgresSettings(), KafkaSettings(), cfg))  # type: ignore[call-arg]

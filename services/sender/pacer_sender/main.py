"""Composition root of the sender: settings, pool, gateway, dispatcher, sweep, the Kafka loop."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta

from pacer_common.db.pool import open_pool
from pacer_common.db.tenants import TenantCache, keep_usage
from pacer_common.domain.breaker import Breaker
from pacer_common.domain.failures import RetryPolicy
from pacer_common.domain.quota import DailyUsage
from pacer_common.lifecycle import every
from pacer_common.metrics import PoolStats, gateway_latency
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, PostgresSettings
from pacer_common.tenant_gateways import TenantGateways
from pacer_sender.adapters.actions import PostgresActions
from pacer_sender.adapters.kafka import ConsumerLoop, command_consumer
from pacer_sender.adapters.postgres import (
    PostgresGuidLeases,
    PostgresItemRepository,
    PostgresLimitsSource,
    check_time_zone,
    publish_limits,
)
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.core import Executor
from pacer_sender.crew import QUIET_WAIT_S
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.media import MediaTiming
from pacer_sender.leases import GuidLeases
from pacer_sender.limits import LimitsBook
from pacer_sender.metrics import SenderMetrics
from pacer_sender.settings import SenderSettings
from pacer_sender.sweeper import Sweeper, Trigger

log = logging.getLogger("pacer.sender")


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: SenderSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        m = SenderMetrics(ctx.registry, cfg.failure_codes)
        m.buffered.set_function(lambda: dispatcher.buffered)
        m.active_guids.set_function(lambda: dispatcher.active_guids)

        def on_swept(trigger: Trigger, n: int) -> None:
            m.swept.labels(trigger).inc(n)

        # The sender's default time zone is the database's too: it counts the guids' days (trigger
        # guid_send_windows) where guid_limits gives no other.
        pool = await open_pool(pg.database_url.get_secret_value(), min_size=2, max_size=cfg.db_pool_max,
                               name="pacer-sender", options=f"-c pacer.timezone={cfg.timezone}")
        await check_time_zone(pool, cfg.timezone)
        PoolStats(pool, ctx.registry)
        tenants = TenantCache(pool, cfg.tenants_refresh_s,
                              fill=lambda t: t.with_defaults(cfg.gateway_url, cfg.gateway_credential))
        await tenants.reload()
        gateway = TenantGateways(tenants.get, cfg.gateway_timeout_s, cfg.failure_codes,
                                 observe=gateway_latency(ctx.registry),
                                 breaker=lambda: Breaker(cfg.breaker_failures, cfg.breaker_cooldown_s),
                                 usage=DailyUsage(sender=cfg.owner))  # this process names its usage flushes
        m.open_breakers.set_function(lambda: float(gateway.open_tenants()))
        repo = PostgresItemRepository(pool, timedelta(seconds=cfg.lease_ttl_s), linger_s=cfg.step_linger_ms / 1000,
                                      spare_linger_s=cfg.step_linger_spare_ms / 1000)
        queue = PostgresGuidQueue(pool)
        retry = RetryPolicy(cfg.max_attempts, timedelta(seconds=cfg.retry_base_s))
        executor = Executor(repo, gateway, cfg.owner, retry, send_deadline_s=cfg.send_deadline_s,
                            states=cfg.guid_state_codes, actions=PostgresActions(pool), action_gateway=gateway,
                            media_timing=MediaTiming(timedelta(seconds=cfg.media_poll_after_s),
                                                     timedelta(seconds=cfg.media_poll_every_s),
                                                     timedelta(seconds=cfg.media_recheck_s),
                                                     timedelta(seconds=cfg.media_reuse_s)),
                            deferrals=gateway)
        defaults = cfg.limits()
        leases = GuidLeases(PostgresGuidLeases(pool, timedelta(seconds=cfg.lease_ttl_s), timedelta(seconds=cfg.in_flight_s)),
                           cfg.owner, cfg.lease_ttl_s)
        m.leases_held.set_function(lambda: len(leases.held))
        leases.on_takeover = m.takeovers.inc
        limits = LimitsBook(defaults, PostgresLimitsSource(pool))
        await limits.refresh()
        consumer = command_consumer(kafka, cfg.group_id, ctx.registry)
        dispatcher = Dispatcher(executor, limits, leases, queue, on_executed=m.executed,
                                on_internal_error=m.internal_errors.inc, job_interval=limits.job_interval,
                                job_weight=limits.job_weight, shed_every_s=cfg.shed_every_s, on_shed=m.shed.inc,
                                guid_cap=cfg.guid_buffer, guid_cap_max=cfg.guid_buffer_max, max_buffered=cfg.max_buffered,
                                horizon_s=2 * cfg.sweep_s, idle_lease_s=cfg.idle_lease_s,
                                error_attempts=cfg.item_error_attempts, first_send_spread=cfg.first_send_spread,
                                claim_ahead_s=cfg.claim_ahead_ms / 1000, on_send_delay=m.send_delay_observed,
                                # with the claim ahead (≤ a quarter too), well inside the send deadline
                                quiet_wait_s=min(QUIET_WAIT_S, cfg.send_deadline_s / 4))
        loop = ConsumerLoop(consumer, dispatcher, m.bad_commands, kafka.item_commands("online"),
                            kafka.item_commands("batch"))
        dispatcher.owns = loop.owns
        m.partitions_assigned.set_function(lambda: len(loop.assigned))
        sweeper = Sweeper(dispatcher, queue, loop.owns, loop.ownership, cfg.sweep_s, on_swept, loop.owned_partitions,
                          on_error=m.loop_errors.labels("sweep").inc)
        loop.on_assigned = sweeper.request
        limits.on_change = dispatcher.wake
        refresher = asyncio.create_task(limits.keep_fresh(ctx.stop, cfg.limits_refresh_s,
                                                          m.loop_errors.labels("limits").inc))
        # This sender's own defaults, by which the stall count and the Control API read the guids
        # it holds; a row not written for a day is deleted as a gone sender's.
        published = asyncio.create_task(every(
            lambda: publish_limits(pool, cfg.owner, defaults.model_dump(mode="json")), ctx.stop, 300.0,
            "publishing this sender's limits", m.loop_errors.labels("published_limits").inc))
        tenant_refresher = asyncio.create_task(tenants.keep_fresh(ctx.stop, m.loop_errors.labels("tenants").inc))
        usage = asyncio.create_task(keep_usage(pool, gateway.usage, ctx.stop, on_error=m.loop_errors.labels("usage").inc))
        renewals = asyncio.create_task(leases.keep_renewed(ctx.stop, m.loop_errors.labels("leases").inc))
        sweeps = asyncio.create_task(sweeper.run(ctx.stop))
        ctx.health.set_ready(True, "consuming")
        try:
            await loop.run(ctx.stop)
        finally:
            ctx.stop.set()
            await sweeps
            await loop.close()
            await renewals
            await refresher
            await published
            await tenant_refresher
            await usage
            await leases.release(list(leases.held))
            await leases.close()
            await gateway.aclose()
            await pool.close()

    log.info("sender settings: %s", json.dumps(cfg.model_dump(mode="json")))
    await run_service("sender", cfg.ops_host, cfg.port, body, consumes=(kafka.item_commands("online"), kafka.item_commands("batch")))


def main() -> None:
    cfg = SenderSettings()
    main_for("sender", cfg, run(PostgresSettings(), KafkaSettings(), cfg))

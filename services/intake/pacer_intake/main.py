"""Composition root of the callback intake: tenants, producer, uvicorn."""

from __future__ import annotations

import asyncio
import logging

from pacer_common.db.pool import open_pool
from pacer_common.db.tenants import TenantCache
from pacer_common.lifecycle import stop_event
from pacer_common.metrics import PoolStats, service_registry
from pacer_common.ops import Health, serve
from pacer_common.service import main_for
from pacer_common.settings import KafkaSettings, PostgresSettings
from pacer_intake.adapters.kafka import KafkaCallbackLog, callback_producer
from pacer_intake.app import build_app
from pacer_intake.core import Intake
from pacer_intake.settings import IntakeSettings

log = logging.getLogger("pacer.intake")


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: IntakeSettings) -> None:
    stop = stop_event()
    registry, health = service_registry("intake"), Health()
    pool = await open_pool(pg.database_url.get_secret_value(), min_size=1, max_size=2, name="pacer-intake")
    PoolStats(pool, registry)
    tenants = TenantCache(pool, cfg.tenants_refresh_s,
                          fill=lambda t: t.with_defaults(callback_secret=cfg.default_callback_secret))
    await tenants.reload()
    callbacks = KafkaCallbackLog(callback_producer(kafka.client_config(), cfg.ack_timeout_s), kafka.callbacks,
                                 kafka.callbacks_dlq, cfg.ack_timeout_s)
    app = build_app(Intake(tenants.get, callbacks, cfg.max_body_bytes), registry, health)
    refresher = asyncio.create_task(tenants.keep_fresh(stop))
    server, task = await serve(app, cfg.ops_host, cfg.port)
    health.set_ready(True, "serving")
    log.info("intake started; callbacks on http://%s:%d/callbacks/{tenant} → %s", cfg.ops_host, cfg.port,
             kafka.callbacks)
    try:
        await stop.wait()
    finally:
        health.set_ready(False, "stopping")
        server.should_exit = True
        await task
        await refresher
        left = await asyncio.to_thread(callbacks.close)
        if left:
            log.error("%d callbacks left unflushed at shutdown (their requests were answered 503)", left)
        await pool.close()
        log.info("intake stopped")


def main() -> None:
    cfg = IntakeSettings()
    main_for("intake", cfg, run(PostgresSettings(), KafkaSettings(), cfg))

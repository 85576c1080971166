"""Composition root of the callback intake: settings, tenants, producer, uvicorn."""

from __future__ import annotations

import asyncio
import logging

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from pacer_common.db.pool import open_pool
from pacer_common.db.tenants import TenantCache
from pacer_common.lifecycle import stop_event
from pacer_common.metrics import service_registry
from pacer_common.ops import Health, serve
from pacer_common.service import main_for
from pacer_common.settings import KafkaSettings, OpsSettings, PostgresSettings
from pacer_intake.adapters.kafka import KafkaCallbackLog, callback_producer
from pacer_intake.app import build_app
from pacer_intake.core import Intake

log = logging.getLogger("pacer.intake")


class IntakeSettings(OpsSettings):
    """``PACER_INTAKE_*``. Callbacks and /healthz, /readyz, /metrics share one port."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_INTAKE_")
    port: int = Field(9105, description="HTTP port of `POST /callbacks/{tenant}` and the ops endpoints.")
    default_callback_secret: SecretStr | None = Field(None, description=(
        "Callback secret of the `default` tenant, unless its row in `tenants` sets one (other tenants' secrets "
        "are in `tenants`, set with the Control API). Unset and unset there: the `default` tenant's callbacks are "
        "refused (401). A secret: never logged."
    ))
    tenants_refresh_s: float = Field(5.0, gt=0, description=(
        "How often tenants and their callback secrets are re-read from Postgres, in the background (a request "
        "never waits on the database): a new tenant or secret is honoured within this."
    ))
    max_body_bytes: int = Field(1_048_576, gt=0, description="Largest callback body accepted; larger: 413, unread.")
    ack_timeout_s: float = Field(5.0, gt=0, description=(
        "How long a callback waits for Kafka's acknowledgement (acks=all) before it is answered 503 (the gateway "
        "sends it again); also the producer's `message.timeout.ms`."
    ))


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: IntakeSettings) -> None:
    stop = stop_event()
    registry, health = service_registry("intake"), Health()
    pool = await open_pool(pg.database_url.get_secret_value(), min_size=1, max_size=2, name="pacer-intake")
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
    main_for("intake", cfg.log_level, run(PostgresSettings(), KafkaSettings(), cfg))

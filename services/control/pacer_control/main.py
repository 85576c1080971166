"""Composition root of the Control API: settings, pool, the DLQ topics' reader, uvicorn."""

from __future__ import annotations

import logging

from pydantic import ValidationError

from pacer_common.lifecycle import stop_event
from pacer_common.metrics import PoolStats, service_registry
from pacer_common.ops import Health, serve
from pacer_common.service import main_for
from pacer_common.settings import KafkaSettings, PostgresSettings
from pacer_control.adapters.kafka import KafkaDeadLetters
from pacer_control.app import build_app, control_pool
from pacer_control.settings import ControlSettings

log = logging.getLogger("pacer.control")


async def run(pg: PostgresSettings, kafka: KafkaSettings | None, cfg: ControlSettings) -> None:
    stop = stop_event()
    registry, health = service_registry("control"), Health()
    pool = control_pool(pg.database_url.get_secret_value(), cfg)
    await pool.open(wait=True, timeout=30)
    PoolStats(pool, registry)
    app = build_app(pool, sandbox_targets=cfg.sandbox(),
                    registry=registry, health=health, db_deadline_s=cfg.db_deadline_s,
                    stalled_after_s=cfg.stalled_after_s, max_body_bytes=cfg.max_body_bytes,
                    report_page_rows=cfg.report_page_rows, dry_run_max_bytes=cfg.dry_run_max_bytes,
                    dry_run_concurrency=cfg.dry_run_concurrency, counts_share=cfg.counts_share,
                    counts_fresh_s=cfg.counts_fresh_ms / 1000,
                    dead_letters=KafkaDeadLetters(kafka) if kafka else None)
    if kafka is None:
        log.warning("PACER_KAFKA_BOOTSTRAP_SERVERS is not set: the dead letters (console page and /dead-letters) "
                    "answer 503 until it is")
    server, task = await serve(app, cfg.ops_host, cfg.port)
    health.set_ready(True, "serving")
    log.info("control started; API on http://%s:%d/api/v1 (docs: /api/v1/docs)", cfg.ops_host, cfg.port)
    try:
        await stop.wait()
    finally:
        health.set_ready(False, "stopping")
        server.should_exit = True
        await task
        await pool.close()
        log.info("control stopped")


def main() -> None:
    cfg = ControlSettings()
    main_for("control", cfg, run(PostgresSettings(), _kafka(), cfg))


def _kafka() -> KafkaSettings | None:
    """The Kafka settings, or None where no broker is named at all: the dead letters are the
    control service's only use of Kafka, and a deployment that gives it none keeps the rest."""
    try:
        return KafkaSettings()
    except ValidationError as exc:
        if [(e["loc"], e["type"]) for e in exc.errors()] == [(("kafka_bootstrap_servers",), "missing")]:
            return None
        raise

"""Composition root of the planner: settings, pool, Kafka, the use case, the loop."""

from __future__ import annotations

import logging
from datetime import timedelta

from prometheus_client import Counter
from pydantic_settings import SettingsConfigDict

from pacer_common.db.pool import open_pool
from pacer_common.kafka import MAX_REQUEST_BYTES, AsyncConsumer, make_consumer, make_producer, next_offset
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, OpsSettings, PostgresSettings
from pacer_planner.adapters.kafka import KafkaCommandBus
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.core import Planner

log = logging.getLogger("pacer.planner")


class PlannerSettings(OpsSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_PLANNER_")
    port: int = 9101
    group_id: str | None = None  # default: "<topic prefix>.planner"
    max_backlog_per_guid: int = 100_000
    # Ticket notifications wait this long before sending, so a newer status of the same
    # business id arriving meanwhile replaces them (only the latest is sent). 0: no wait.
    coalesce_window_s: float = 3.0


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: PlannerSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        handled = Counter("pacer_planner_requests_total", "Job requests handled", ["outcome"], registry=ctx.registry)
        planned = Counter("pacer_planner_items_total", "Items planned and dispatched", registry=ctx.registry)
        pool = await open_pool(pg.database_url.get_secret_value(), min_size=1, max_size=4, name="pacer-planner")
        producer = make_producer(kafka.client_config())
        consumer = AsyncConsumer(make_consumer(
            kafka.client_config(), cfg.group_id or f"{kafka.topic_prefix}.planner",
            **{"fetch.max.bytes": MAX_REQUEST_BYTES, "receive.message.max.bytes": MAX_REQUEST_BYTES + 1_048_576},
        ))
        await consumer.call(consumer.consumer.subscribe, [kafka.job_requests])
        planner = Planner(PostgresJobStore(pool), KafkaCommandBus(producer, kafka.item_commands, kafka.job_requests_dlq),
                          cfg.max_backlog_per_guid, timedelta(seconds=cfg.coalesce_window_s))
        ctx.health.set_ready(True, "consuming")
        try:
            while not ctx.stop.is_set():
                for msg in await consumer.consume(16, 0.5):
                    result = await planner.handle(msg.key(), msg.value() or b"")
                    handled.labels(result.outcome).inc()
                    planned.inc(result.items)
                    # The job and its commands are durable: only now may the offset move.
                    await consumer.commit([next_offset(msg)])
        finally:
            await consumer.close()
            producer.flush(10)
            await pool.close()

    await run_service("planner", cfg.ops_host, cfg.port, body)


def main() -> None:
    cfg = PlannerSettings()
    main_for("planner", cfg.log_level, run(PostgresSettings(), KafkaSettings(), cfg))  # type: ignore[call-arg]

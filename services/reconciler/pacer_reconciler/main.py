"""Composition root of the reconciler: one leader tails the log and runs the sweeps."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from prometheus_client import Counter, Gauge
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pacer_common.db.leader import LeaderLock
from pacer_common.db.pool import open_pool
from pacer_common.domain.failures import DEFAULT_CODE_TABLE
from pacer_common.gateway import GatewayClient, make_client
from pacer_common.kafka import make_producer
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, OpsSettings, PostgresSettings
from pacer_reconciler.adapters.kafka import KafkaPublisher
from pacer_reconciler.adapters.postgres import CursorMoved, PostgresLog
from pacer_reconciler.core import Reconciler
from pacer_reconciler.domain.breakers import BreakerPolicy, Breakers

log = logging.getLogger("pacer.reconciler")


class ReconcilerSettings(OpsSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_RECONCILER_")
    port: int = 9103
    gateway_url: str = Field(default="http://127.0.0.1:8080", validation_alias="PACER_GATEWAY_URL")
    gateway_timeout_s: float = 5.0
    sweep_interval_s: float = 1.0
    verify_deadline_s: float = 300.0
    # Wait this long after a send went in doubt before asking the gateway: at least the
    # senders' gateway timeout, so a request still in flight is not "proved" undelivered.
    verify_after_s: float = 15.0
    batch: int = 2000
    # Circuit breakers per job and per guid (see domain/breakers.py).
    breaker_consecutive: int = 20
    breaker_window: int = 100
    breaker_ratio: float = 0.5
    breaker_min_samples: int = 40
    # A shard of a running job with open items and no progress for this long is stalled.
    stall_after_s: float = 600.0


async def _idle(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: ReconcilerSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        tailed = Counter("pacer_reconciler_events_total", "Events projected and published", registry=ctx.registry)
        moved = Counter("pacer_reconciler_sweep_items_total", "Items moved by sweeps", ["sweep"], registry=ctx.registry)
        sweep_errors = Counter("pacer_reconciler_sweep_errors_total", "Sweep rounds that failed, by sweep", ["sweep"],
                               registry=ctx.registry)
        verified = Counter("pacer_reconciler_verifications_total", "In-doubt sends resolved", ["result"],
                           registry=ctx.registry)
        # Gauges set from the database each sweep: locks (lock_counts.sql) and governance.
        gauges = {
            name: Gauge(f"pacer_{name}", help_, registry=ctx.registry) for name, help_ in {
                "running_items": "Items claimed or submitted right now",
                "expired_leases": "Guid and item leases held past their expiry (takeover pending)",
                "takeovers": "Guid leases taken over from another sender, all time",
                "duplicate_intercepts": "Sends refused by the idempotency ledger, all time",
                "retry_conflicts": "Manual retries refused because the item was executing, all time",
                "forced_releases": "Guid leases force-released by an admin (holder evicted), all time",
                "forced_item_releases": "Item leases force-released by an admin, all time",
                "jobs_paused_budget": "Jobs paused because their send budget is used up",
                "jobs_paused_breaker": "Jobs paused by a circuit breaker",
                "jobs_paused_operator": "Jobs paused by an operator",
                "guids_paused": "Guids paused (needs a person: offline, kicked, unauthorized, breaker, operator)",
                "stalled_shards": "Open shards of running jobs with no progress for stall_after_s",
            }.items()
        }
        trips = Counter("pacer_breaker_trips_total", "Circuit breakers tripped (job or guid paused)", ["scope"],
                        registry=ctx.registry)
        leader_g = Gauge("pacer_reconciler_leader", "1 while this process is the leader", registry=ctx.registry)
        url = pg.database_url.get_secret_value()
        pool = await open_pool(url, min_size=1, max_size=4, name="pacer-reconciler")
        producer = make_producer(kafka.client_config())
        http = make_client(cfg.gateway_url, cfg.gateway_timeout_s, max_connections=20)
        store = PostgresLog(pool, "reconciler", timedelta(seconds=cfg.verify_deadline_s),
                            timedelta(seconds=cfg.verify_after_s))
        rec = Reconciler(store, store, KafkaPublisher(producer, kafka.item_outcomes, kafka.item_commands),
                         GatewayClient(http, DEFAULT_CODE_TABLE), holds=store,
                         breakers=Breakers(BreakerPolicy(cfg.breaker_consecutive, cfg.breaker_window,
                                                         cfg.breaker_ratio, cfg.breaker_min_samples)),
                         batch=cfg.batch)
        leader = LeaderLock(url, "pacer-reconciler")
        ctx.health.set_ready(True, "standby")
        next_sweep = 0.0
        loop = asyncio.get_running_loop()
        try:
            while not ctx.stop.is_set():
                if not await leader.hold():
                    leader_g.set(0)
                    ctx.health.set_ready(True, "standby")
                    rec.forget_position()
                    await _idle(ctx.stop, 2.0)
                    continue
                leader_g.set(1)
                ctx.health.set_ready(True, "leader")
                try:
                    n = await rec.tail_once()
                except CursorMoved as exc:
                    log.error("event batch not applied: %s; reading again from the stored cursor", exc)
                    n = 0
                tailed.inc(n)
                while rec.tripped:
                    trips.labels(rec.tripped.pop().scope).inc()
                if loop.time() >= next_sweep:
                    report = await rec.sweep_once()
                    for kind, k in report.moved.items():
                        moved.labels(kind).inc(k)
                    for kind in report.failed:
                        sweep_errors.labels(kind).inc()
                    for result, k in report.verified.items():
                        verified.labels(result).inc(k)
                    stall_after = timedelta(seconds=cfg.stall_after_s)
                    stats = await store.lock_stats() | await store.governance_stats(stall_after)
                    for name, value in stats.items():
                        gauges[name].set(value)
                    next_sweep = loop.time() + cfg.sweep_interval_s
                if n < cfg.batch:
                    await _idle(ctx.stop, 0.1)
        finally:
            await leader.release()
            producer.flush(10)
            await http.aclose()
            await pool.close()

    await run_service("reconciler", cfg.ops_host, cfg.port, body)


def main() -> None:
    cfg = ReconcilerSettings()
    main_for("reconciler", cfg.log_level, run(PostgresSettings(), KafkaSettings(), cfg))  # type: ignore[call-arg]

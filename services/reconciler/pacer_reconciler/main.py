"""Composition root of the reconciler: settings, pool, producer, gateway, the segment loop."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pacer_common.db.pool import open_pool
from pacer_common.db.tenants import TenantCache
from pacer_common.domain.failures import DEFAULT_CODE_TABLE
from pacer_common.metrics import PoolStats, gateway_latency
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, PostgresSettings
from pacer_common.tenant_gateways import TenantGateways
from pacer_reconciler.adapters.backlog import PostgresBacklogs
from pacer_reconciler.adapters.callbacks import KafkaCallbackSource
from pacer_reconciler.adapters.faults import ENVIRONMENT
from pacer_reconciler.adapters.job_labels import JobLabels
from pacer_reconciler.adapters.kafka import KafkaPublisher
from pacer_reconciler.adapters.layout import adopt_layout
from pacer_reconciler.adapters.partitions import PostgresPartitions
from pacer_reconciler.adapters.postgres import PostgresGuidStates, PostgresLog
from pacer_reconciler.adapters.segments import SegmentLeases
from pacer_reconciler.backlog import BacklogGauges
from pacer_reconciler.callbacks import CALLBACK_CMDS, RESULTS, CallbackConsumer
from pacer_reconciler.core import Reconciler, run_rounds
from pacer_reconciler.domain.breakers import BreakerPolicy, Breakers
from pacer_reconciler.domain.segments import segment_names
from pacer_reconciler.leading import LoopConfig, SegmentLoop
from pacer_reconciler.metrics import ReconcilerMetrics
from pacer_reconciler.ports import Lease
from pacer_reconciler.retention import PartitionKeeper, PartitionStats
from pacer_reconciler.settings import ReconcilerSettings
from pacer_reconciler.verifier import Verifier


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: ReconcilerSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        url = pg.database_url.get_secret_value()
        leases = SegmentLeases(url, "pacer-reconciler", cfg.segments, ttl_s=cfg.leader_ttl_s)
        m = ReconcilerMetrics(ctx.registry, lambda: 0 in leases.owned())
        # An owner frozen inside a transaction keeps its row locks (a lease row under the
        # fence, a cursor row) while its TCP connection lives; the server ends such a
        # transaction after half a TTL, so a peer's takeover is never blocked behind it.
        idle_tx_ms = max(1000, int(cfg.leader_ttl_s * 500))
        pool = await open_pool(url, min_size=1, max_size=8, name="pacer-reconciler",
                               options=f"-c idle_in_transaction_session_timeout={idle_tx_ms}")
        PoolStats(pool, ctx.registry)
        publisher = KafkaPublisher.create(kafka, cfg.max_message_bytes, cfg.publish_stall_s)
        tenants = TenantCache(pool, cfg.tenants_refresh_s,
                              fill=lambda t: t.with_defaults(cfg.gateway_url, cfg.gateway_credential))
        await tenants.reload()
        gateways = TenantGateways(tenants.get, cfg.gateway_timeout_s, DEFAULT_CODE_TABLE,
                                  observe=gateway_latency(ctx.registry), max_connections=cfg.verify_concurrency + 4)
        verify_deadline, verify_after = timedelta(seconds=cfg.verify_deadline_s), timedelta(seconds=cfg.verify_after_s)
        cursors = segment_names("reconciler", cfg.segments)
        # One breaker state for every segment this process holds (a job's outcomes in them).
        breakers = Breakers(BreakerPolicy(cfg.breaker_consecutive, cfg.breaker_window, cfg.breaker_ratio,
                                          cfg.breaker_min_samples))
        labels = JobLabels()  # each job's tenant and trace, read once for all segments
        store = PostgresLog(pool, "reconciler", verify_deadline, verify_after, segments=cfg.segments,
                            owned=leases.owned, labels=labels)  # the sweeps and verification of the segments held

        def tailer(segment: int, lease: Lease) -> Reconciler:
            log = PostgresLog(pool, cursors[segment], verify_deadline, verify_after, leader=lease,
                              segments=cfg.segments, segment=segment, labels=labels, own_cursor=False)
            return Reconciler(log, store, publisher, holds=store, breakers=breakers, batch=cfg.batch,
                              environment_errors=ENVIRONMENT)

        rec = Reconciler(store, store, publisher, holds=store, batch=cfg.batch, environment_errors=ENVIRONMENT)
        verifier = Verifier(store, gateways, concurrency=cfg.verify_concurrency, timeout_s=cfg.verify_timeout_s,
                            quiets=store)
        backlogs = PostgresBacklogs(pool)
        backlog = BacklogGauges(backlogs, m, cfg.backlog_top_n)
        loop = SegmentLoop(leases, tailer, rec, store, verifier, backlog, m, LoopConfig(
            leader_ttl_s=cfg.leader_ttl_s, sweep_interval_s=cfg.sweep_interval_s, batch=cfg.batch,
            stall_after_s=cfg.stall_after_s, error_backoff_max_s=cfg.error_backoff_max_s,
            backlog_every_s=cfg.backlog_every_s, stall_count_every_s=cfg.stall_count_every_s),
            prepare=lambda: adopt_layout(pool, "reconciler", cfg.segments))
        source = await KafkaCallbackSource.create(kafka, cfg.callbacks_group or f"{kafka.topic_prefix}.reconciler.callbacks",
                                                  ctx.registry)
        callbacks = CallbackConsumer(source, PostgresGuidStates(pool), environment_errors=ENVIRONMENT)
        tenant_refresher = asyncio.create_task(tenants.keep_fresh(ctx.stop), name="tenants")
        consuming = asyncio.create_task(consume_callbacks(callbacks, m, ctx.stop, cfg.error_backoff_max_s),
                                        name="callbacks")
        keeper = PartitionKeeper(PostgresPartitions(pool), cfg.retention(), cfg.partitions_ahead_days, m,
                                 cfg.partition_period_days)
        keeping = asyncio.create_task(keeper.run(cfg.maintain_every_s, ctx.stop, cfg.error_backoff_max_s),
                                      name="partitions")
        stats = PartitionStats(PostgresPartitions(pool), m, cfg.retention().by_table())
        analyzing = asyncio.create_task(stats.run(cfg.analyze_every_s, ctx.stop, cfg.error_backoff_max_s),
                                        name="partition-stats")
        try:
            await loop.run(ctx.stop, ctx.health.set_ready)
        finally:
            ctx.stop.set()
            await tenant_refresher
            await consuming
            await keeping
            await analyzing
            await source.close()
            publisher.close()
            await gateways.aclose()
            await pool.close()

    await run_service("reconciler", cfg.ops_host, cfg.port, body, consumes=(kafka.callbacks,))


async def consume_callbacks(callbacks: CallbackConsumer, m: ReconcilerMetrics, stop: asyncio.Event,
                            backoff_max_s: float) -> None:
    """The callbacks consumer's rounds, in every replica, until ``stop``; its counts exported."""
    for name in CALLBACK_CMDS:  # known label values start at 0
        for outcome in RESULTS:
            m.callbacks.labels(name, outcome)

    async def round_() -> int:
        try:
            return await callbacks.round()
        finally:  # what a round handled counts, whether or not it then failed
            for (cmd, result), k in callbacks.handled.items():
                m.callbacks.labels(cmd, result).inc(k)
                if result == "bad":
                    m.bad_events.labels("bad_callback").inc(k)
            callbacks.handled.clear()

    await run_rounds(round_, stop, 0.0, backoff_max_s, m.count_round_error)


def main() -> None:
    cfg = ReconcilerSettings()
    main_for("reconciler", cfg, run(PostgresSettings(), KafkaSettings(), cfg))

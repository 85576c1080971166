"""Composition root of the reconciler: one leader tails the log and runs the sweeps."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import get_args

from confluent_kafka import KafkaException
from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from pacer_common.db.errors import TransientError
from pacer_common.db.leader import LeaderLock, LeadershipLost
from pacer_common.db.pool import open_pool
from pacer_common.db.tenants import TenantCache
from pacer_common.domain.failures import DEFAULT_CODE_TABLE
from pacer_common.kafka import ProduceError, make_producer
from pacer_common.metrics import gateway_latency
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, OpsSettings, PostgresSettings
from pacer_common.tenant_gateways import TenantGateways
from pacer_reconciler.adapters.backlog import PostgresBacklogs
from pacer_reconciler.adapters.kafka import KafkaPublisher
from pacer_reconciler.adapters.postgres import CursorMoved, PostgresLog
from pacer_reconciler.backlog import BacklogGauges
from pacer_reconciler.core import SWEEP_KINDS, Reconciler, RoundGuard, SkipReason
from pacer_reconciler.domain.breakers import BreakerPolicy, Breakers
from pacer_reconciler.metrics import ReconcilerMetrics
from pacer_reconciler.verifier import LOOKUP_RESULTS, Verifier

log = logging.getLogger("pacer.reconciler")
# Failures of the environment, not of an event row: retried with back-off, nothing skipped.
ENVIRONMENT_ERRORS = (TransientError, ProduceError, KafkaException, CursorMoved, LeadershipLost, OSError)


class ReconcilerSettings(OpsSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PACER_RECONCILER_")
    port: int = Field(9103, description="Ops HTTP port.")
    gateway_url: str = Field(default="http://127.0.0.1:8080", validation_alias="PACER_GATEWAY_URL", description=(
        "Base URL of the gateway; in-doubt sends are verified with `GET /message/lookup?guid=…&idempotencyKey=…`."
        " Same variable as the sender's."
    ))
    gateway_credential: SecretStr | None = Field(None, validation_alias="PACER_GATEWAY_CREDENTIAL", description=(
        "Bearer credential of the `default` tenant's gateway, as the sender's. Lookups go to the item's "
        "tenant's gateway (`tenants`)."
    ))
    tenants_refresh_s: float = Field(5.0, description="How often the tenant table is re-read.")
    gateway_timeout_s: float = Field(5.0, description=(
        "HTTP timeout of one lookup request, in seconds (`PACER_RECONCILER_VERIFY_TIMEOUT_S` cuts a lookup off "
        "too, whichever comes first)."
    ))
    sweep_interval_s: float = Field(1.0, description=(
        "Least time between two sweep rounds (expired leases, due retries) and between two verification rounds."
    ))
    verify_deadline_s: float = Field(300.0, description=(
        "How long an item may stay `recovery_pending` while the gateway cannot say whether it was delivered; "
        "after that it becomes `unverified`. Counted from when the item became `recovery_pending`."
    ))
    verify_after_s: float = Field(15.0, description=(
        "An in-doubt send is first looked up only after it has been `recovery_pending` this long. Keep it at "
        "least `PACER_SENDER_GATEWAY_TIMEOUT_S`, so a request still on its way is not taken as \"not delivered\" "
        "(the service does not check this; the Helm chart does)."
    ))
    verify_concurrency: int = Field(default=16, ge=1, description=(
        "Gateway lookups of in-doubt sends running at once. They run in a task of their own, apart from the event"
        " tail: a slow or hanging gateway holds up verification only."
    ))
    verify_timeout_s: float = Field(default=5.0, gt=0, description=(
        "Deadline of one lookup. A lookup that times out is \"no answer yet\": the item stays `recovery_pending` "
        "and is asked again next round, until `PACER_RECONCILER_VERIFY_DEADLINE_S` makes it `unverified`. Never "
        "taken as proof of non-delivery."
    ))
    leader_ttl_s: float = Field(default=10.0, gt=0, description=(
        "TTL of the leader lease (table `leader_leases`). The leader renews it every TTL/3 and stops work once "
        "its last renewal is older than the TTL; a standby takes over at most TTL + TTL/3 after a leader froze or"
        " vanished (docs/reliability.md). Pool connections also get `idle_in_transaction_session_timeout` = "
        "TTL/2, so a leader frozen inside a transaction cannot hold the lease row. Set the same value on every "
        "replica."
    ))
    max_message_bytes: int = Field(1_000_000, description=(
        "Outcomes and item commands larger than this are not published: logged with the reason, counted in "
        "`pacer_reconciler_bad_events_total{reason=\"unpublishable\"}`, and skipped. Keep it at most the "
        "item-outcomes and item-commands topics' `max.message.bytes`."
    ))
    error_backoff_max_s: float = Field(30.0, description=(
        "A tail or sweep round that fails (database or Kafka down, a defect) is logged, counted in "
        "`pacer_reconciler_round_errors_total{error}` and retried after an exponential back-off from 0.5 s up to "
        "this; the service does not exit."
    ))
    batch: int = Field(2000, description="Most events read from the event log per tail round.")
    breaker_consecutive: int = Field(20, description=(
        "Circuit breaker, per job and per guid: this many failed outcomes in a row pause it (`paused_by = "
        "system:breaker`). Failures are final failures and retries for `retryable`, `needs_human`, `bad_params` "
        "and `in_doubt` answers; rate limits and missed send deadlines do not count."
    ))
    breaker_window: int = Field(100, description=(
        "The breaker's sliding window: the last this many outcomes of the job or guid."
    ))
    breaker_ratio: float = Field(0.5, description="Failure ratio over the window that pauses the job or guid.")
    breaker_min_samples: int = Field(40, description=(
        "The ratio rule applies only once the window holds this many outcomes."
    ))
    stall_after_s: float = Field(600.0, description=(
        "An open shard of a running job (guid not paused) with no progress for this long counts in "
        "`pacer_stalled_shards` (alert `PacerShardStalled`)."
    ))
    backlog_top_n: int = Field(10, ge=1, le=100, description=(
        "How many guids the backlog metrics name: the top N by queued items and the top N by oldest wait."
    ))
    backlog_every_s: float = Field(30.0, gt=0, description=(
        "How often the leader refreshes the backlog metrics (one read of every pending item: keep it at tens of "
        "seconds)."
    ))


async def _idle(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: ReconcilerSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        reg = ctx.registry
        m = ReconcilerMetrics(reg, lambda: leader.is_leader)
        # Known label values start at 0, so boards and rates see them before the first event.
        for counter, values in ((m.lookups, LOOKUP_RESULTS), (m.sweep_items, SWEEP_KINDS), (m.sweep_errors, SWEEP_KINDS),
                                (m.verifications, ("confirmed", "pending", "unverified")),
                                (m.bad_events, get_args(SkipReason)), (m.trips, ("job", "guid"))):
            for value in values:
                counter.labels(value)
        url = pg.database_url.get_secret_value()
        leader = LeaderLock(url, "pacer-reconciler", ttl_s=cfg.leader_ttl_s)
        # A leader frozen inside a transaction keeps its row locks (the lease row under the
        # fence, the cursor row) while its TCP connection lives; the server ends such a
        # transaction after half a TTL, so a standby's takeover is never blocked behind it.
        idle_tx_ms = max(1000, int(cfg.leader_ttl_s * 500))
        pool = await open_pool(url, min_size=1, max_size=6, name="pacer-reconciler",
                               options=f"-c idle_in_transaction_session_timeout={idle_tx_ms}")
        producer = make_producer(kafka.client_config())
        tenants = TenantCache(pool, cfg.tenants_refresh_s,
                              fill=lambda t: t.with_defaults(cfg.gateway_url, cfg.gateway_credential))
        await tenants.reload()
        gateways = TenantGateways(tenants.get, cfg.gateway_timeout_s, DEFAULT_CODE_TABLE, observe=gateway_latency(reg),
                                  max_connections=cfg.verify_concurrency + 4)
        store = PostgresLog(pool, "reconciler", timedelta(seconds=cfg.verify_deadline_s),
                            timedelta(seconds=cfg.verify_after_s), leader=leader)
        rec = Reconciler(store, store, KafkaPublisher(producer, kafka.item_outcomes, kafka.item_commands,
                                                      cfg.max_message_bytes), holds=store,
                         breakers=Breakers(BreakerPolicy(cfg.breaker_consecutive, cfg.breaker_window,
                                                         cfg.breaker_ratio, cfg.breaker_min_samples)),
                         batch=cfg.batch, environment_errors=ENVIRONMENT_ERRORS)
        verifier = Verifier(store, gateways,
                            concurrency=cfg.verify_concurrency, timeout_s=cfg.verify_timeout_s)
        loop = asyncio.get_running_loop()
        last_tail = loop.time()
        m.leader.set_function(lambda: float(leader.is_leader))
        m.leader_epoch.set_function(lambda: float(leader.epoch or 0) if leader.is_leader else 0.0)
        m.tail_lag.set_function(lambda: loop.time() - last_tail if leader.is_leader else 0.0)
        m.lookups_in_flight.set_function(lambda: float(verifier.in_flight))
        next_sweep = 0.0

        async def round_() -> int:
            try:
                n = await rec.tail_once()
            except CursorMoved as exc:
                log.error("event batch not applied: %s; reading again from the stored cursor", exc)
                return 0
            except LeadershipLost as exc:
                log.warning("event batch not applied: %s", exc)
                rec.forget_position()
                return 0
            m.events.inc(n)
            nonlocal next_sweep
            if loop.time() >= next_sweep:
                report = await rec.sweep_once()
                for kind, k in report.moved.items():
                    m.sweep_items.labels(kind).inc(k)
                for kind in report.failed:
                    m.sweep_errors.labels(kind).inc()
                stats = await store.lock_stats() | await store.governance_stats(timedelta(seconds=cfg.stall_after_s))
                m.leader_stats.update(stats)
                next_sweep = loop.time() + cfg.sweep_interval_s
            return n

        def drain() -> None:
            while rec.tripped:
                m.trips.labels(rec.tripped.pop().scope).inc()
            for src, counter in ((rec.bad, m.bad_events), (verifier.lookups, m.lookups),
                                 (verifier.resolved, m.verifications),
                                 (guard.errors, m.round_errors)):
                for label, k in src.items():
                    counter.labels(label).inc(k)
                src.clear()

        ctx.health.set_ready(True, "standby")
        epoch: int | None = None
        guard = RoundGuard(max_s=cfg.error_backoff_max_s)
        tasks = [asyncio.create_task(leader.keep(ctx.stop), name="leader-lease"),
                 asyncio.create_task(tenants.keep_fresh(ctx.stop), name="tenants"),
                 asyncio.create_task(verifier.run(ctx.stop, lambda: leader.is_leader, cfg.sweep_interval_s),
                                     name="verifier"),
                 asyncio.create_task(BacklogGauges(PostgresBacklogs(pool).top, m.backlog_top, m.wait_top,
                                                   cfg.backlog_top_n).run(
                     ctx.stop, lambda: leader.is_leader, cfg.backlog_every_s), name="backlog-metrics")]
        try:
            while not ctx.stop.is_set():
                drain()
                if not await leader.hold():
                    if epoch is not None:
                        log.warning("stepped down from leadership (epoch %s)", epoch)
                    epoch = None
                    ctx.health.set_ready(True, "standby")
                    rec.forget_position()
                    m.leader_stats.forget()
                    await _idle(ctx.stop, min(0.5, cfg.leader_ttl_s / 3))
                    continue
                if leader.epoch != epoch:  # a new term: the cursor may have moved meanwhile
                    rec.forget_position()
                    epoch = leader.epoch
                    ctx.health.set_ready(True, "leader")
                    last_tail = loop.time()
                n, delay = await guard.run(round_)
                if delay:
                    await _idle(ctx.stop, delay)
                    continue
                last_tail = loop.time()
                if n < cfg.batch:
                    await _idle(ctx.stop, 0.1)
        finally:
            ctx.stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            drain()
            await leader.release()
            producer.flush(10)
            await gateways.aclose()
            await pool.close()

    await run_service("reconciler", cfg.ops_host, cfg.port, body)


def main() -> None:
    cfg = ReconcilerSettings()
    main_for("reconciler", cfg.log_level, run(PostgresSettings(), KafkaSettings(), cfg))

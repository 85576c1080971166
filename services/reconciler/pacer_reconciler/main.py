"""Composition root of the reconciler: one leader tails the log and runs the sweeps."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from confluent_kafka import KafkaException
from prometheus_client import Counter, Gauge
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from pacer_common.db.errors import TransientError
from pacer_common.db.leader import LeaderLock, LeadershipLost
from pacer_common.db.pool import open_pool
from pacer_common.domain.failures import DEFAULT_CODE_TABLE
from pacer_common.gateway import GatewayClient, make_client
from pacer_common.kafka import ProduceError, make_producer
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, OpsSettings, PostgresSettings
from pacer_reconciler.adapters.backlog import PostgresBacklogs
from pacer_reconciler.adapters.kafka import KafkaPublisher
from pacer_reconciler.adapters.postgres import CursorMoved, PostgresLog
from pacer_reconciler.backlog import BacklogGauges
from pacer_reconciler.core import Reconciler, RoundGuard
from pacer_reconciler.domain.breakers import BreakerPolicy, Breakers
from pacer_reconciler.verifier import LOOKUP_RESULTS, Verifier

log = logging.getLogger("pacer.reconciler")
# Failures of the environment, not of an event row: retried with back-off, nothing skipped.
ENVIRONMENT_ERRORS = (TransientError, ProduceError, KafkaException, CursorMoved, LeadershipLost, OSError)


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
    # In-doubt lookups run apart from the tail: at most this many at once, each cut off after
    # verify_timeout_s (a timeout is "no answer yet", never proof of non-delivery).
    verify_concurrency: int = Field(default=16, ge=1)
    verify_timeout_s: float = Field(default=5.0, gt=0)
    # Leadership is a lease in Postgres renewed every ttl/3; a frozen leader is replaced
    # within ttl + ttl/3 (docs/reliability.md).
    leader_ttl_s: float = Field(default=10.0, gt=0)
    # Outcomes and commands larger than this are skipped with a reason (the topics' limit).
    max_message_bytes: int = 1_000_000
    # A failing round (database or Kafka down, a bug) is retried after an exponential
    # back-off of at most this long; the service never exits for it.
    error_backoff_max_s: float = 30.0
    batch: int = 2000
    # Circuit breakers per job and per guid (see domain/breakers.py).
    breaker_consecutive: int = 20
    breaker_window: int = 100
    breaker_ratio: float = 0.5
    breaker_min_samples: int = 40
    # A shard of a running job with open items and no progress for this long is stalled.
    stall_after_s: float = 600.0
    # Backlog metrics: the top-N guids by queued items and by oldest wait, every so often.
    backlog_top_n: int = Field(default=10, ge=1, le=100)
    backlog_every_s: float = Field(default=30.0, gt=0)


async def _idle(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: ReconcilerSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        reg = ctx.registry
        tailed = Counter("pacer_reconciler_events_total", "Events projected and published", registry=reg)
        moved = Counter("pacer_reconciler_sweep_items_total", "Items moved by sweeps", ["sweep"], registry=reg)
        sweep_errors = Counter("pacer_reconciler_sweep_errors_total", "Sweep rounds that failed, by sweep", ["sweep"],
                               registry=reg)
        verified = Counter("pacer_reconciler_verifications_total", "In-doubt sends resolved", ["result"], registry=reg)
        lookups = Counter("pacer_reconciler_lookups_total", "Gateway delivery lookups, by result (found, not_found,"
                          " unknown, timeout, error)", ["result"], registry=reg)
        bad = Counter("pacer_reconciler_bad_events_total", "Events or commands skipped because they cannot be"
                      " handled, by reason", ["reason"], registry=reg)
        round_errors = Counter("pacer_reconciler_round_errors_total", "Tail or sweep rounds that failed and were"
                               " retried after a back-off, by error", ["error"], registry=reg)
        for r in LOOKUP_RESULTS:
            lookups.labels(r)
        # Gauges set from the database each sweep: locks (lock_counts.sql) and governance.
        gauges = {
            name: Gauge(f"pacer_{name}", help_, registry=reg) for name, help_ in {
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
                        registry=reg)
        url = pg.database_url.get_secret_value()
        leader = LeaderLock(url, "pacer-reconciler", ttl_s=cfg.leader_ttl_s)
        # A leader frozen inside a transaction keeps its row locks (the lease row under the
        # fence, the cursor row) while its TCP connection lives; the server ends such a
        # transaction after half a TTL, so a standby's takeover is never blocked behind it.
        idle_tx_ms = max(1000, int(cfg.leader_ttl_s * 500))
        pool = await open_pool(url, min_size=1, max_size=6, name="pacer-reconciler",
                               options=f"-c idle_in_transaction_session_timeout={idle_tx_ms}")
        producer = make_producer(kafka.client_config())
        http = make_client(cfg.gateway_url, cfg.gateway_timeout_s, max_connections=cfg.verify_concurrency + 4)
        store = PostgresLog(pool, "reconciler", timedelta(seconds=cfg.verify_deadline_s),
                            timedelta(seconds=cfg.verify_after_s), leader=leader)
        rec = Reconciler(store, store, KafkaPublisher(producer, kafka.item_outcomes, kafka.item_commands,
                                                      cfg.max_message_bytes), holds=store,
                         breakers=Breakers(BreakerPolicy(cfg.breaker_consecutive, cfg.breaker_window,
                                                         cfg.breaker_ratio, cfg.breaker_min_samples)),
                         batch=cfg.batch, environment_errors=ENVIRONMENT_ERRORS)
        verifier = Verifier(store, GatewayClient(http, DEFAULT_CODE_TABLE), concurrency=cfg.verify_concurrency,
                            timeout_s=cfg.verify_timeout_s)
        loop = asyncio.get_running_loop()
        last_tail = loop.time()
        Gauge("pacer_reconciler_leader", "1 while this process is the leader", registry=reg).set_function(
            lambda: float(leader.is_leader))
        Gauge("pacer_reconciler_leader_epoch", "Fencing epoch of this process's leader lease (0: standby)",
              registry=reg).set_function(lambda: float(leader.epoch or 0) if leader.is_leader else 0.0)
        Gauge("pacer_reconciler_tail_lag_seconds", "Seconds since the leader last finished a tail round (0 on a"
              " standby)", registry=reg).set_function(lambda: loop.time() - last_tail if leader.is_leader else 0.0)
        Gauge("pacer_reconciler_lookups_in_flight", "Gateway delivery lookups running now",
              registry=reg).set_function(lambda: float(verifier.in_flight))

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
            tailed.inc(n)
            nonlocal next_sweep
            if loop.time() >= next_sweep:
                report = await rec.sweep_once()
                for kind, k in report.moved.items():
                    moved.labels(kind).inc(k)
                for kind in report.failed:
                    sweep_errors.labels(kind).inc()
                stats = await store.lock_stats() | await store.governance_stats(timedelta(seconds=cfg.stall_after_s))
                for name, value in stats.items():
                    gauges[name].set(value)
                next_sweep = loop.time() + cfg.sweep_interval_s
            return n

        def drain() -> None:
            while rec.tripped:
                trips.labels(rec.tripped.pop().scope).inc()
            for src, counter in ((rec.bad, bad), (verifier.lookups, lookups), (verifier.resolved, verified),
                                 (guard.errors, round_errors)):
                for label, k in src.items():
                    counter.labels(label).inc(k)
                src.clear()

        ctx.health.set_ready(True, "standby")
        next_sweep = 0.0
        epoch: int | None = None
        guard = RoundGuard(max_s=cfg.error_backoff_max_s)
        tasks = [asyncio.create_task(leader.keep(ctx.stop), name="leader-lease"),
                 asyncio.create_task(verifier.run(ctx.stop, lambda: leader.is_leader, cfg.sweep_interval_s),
                                     name="verifier"),
                 asyncio.create_task(BacklogGauges(PostgresBacklogs(pool).top, reg, cfg.backlog_top_n).run(
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
            await http.aclose()
            await pool.close()

    await run_service("reconciler", cfg.ops_host, cfg.port, body)


def main() -> None:
    cfg = ReconcilerSettings()
    main_for("reconciler", cfg.log_level, run(PostgresSettings(), KafkaSettings(), cfg))  # type: ignore[call-arg]

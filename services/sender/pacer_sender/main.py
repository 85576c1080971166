"""Composition root of the sender: settings, pool, gateway, dispatcher, the Kafka loop."""

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

from confluent_kafka import KafkaException, TopicPartition
from prometheus_client import Counter, Gauge
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from pacer_common.db.pool import open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, RetryPolicy
from pacer_common.gateway import GatewayClient, make_client
from pacer_common.kafka import AsyncConsumer, make_consumer
from pacer_common.service import ServiceContext, main_for, run_service
from pacer_common.settings import KafkaSettings, OpsSettings, PostgresSettings
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository, PostgresLimitsSource
from pacer_sender.core import Executed, Executor
from pacer_sender.dispatcher import TP, Dispatcher, Envelope
from pacer_sender.domain.pacing import Limits
from pacer_sender.leases import GuidLeases
from pacer_sender.limits import LimitsBook

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
    max_parked: int = 500_000
    failure_codes: dict[int, FailureClass] = Field(default_factory=lambda: dict(DEFAULT_CODE_TABLE))
    db_pool_max: int = 20

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
                      self.per_minute, self.per_hour, self.per_day, quiet, self.timezone)

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


class ConsumerLoop:
    """Polls, hands over, pauses when full, commits what is done; handles rebalances."""

    def __init__(self, consumer: AsyncConsumer, dispatcher: Dispatcher, cfg: SenderSettings,
                 bad_commands: Counter, online_topic: str, batch_topic: str) -> None:
        self.consumer = consumer
        self.dispatcher = dispatcher
        self.cfg = cfg
        self.bad_commands = bad_commands
        self.assigned: set[TP] = set()
        self.paused: set[TP] = set()  # partitions paused for holding their share
        self.topic = {"online": online_topic, "batch": batch_topic}
        self.online_topic, self.batch_topic = online_topic, batch_topic
        self.loop = asyncio.get_running_loop()

    # Rebalance callbacks run on the consumer thread, inside poll.
    def on_assign(self, consumer: object, partitions: list[TopicPartition]) -> None:
        self.assigned |= {(p.topic, p.partition) for p in partitions}
        log.info("partitions assigned: %s", sorted(p.partition for p in partitions))

    def on_revoke(self, consumer: object, partitions: list[TopicPartition]) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        self.assigned -= tps
        self.paused -= tps
        fut = asyncio.run_coroutine_threadsafe(self.dispatcher.release(tps), self.loop)
        points = fut.result(timeout=60)
        if points:
            try:
                self.consumer.consumer.commit(offsets=_offsets(points), asynchronous=False)
            except KafkaException as exc:
                log.warning("offset commit on revoke refused: %s", exc)
        log.info("partitions revoked: %s", sorted(p.partition for p in partitions))

    def on_lost(self, consumer: object, partitions: list[TopicPartition]) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        self.assigned -= tps
        self.paused -= tps
        asyncio.run_coroutine_threadsafe(self.dispatcher.release(tps), self.loop).result(timeout=60)
        log.warning("partitions lost: %s", sorted(p.partition for p in partitions))

    async def run(self, stop: asyncio.Event) -> None:
        topics = [self.online_topic, self.batch_topic]
        await self.consumer.call(self.consumer.consumer.subscribe, topics, on_assign=self.on_assign,
                                 on_revoke=self.on_revoke, on_lost=self.on_lost)
        last_commit = self.loop.time()
        while not stop.is_set():
            if self.dispatcher.fatal is not None:
                raise RuntimeError("a guid worker failed") from self.dispatcher.fatal
            for msg in await self.consumer.consume(500, 0.05):
                tp = (msg.topic(), msg.partition())
                if tp not in self.assigned:
                    continue
                try:
                    cmd = ItemCommand.model_validate_json(msg.value() or b"")
                except ValidationError as exc:
                    self.bad_commands.inc()
                    log.error("unreadable item command at %s[%d]@%d: %s", *tp, msg.offset(), exc)
                    self.dispatcher.skip(tp, msg.offset())
                    continue
                self.dispatcher.submit(Envelope(tp, msg.offset(), cmd))
            await self._flow_control()
            if self.loop.time() - last_commit >= 0.5:
                await self._commit()
                last_commit = self.loop.time()
        # Graceful stop: finish the items in hand, commit, leave the group.
        points = await self.dispatcher.release(set(self.assigned))
        try:
            await self.consumer.commit(_offsets(points))
        except KafkaException as exc:
            log.warning("final offset commit refused: %s", exc)

    async def _flow_control(self) -> None:
        """Bounded memory without head-of-line blocking between partitions: each partition
        has its own share of ``max_buffered`` and is paused alone when it holds that much, so
        a backlog in one partition (or lane) never stops another from being read — a reply
        in the online lane, or a partition just taken over from a dead sender. Within a
        partition, one guid's backlog is parked past ``guid_buffer`` commands (see the
        dispatcher), so it does not fill the share; parked entries have their own, larger
        share of ``max_parked``."""
        if not self.assigned:
            return
        share = max(100, self.cfg.max_buffered // len(self.assigned))
        park_share = max(1000, self.cfg.max_parked // len(self.assigned))
        pause, resume = [], []
        for tp in self.assigned:
            held, parked = self.dispatcher.by_tp.get(tp, 0), self.dispatcher.parked_by_tp.get(tp, 0)
            if tp not in self.paused and (held >= share or parked >= park_share):
                pause.append(tp)
            elif tp in self.paused and held <= share // 2 and parked <= park_share // 2:
                resume.append(tp)
        if pause:
            await self.consumer.call(self.consumer.consumer.pause, [TopicPartition(t, p) for t, p in pause])
            self.paused.update(pause)
        if resume:
            await self.consumer.call(self.consumer.consumer.resume, [TopicPartition(t, p) for t, p in resume])
            self.paused.difference_update(resume)

    async def _commit(self) -> None:
        points = self.dispatcher.commit_points()
        if not points:
            return
        try:
            await self.consumer.commit(_offsets(points))
        except KafkaException as exc:
            # A rebalance in progress: the offsets stay uncommitted, and what they cover is
            # redelivered to the next owner, whose claims find those items no longer pending.
            log.warning("offset commit refused, will retry: %s", exc)
            return
        self.dispatcher.mark_committed(points)


def _offsets(points: dict[TP, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p, off) for (t, p), off in points.items()]


async def run(pg: PostgresSettings, kafka: KafkaSettings, cfg: SenderSettings) -> None:
    async def body(ctx: ServiceContext) -> None:
        executed = Counter("pacer_sender_items_total", "Items executed, by outcome", ["outcome"], registry=ctx.registry)
        bad = Counter("pacer_sender_bad_commands_total", "Unreadable item commands", registry=ctx.registry)
        Gauge("pacer_sender_buffered_items", "Commands held in memory", registry=ctx.registry).set_function(
            lambda: dispatcher.buffered)
        Gauge("pacer_sender_active_guids", "Guids with work in hand", registry=ctx.registry).set_function(
            lambda: dispatcher.active_guids)

        rate_limited = Counter("pacer_sender_rate_limited_total", "Rate-limited gateway answers: the guid slowed, "
                               "the item deferred (no attempt, no budget used)", registry=ctx.registry)

        def on_executed(env: Envelope, res: Executed) -> None:
            executed.labels(res.outcome).inc()
            if res.outcome == "rate_limited":
                rate_limited.inc()

        pool = await open_pool(pg.database_url.get_secret_value(), min_size=2, max_size=cfg.db_pool_max,
                               name="pacer-sender")
        http = make_client(cfg.gateway_url, cfg.gateway_timeout_s)
        gateway = GatewayClient(http, cfg.failure_codes)
        repo = PostgresItemRepository(pool, timedelta(seconds=cfg.lease_ttl_s))
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
        dispatcher = Dispatcher(executor, limits, leases, on_executed=on_executed, job_interval=limits.job_interval,
                                read_back=repo.pending_commands, guid_cap=cfg.guid_buffer)
        Gauge("pacer_sender_parked_items", "Commands parked (offset kept, command read back from Postgres)",
              registry=ctx.registry).set_function(lambda: dispatcher.parked_count)
        limits.on_change = dispatcher.wake
        refresher = asyncio.create_task(limits.keep_fresh(ctx.stop, cfg.limits_refresh_s))
        renewals = asyncio.create_task(leases.keep_renewed(ctx.stop))
        # Kafka 4's consumer group protocol (KIP-848) rebalances incrementally, and its range
        # assignor gives partition N of both lane topics to the same sender: a guid's online
        # and batch commands meet in one process.
        consumer = AsyncConsumer(make_consumer(kafka.client_config(), cfg.group_id or f"{kafka.topic_prefix}.sender",
                                               protocol="consumer", remote_assignor="range"))
        loop = ConsumerLoop(consumer, dispatcher, cfg, bad, kafka.item_commands("online"), kafka.item_commands("batch"))
        ctx.health.set_ready(True, "consuming")
        try:
            await loop.run(ctx.stop)
        finally:
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

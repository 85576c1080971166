"""Thin confluent-kafka wrappers: an idempotent producer and a manual-commit consumer.

Commit order everywhere: Postgres commit → producer flush → offset commit. The consumer
never auto-commits; callers commit offsets only after their work is durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential_jitter

from pacer_common.domain.dead_letters import AT_HEADER, REASON_HEADER, SOURCE_HEADER, TENANT_HEADER
from pacer_common.domain.requests import MAX_REQUEST_BYTES
from pacer_common.lifecycle import FATAL, Fatal
from pacer_common.logs import RepeatsHeldBack

T = TypeVar("T")
log = logging.getLogger(__name__)
# librdkafka's own log, from every client Pacer makes: records (facility, client name,
# message) served on the thread that polls the client, so they come out as the service's JSON
# log lines instead of raw ``%4|…`` lines on stderr.
CLIENT_LOG = logging.getLogger("pacer.kafka.client")
# What librdkafka logs as a warning while a broker is still starting up, and retries by
# itself until it is done: logged at INFO, so a fresh broker leaves no warning behind.
TRANSIENT_CLIENT_NOTICES = ("Coordinator load in progress",)


def _relevel_transient(record: logging.LogRecord) -> bool:
    args = record.args if isinstance(record.args, tuple) else ()
    text = str(args[-1]) if args else record.getMessage()
    if record.levelno == logging.WARNING and any(n in text for n in TRANSIENT_CLIENT_NOTICES):
        record.levelno, record.levelname = logging.INFO, "INFO"
        return CLIENT_LOG.isEnabledFor(logging.INFO)
    return True


CLIENT_LOG.addFilter(_relevel_transient)
# The clients' errors reported through their error callbacks (and errors a consume returns).
CLIENT_ERRORS = logging.getLogger(f"{__name__}.errors")


def _connection_line(record: logging.LogRecord) -> bool:
    """librdkafka's lines about a broker connection failing or closing (facility ``FAIL``)."""
    args = record.args if isinstance(record.args, tuple) else ()
    return bool(args) and args[0] == "FAIL"


# While a broker is away, librdkafka logs every failed connection attempt (several a second
# per client) and reports most of them again through the error callbacks. Only those are held
# back: every other client line (offset resets, counted from this log, above all) is shown.
CLIENT_LOG.addFilter(RepeatsHeldBack(applies=_connection_line))
CLIENT_ERRORS.addFilter(RepeatsHeldBack())




def dead_letter_headers(reason: str, source: str, max_chars: int,
                        tenant: str | None = None) -> list[tuple[str, bytes]]:
    """A refused record's headers (:mod:`pacer_common.domain.dead_letters`): why (cut to
    ``max_chars``: a header, not a document; its first part says what is wrong), when, which
    service refused it and, if known, whose it is."""
    if len(reason) > max_chars:
        reason = reason[: max_chars - 1] + "…"
    headers = [
        # backslashreplace: whatever a reason quotes of the record, the header is UTF-8.
        (REASON_HEADER, reason.encode(errors="backslashreplace")),
        (AT_HEADER, datetime.now(UTC).isoformat().encode()),
        (SOURCE_HEADER, source.encode()),
    ]
    if tenant:
        headers.append((TENANT_HEADER, tenant.encode(errors="backslashreplace")))
    return headers


class ProduceError(Exception):
    """A message could not be delivered; the caller must not commit what depends on it."""


class ProduceStalled(ProduceError):
    """The producer served no delivery report at all for a while, to any caller: Kafka is
    away, or the client no longer tries to reach it. The caller may replace the producer."""


def producer_error(err: KafkaError, fatal: Fatal = FATAL) -> None:
    """Every producer's ``error_cb``. A fatal error (an idempotent producer whose sequence
    broke beyond repair) leaves the producer refusing every later message with ``_FATAL``: the
    intake would answer 503 and the planner and sender retry for ever while looking healthy.
    It is declared fatal for the process instead (:class:`~pacer_common.lifecycle.Fatal`), so
    that the service stops and a fresh process with a fresh producer takes over. Any other
    error librdkafka retries by itself: logged."""
    if err.fatal():
        fatal.declare(f"kafka producer: {err}")
    else:
        CLIENT_ERRORS.warning("kafka producer error: %s", err)


def make_producer(config: dict[str, str], **extra: Any) -> Producer:
    conf: dict[str, Any] = {
        **config,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "compression.type": "lz4",
        "logger": CLIENT_LOG,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        # Snapshot job requests carry their targets; the topic allows large messages.
        "message.max.bytes": MAX_REQUEST_BYTES,
        # CRC32 of the key (librdkafka's default, stated): senders map a guid to its
        # partition with the same function to find the guids they own in Postgres.
        "partitioner": "consistent_random",
        # Partitions added to a topic are hashed to within a minute, not librdkafka's five:
        # until then a guid's commands reach the partition it hashed to before.
        "topic.metadata.refresh.interval.ms": 60_000,
        "error_cb": producer_error,
        **extra,
    }
    return Producer(conf)


@dataclass
class ProducerLiveness:
    """When one producer last served a delivery report, to whichever caller (monotonic
    seconds): shared by the calls on it, so that one call's wait is a stall only when no call
    on the producer got a report meanwhile (a partition without a leader delays its own
    messages only)."""

    reported_at: float = -math.inf


def stalled(began: float, liveness: ProducerLiveness, stall_s: float | None, what: str) -> ProduceStalled | None:
    """The stall of a call that began at ``began`` (monotonic), if ``stall_s`` have passed
    since then without a delivery report from its producer to any caller; ``what`` says what
    waits."""
    if stall_s is None:
        return None
    silent = time.monotonic() - max(began, liveness.reported_at)
    if silent <= stall_s:
        return None
    return ProduceStalled(f"no delivery report from the producer for {silent:.1f}s; {what}")


class DeliveryTracker:
    """Counts delivery failures between flushes, so a flush can be trusted or refused."""

    def __init__(self, liveness: ProducerLiveness | None = None) -> None:
        self.failed: list[str] = []
        self.reported = 0  # delivery reports received, failed or not
        self.liveness = liveness

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        self.reported += 1
        if self.liveness is not None:
            self.liveness.reported_at = time.monotonic()
        if err is not None:
            self.failed.append(f"{msg.topic()}: {err}")

    def check(self) -> None:
        if self.failed:
            first, n = self.failed[0], len(self.failed)
            self.failed.clear()
            raise ProduceError(f"{n} message(s) not delivered, first: {first}")


def _queue(producer: Producer, msg: tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None],
           tracker: DeliveryTracker) -> bool:
    """Hand one (topic, key, value, headers) to the producer; False while its queue is full."""
    topic, key, value, headers = msg
    try:
        producer.produce(topic, value=value, key=key, headers=None if headers is None else list(headers),
                         on_delivery=tracker)
    except BufferError:
        return False
    return True


def produce_all(producer: Producer, messages: Iterable[tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]],
                *, timeout_s: float = 60.0, stall_s: float | None = None,
                liveness: ProducerLiveness | None = None) -> int:
    """Produce every (topic, key, value, headers) and flush; raise :class:`ProduceError` unless
    all were acknowledged within ``timeout_s`` of the last one queued, and
    :class:`ProduceStalled` (as :func:`produce_all_async`) once ``stall_s`` have passed, since
    the call began, without a delivery report from the producer to any caller."""
    began = time.monotonic()
    live = liveness if liveness is not None else ProducerLiveness()
    tracker = DeliveryTracker(live)
    n = 0
    for msg in messages:
        while not _queue(producer, msg, tracker):
            producer.poll(0.05)  # local queue full: serve delivery reports, then retry
            if err := stalled(began, live, stall_s, "its local queue is full"):
                raise err
        n += 1
        if n % 10_000 == 0:
            producer.poll(0)
    deadline = time.monotonic() + timeout_s
    while remaining := producer.flush(min(0.5, max(0.0, deadline - time.monotonic()))):
        if err := stalled(began, live, stall_s, f"{remaining} message(s) queued"):
            raise err
        if time.monotonic() >= deadline:
            raise ProduceError(f"{remaining} message(s) still queued after {timeout_s}s")
    tracker.check()
    return n


async def produce_all_async(producer: Producer,
                            messages: Iterable[tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]],
                            *, timeout_s: float = 60.0, stall_s: float | None = None,
                            liveness: ProducerLiveness | None = None, poll_s: float = 0.002) -> int:
    """:func:`produce_all` for a coroutine: waits for this call's own messages only, serving
    the producer's delivery reports on the event loop between short sleeps, so the loop goes
    on (leases renewed, /healthz answered) while Kafka is slow or away, and no second thread
    contends with it for the interpreter lock. Raises :class:`ProduceError` unless every
    message was acknowledged within ``timeout_s``; :class:`ProduceStalled` once ``stall_s``
    have passed, since the call began, without a delivery report from the producer to this
    call or to any other sharing ``liveness``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    began = time.monotonic()
    live = liveness if liveness is not None else ProducerLiveness()
    tracker = DeliveryTracker(live)
    n = 0
    for msg in messages:
        while not _queue(producer, msg, tracker):  # local queue full: serve delivery reports, wait, retry
            producer.poll(0)
            if err := stalled(began, live, stall_s, "its local queue is full"):
                raise err
            if loop.time() > deadline:
                raise ProduceError(f"the producer's queue stayed full for {timeout_s}s")
            await asyncio.sleep(0.05)
        n += 1
    while True:
        producer.poll(0)
        if tracker.reported >= n:
            break
        if err := stalled(began, live, stall_s, f"{n - tracker.reported} of this batch's {n} message(s) outstanding"):
            raise err
        if loop.time() > deadline:
            raise ProduceError(f"{n - tracker.reported} message(s) not acknowledged after {timeout_s}s")
        await asyncio.sleep(poll_s)
    tracker.check()
    return n


class Renewing:
    """A service's producer, replaced by a new one from ``renew`` when a call on it stalls
    (:class:`ProduceStalled`: no delivery report to anyone for a while).

    A client can stop trying to reach a broker that came back (seen once after a Kafka
    restart: no connection attempt for a minute while the broker answered everyone else); a
    new one starts from the bootstrap servers. Each call takes :attr:`current` once (the
    producer and the record of its reports, read together) and hands a stall to
    :meth:`replace`."""

    def __init__(self, producer: Producer, renew: Callable[[], Producer] | None = None, *,
                 retire_after_s: float = 120.0) -> None:
        self.current = (producer, ProducerLiveness())  # one attribute: read whole from any thread
        self.renew = renew
        self.renewals = 0
        self.retire_after_s = retire_after_s
        self._lock = threading.Lock()  # the planner calls from worker threads

    @property
    def producer(self) -> Producer:
        return self.current[0]

    @contextlib.contextmanager
    def using(self) -> Iterator[tuple[Producer, ProducerLiveness]]:
        """The producer and the record of its reports, for one call; a :class:`ProduceStalled`
        raised inside replaces the producer on its way up."""
        producer, liveness = self.current
        try:
            yield producer, liveness
        except ProduceStalled as exc:
            self.replace(producer, exc)
            raise

    def replace(self, stalled: Producer, why: ProduceStalled) -> None:
        """Put a new producer in place of ``stalled`` (once, whichever caller saw it first).
        What the old one still holds is purged, so that the calls waiting on it fail now and
        their callers send again through the new one (a message purged in flight may have
        been written: Pacer's messages are at-least-once). It is destroyed off the caller's
        thread (:func:`retire`). If no new producer can be made, the old one stays and the
        caller's stall goes on up."""
        with self._lock:
            if self.renew is None or self.current[0] is not stalled:
                return
            try:
                fresh = self.renew()
            except Exception:
                log.exception("Kafka producer stalled (%s) and no new one could be made; keeping it", why)
                return
            self.current = (fresh, ProducerLiveness())
            self.renewals += 1
        # The binding's blocking=True (its default) is librdkafka's non-blocking purge: the
        # call does not wait on the stalled client's threads.
        stalled.purge(in_queue=True, in_flight=True)
        retire(stalled, within_s=self.retire_after_s)
        log.warning("Kafka producer replaced: %s; what waited on it goes out again through a new one", why)


_retired: queue.SimpleQueue[tuple[Producer, float]] = queue.SimpleQueue()
_reaper_lock = threading.Lock()
_reaper: list[threading.Thread] = []


def retire(producer: Producer, within_s: float) -> None:
    """Let go of a producer that is being replaced: it is destroyed on a thread of its own once
    nothing else holds it (calls still waiting on it end within their timeouts), or after
    ``within_s`` whatever holds it. Destroying a client joins its threads: on the caller's
    thread, an event loop, that could wait as long as a thread of a stalled client does."""
    with _reaper_lock:
        if not _reaper:
            _reaper.append(threading.Thread(target=_reap, name="pacer-producer-reaper", daemon=True))
            _reaper[0].start()
    _retired.put((producer, time.monotonic() + within_s))


def _reap() -> None:
    pending: list[list[Any]] = []  # [producer, until]: each entry the reaper's own reference
    while True:
        try:  # the wait between looks at the reference counts, while any is pending
            producer, until = _retired.get(timeout=0.5) if pending else _retired.get()
            pending.append([producer, until])
            del producer
        except queue.Empty:
            pass
        now = time.monotonic()
        kept: list[list[Any]] = []
        while pending:
            entry = pending.pop()
            # two references when nothing else holds it: ``entry``'s and getrefcount's argument
            if sys.getrefcount(entry[0]) > 2 and now < entry[1]:
                kept.append(entry)
            else:
                entry.clear()  # the last reference, as a rule: the client is destroyed here
        pending = kept


def make_consumer(config: dict[str, str], group_id: str, *, protocol: str = "classic",
                  remote_assignor: str | None = None, **extra: Any) -> Consumer:
    """A manual-commit consumer. ``protocol="consumer"`` uses Kafka 4's group protocol
    (KIP-848): incremental rebalances driven by the broker, with ``remote_assignor``."""
    conf: dict[str, Any] = {
        **config,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "logger": CLIENT_LOG,
        "max.poll.interval.ms": 300_000,
        "error_cb": lambda err: CLIENT_ERRORS.warning("kafka consumer error: %s", err),
    }
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
        if remote_assignor:
            conf["group.remote.assignor"] = remote_assignor
    else:
        conf |= {"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10_000,
                 "heartbeat.interval.ms": 1_000}
    return Consumer(conf | extra)


class AsyncConsumer:
    """Runs every call on one consumer from one dedicated thread, awaitable from asyncio.

    librdkafka consumers are not meant to be driven from several threads at once; one
    thread keeps poll, commit, pause and resume ordered while the event loop stays free.
    """

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-consumer")

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, lambda: fn(*args, **kwargs))

    async def consume(self, n: int, timeout_s: float) -> list[Message]:
        """Up to ``n`` messages: what is buffered now, or else the first to arrive within
        ``timeout_s`` and whatever came with it. Never waits for a batch to fill (a batch
        ``consume`` blocks until it has ``n`` or the timeout passes), so a lone message —
        an auto-reply among quiet traffic — is handed over as soon as it is fetched."""
        msgs: list[Message] = await self.call(self._consume, n, timeout_s)
        out = []
        for m in msgs:
            err = m.error()
            if err is None:
                out.append(m)
            elif err.code() == KafkaError._PARTITION_EOF:
                continue
            elif err.fatal():
                raise KafkaException(err)
            else:
                CLIENT_ERRORS.warning("kafka consume error: %s", err)
        return out

    def _consume(self, n: int, timeout_s: float) -> list[Message]:
        msgs: list[Message] = self.consumer.consume(n, 0)
        if msgs:
            return msgs
        msgs = self.consumer.consume(1, timeout_s)
        if msgs and n > 1:
            msgs += self.consumer.consume(n - 1, 0)
        return msgs

    async def commit(self, offsets: list[TopicPartition]) -> None:
        if offsets:
            await self.call(self.consumer.commit, offsets=offsets, asynchronous=False)

    async def close(self) -> None:
        await self.call(self.consumer.close)
        self._thread.shutdown(wait=True)


def _admin(config: dict[str, str]) -> AdminClient:
    return AdminClient({**config, "logger": CLIENT_LOG})  # type: ignore[dict-item]  # librdkafka takes a Logger here


def durable(config: dict[str, str], replication_factor: int) -> dict[str, str]:
    """``config`` with ``min.insync.replicas`` one below the replication factor (2 of 3) unless
    it sets one: a write acknowledged with acks=all is then on two brokers at least, where the
    broker's default (1) would let the leader alone acknowledge it."""
    return {"min.insync.replicas": str(max(1, replication_factor - 1)), **config}


def ensure_topics(config: dict[str, str], topics: dict[str, tuple[int, dict[str, str]]], *,
                  timeout_s: float = 30.0) -> None:
    """Create missing topics: name → (partitions, topic configs)."""
    admin = _admin(config)
    meta = admin.list_topics(timeout=timeout_s)
    rf = min(3, len(meta.brokers))
    new = [NewTopic(t, num_partitions=p, replication_factor=rf, config=durable(c, rf))
           for t, (p, c) in topics.items() if t not in meta.topics]
    if not new:
        return
    for topic, fut in admin.create_topics(new, operation_timeout=timeout_s).items():
        try:
            fut.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        log.info("created topic %s", topic)


def align_topic_configs(config: dict[str, str], topics: dict[str, tuple[int, dict[str, str]]], *,
                        timeout_s: float = 30.0) -> dict[str, dict[str, str]]:
    """Set on existing topics every config ``topics`` names that differs; returns, by topic, each
    changed config's value before. Other configs are left as the topic has them, and so are
    partition counts."""
    admin = _admin(config)
    changes: dict[str, dict[str, str]] = {}
    for name, current in _topic_configs(admin, list(topics), timeout_s).items():
        wanted = topics[name][1]
        before = {key: str(current[key].value) if key in current else "unset" for key, value in wanted.items()
                  if key not in current or str(current[key].value) != value}
        if before:
            changes[name] = before
    if not changes:
        return {}
    alter = [ConfigResource(ResourceType.TOPIC, t, incremental_configs=[
        ConfigEntry(key, topics[t][1][key], incremental_operation=AlterConfigOpType.SET) for key in keys])
        for t, keys in changes.items()]
    for res, fut in admin.incremental_alter_configs(alter, request_timeout=timeout_s).items():
        fut.result(timeout_s)
        log.info("topic %s: set %s", res.name, ", ".join(f"{k}={topics[res.name][1][k]}" for k in changes[res.name]))
    return changes


def _topic_configs(admin: AdminClient, names: list[str], timeout_s: float) -> dict[str, Any]:
    """Each topic's configs as the broker has them. Asks again, for up to ``timeout_s``, while
    the broker does not know a topic yet: one just created by :func:`ensure_topics` reaches
    every broker's metadata a moment after the creation is acknowledged."""
    def ask() -> dict[str, Any]:
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in names]
        return {res.name: fut.result(timeout_s)
                for res, fut in admin.describe_configs(resources, request_timeout=timeout_s).items()}

    return _asked_again(ask, _unknown_topic, timeout_s)


def _asked_again(ask: Callable[[], T], transient: Callable[[BaseException], bool], timeout_s: float) -> T:
    """``ask()``, asked again for up to ``timeout_s`` (backing off) while it fails in a way
    ``transient`` says the broker will get over; any other failure is raised at once."""
    for attempt in Retrying(stop=stop_after_delay(timeout_s), wait=wait_exponential_jitter(multiplier=0.1, max=2.0),
                            retry=retry_if_exception(transient), reraise=True):
        with attempt:
            return ask()
    raise AssertionError("unreachable: Retrying re-raises the last error")


def _unknown_topic(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and bool(exc.args) and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


class GroupHasMembers(RuntimeError):
    """A consumer group that is to be moved still has members."""


@dataclass(frozen=True)
class GroupOnTopic:
    """A consumer group on one topic, as the broker has it now."""

    members: list[str]  # client ids
    partitions: list[int]
    committed: dict[int, int]  # -1 where the group has no offset
    offsets: dict[str, dict[int, int]]  # the topic's offsets asked for, by name

    def refuse_members(self, group: str) -> None:
        if self.members:
            raise GroupHasMembers(f"group {group} has {len(self.members)} member(s): {', '.join(self.members)}")


# A group's coordinator moving or still loading (on a new broker, until __consumer_offsets
# is ready): asked again until it answers.
_COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                 KafkaError.COORDINATOR_NOT_AVAILABLE})


def _coordinator_moving(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and bool(exc.args) and exc.args[0].code() in _COORDINATOR_MOVING


def group_on_topic(config: dict[str, str], group: str, topic: str, specs: dict[str, OffsetSpec], *,
                   timeout_s: float = 30.0) -> GroupOnTopic:
    """Consumer group ``group`` on ``topic``: its members, the topic's partitions, the group's
    committed offset on each and the topic's offsets asked for in ``specs``. Asks again, for
    up to ``timeout_s``, while the group's coordinator moves or loads. Raises
    :class:`KafkaException` when the topic does not exist."""
    return _asked_again(lambda: _group_on_topic(config, group, topic, specs, timeout_s), _coordinator_moving,
                        timeout_s)


def _group_on_topic(config: dict[str, str], group: str, topic: str, specs: dict[str, OffsetSpec],
                    timeout_s: float) -> GroupOnTopic:
    admin = _admin(config)  # held until every answer: a client dropped cancels its requests
    (described,) = (fut.result(timeout_s) for fut in admin.describe_consumer_groups(
        [group], request_timeout=timeout_s).values())
    meta = admin.list_topics(topic, timeout=timeout_s).topics[topic]
    if meta.error is not None:
        raise KafkaException(meta.error)
    parts = sorted(meta.partitions)

    def offsets(spec: OffsetSpec) -> dict[int, int]:
        asked = {TopicPartition(topic, p): spec for p in parts}
        return {tp.partition: fut.result(timeout_s).offset
                for tp, fut in admin.list_offsets(asked, request_timeout=timeout_s).items()}

    asked = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in parts])]
    (committed,) = (fut.result(timeout_s) for fut in admin.list_consumer_group_offsets(
        asked, request_timeout=timeout_s).values())
    before = {tp.partition: tp.offset if tp.offset >= 0 else -1 for tp in committed.topic_partitions}
    return GroupOnTopic(sorted(m.client_id for m in described.members), parts, {p: before.get(p, -1) for p in parts},
                        {name: offsets(spec) for name, spec in specs.items()})


def rewind_group(config: dict[str, str], group: str, topic: str, at_ms: int, *,
                 recorded: Mapping[int, int] | None = None, timeout_s: float = 30.0) -> list[tuple[int, int, int]]:
    """Move consumer group ``group`` back on every partition of ``topic`` to the first record
    stamped at or after ``at_ms`` (epoch ms; the partition's end where none is), or to the
    partition's offset in ``recorded`` where that is lower (where the group had handled its
    records to, as a restored database recorded it: a record stamped before ``at_ms`` may have
    been handled after it), so that what it read since is read again. A partition the group
    had not got that far on, or has no offset for, is left where it is: rewinding never skips
    a record. A group with members is refused (:class:`GroupHasMembers`): they would go on
    from where they are and commit over it. Returns ``(partition, before, after)`` for each
    partition, ``before`` -1 where the group had no offset."""
    specs = {"at": OffsetSpec.for_timestamp(at_ms), "end": OffsetSpec.latest()}  # type: ignore[no-untyped-call]
    g = group_on_topic(config, group, topic, specs, timeout_s=timeout_s)
    g.refuse_members(group)
    at, end, before = g.offsets["at"], g.offsets["end"], g.committed
    target = {p: min(at[p] if at[p] >= 0 else end[p], (recorded or {}).get(p, end[p])) for p in g.partitions}
    moves = [TopicPartition(topic, p, target[p]) for p in g.partitions if target[p] < before[p]]
    if moves:
        admin = _admin(config)
        for fut in admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, moves)],
                                                      request_timeout=timeout_s).values():
            fut.result(timeout_s)
    moved = {tp.partition: tp.offset for tp in moves}
    return [(p, before[p], moved.get(p, before[p])) for p in g.partitions]


def unread(g: GroupOnTopic) -> dict[int, tuple[int, int]]:
    """What the group has still to read: ``{partition: (from, end)}`` for each partition with
    records past its committed offset (from the earliest record where it has none, as
    ``auto.offset.reset = earliest`` reads). ``g`` asked for ``start`` and ``end``
    (:data:`UNREAD_SPECS`)."""
    start, end = g.offsets["start"], g.offsets["end"]
    at = {p: max(g.committed[p], start[p]) for p in g.partitions}
    return {p: (at[p], end[p]) for p in g.partitions if at[p] < end[p]}


UNREAD_SPECS: dict[str, OffsetSpec] = {"start": OffsetSpec.earliest(), "end": OffsetSpec.latest()}  # type: ignore[no-untyped-call]


def next_offset(msg: Message) -> TopicPartition:
    """The position to commit once ``msg``'s effects are durable."""
    topic, partition, offset = position(msg)
    return TopicPartition(topic, partition, offset + 1)


def position(msg: Message) -> tuple[str, int, int]:
    """``(topic, partition, offset)`` of a consumed message (an error event has none)."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    if topic is None or partition is None or offset is None:
        raise ValueError("not a consumed message: no topic, partition or offset")
    return topic, partition, offset


def describe_partitions(partitions: Iterable[TopicPartition]) -> str:
    """Partitions as an operator reads them in a log line: by topic, in runs,
    ``pacer.item-commands.batch 0-7, 12; pacer.item-commands.online 0-7, 12``."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return "; ".join(f"{topic} {_runs(sorted(set(numbers)))}" for topic, numbers in sorted(by_topic.items())) or "none"


def _runs(numbers: list[int]) -> str:
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def logged_rebalances(logger: logging.Logger) -> dict[str, Callable[[Any, list[TopicPartition]], None]]:
    """``subscribe()`` callbacks for a consumer with nothing to do on a rebalance but say what
    the group gave it and took away, so that an operator can tell which replica reads what."""
    def said(level: int, what: str) -> Callable[[Any, list[TopicPartition]], None]:
        def callback(_consumer: Any, partitions: list[TopicPartition]) -> None:
            if partitions:
                logger.log(level, "partitions %s: %s", what, describe_partitions(partitions))
        return callback

    return {"on_assign": said(logging.INFO, "assigned"), "on_revoke": said(logging.INFO, "revoked"),
            "on_lost": said(logging.WARNING, "lost")}

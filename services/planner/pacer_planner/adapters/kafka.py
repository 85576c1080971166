"""The command bus on Kafka: item commands keyed by guid, rejected requests to the DLQ; and
the job requests themselves, as the intake loop's source."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from prometheus_client import CollectorRegistry

from pacer_common import tracing
from pacer_common.domain.commands import ItemCommand, JobCommands
from pacer_common.domain.dead_letters import (
    TENANT_FROM_HEAD,
    TENANT_FROM_HEADER,
    TRUNCATED_HEADER,
    tenant_at_head,
    truncation,
)
from pacer_common.domain.requests import LANES, MAX_REQUEST_BYTES, lane_of
from pacer_common.kafka import (
    AsyncConsumer,
    ProduceError,
    Renewing,
    dead_letter_headers,
    logged_rebalances,
    make_consumer,
    make_producer,
    next_offset,
    produce_all,
    stalled,
)
from pacer_common.metrics import consumer_lag_config
from pacer_common.settings import KafkaSettings
from pacer_planner.adapters.faults import record_fault

log = logging.getLogger(__name__)
# (topic, partition, next offset): recorded before the offset is committed to Kafka
Record = Callable[[str, int, int], Awaitable[None]]

MAX_REASON_CHARS = 2000  # a header, not a document: the reason's first part says what is wrong
DLQ_TIMEOUT_S = 15.0  # a dead-letter record not acknowledged by then: retried, the offset stays
# Of bytes the dead letters cannot hold whole: what is kept, enough to tell what they were.
KEPT_BYTES = 65_536
KEPT_KEY_BYTES = 1_024


class KafkaCommandBus:
    def __init__(self, producer: Producer, commands_topic: Callable[[str], str], dlq_topic: str, *,
                 renew: Callable[[], Producer] | None = None, stall_s: float | None = None) -> None:
        self.client = Renewing(producer, renew)
        self.commands_topic = commands_topic  # lane → topic
        self.dlq_topic = dlq_topic
        self.stall_s = stall_s  # without any delivery report for this long, the producer stalled

    @property
    def producer(self) -> Producer:
        return self.client.producer

    @classmethod
    def create(cls, kafka: KafkaSettings, stall_s: float | None = None) -> KafkaCommandBus:
        """A bus with a producer of its own; a dead-letter record is a request (up to
        MAX_REQUEST_BYTES) plus its reason headers. A producer that stalls for ``stall_s`` is
        replaced by a new one."""
        config = kafka.client_config()

        def producer() -> Producer:
            return make_producer(config, **{"message.max.bytes": MAX_REQUEST_BYTES + 1_048_576})

        return cls(producer(), kafka.item_commands, kafka.job_requests_dlq, renew=producer, stall_s=stall_s)

    def dispatch(self, commands: Sequence[ItemCommand]) -> int:
        """Produce and flush every command; raises unless Kafka acknowledged all of them. A
        stalled producer is replaced before the error is raised: the request's next attempt
        dispatches through the new one."""
        topics = {lane: self.commands_topic(lane) for lane in LANES}
        if isinstance(commands, JobCommands):  # a job's: encoded in bulk, no model per item
            topic = topics[lane_of(commands.priority)]
            headers = tracing.kafka_headers(commands.traceparent) or None
            return self._produce((topic, guid.encode(), value, headers) for guid, value in commands.encoded())
        return self._produce(
            (topics[lane_of(c.priority)], c.guid.encode(), c.model_dump_json().encode(),
             tracing.kafka_headers(c.traceparent) or None) for c in commands)

    def _produce(self, messages: Iterable[tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]]) -> int:
        with self.client.using() as (producer, liveness):
            return produce_all(producer, messages, stall_s=self.stall_s, liveness=liveness)

    def dead_letter(self, key: bytes | None, value: bytes, reason: str, tenant: str | None = None) -> None:
        """The original bytes, untouched, with the reason and the tenant in headers: ``tenant``
        (the planner's, from the parsed request), else the one named at the head of the bytes,
        the first :data:`KEPT_BYTES` (:func:`tenant_at_head`, marked :data:`TENANT_FROM_HEADER`),
        else none.

        Bytes over :data:`MAX_REQUEST_BYTES`, or a record Kafka refuses for its size or shape
        (``RECORD_FAULTS``: refused again however long one waits), are kept as their first
        :data:`KEPT_BYTES` (the key its first :data:`KEPT_KEY_BYTES`), marked in
        :data:`TRUNCATED_HEADER` and in the reason: the refusal is on record and the partition
        goes on, and the record is never republished as if it were the request. Its tenant is
        the whole record's. Raises (for the intake loop to wait and try again) if Kafka does
        not take even that."""
        owner: list[tuple[str, bytes]] = []
        if not tenant and (tenant := tenant_at_head(value, KEPT_BYTES)):
            owner.append((TENANT_FROM_HEADER, TENANT_FROM_HEAD.encode()))
        refused: KafkaError | None = None
        if len(value) <= MAX_REQUEST_BYTES:
            refused = self._produce_dead_letter(key, value, [*dead_letter_headers(reason, "planner", MAX_REASON_CHARS,
                                                                                  tenant), *owner])
            if refused is None:
                return
            log.warning("dead-letter record refused whole (%s); keeping its first %d bytes", refused.str(), KEPT_BYTES)
        kept, held = value[:KEPT_BYTES], truncation(min(len(value), KEPT_BYTES), len(value))
        if key is not None and len(key) > KEPT_KEY_BYTES:
            key, held = key[:KEPT_KEY_BYTES], f"{held}; key: {truncation(KEPT_KEY_BYTES, len(key))}"
        note = f"; the record holds only its {held}" + ("" if refused is None else
                                                       f" (Kafka refused it whole: {refused.str()})")
        headers = [*dead_letter_headers(_ending_with(reason, note), "planner", MAX_REASON_CHARS, tenant), *owner,
                   (TRUNCATED_HEADER, held.encode())]
        again = self._produce_dead_letter(key, kept, headers)
        if again is not None:
            raise ProduceError(f"{self.dlq_topic} refused even a dead-letter record's first {len(kept)} bytes: "
                               f"{again.str()}; see its max.message.bytes")

    def _produce_dead_letter(self, key: bytes | None, value: bytes,
                             headers: list[tuple[str, bytes]]) -> KafkaError | None:
        """None once the record is acknowledged; Kafka's refusal if it refused the record
        itself, at once or in its delivery report; any other failure (the environment's) raised.
        Its own delivery report decides, not the queue: other callers' messages may be queued too."""
        reports: list[KafkaError | None] = []
        began = time.monotonic()
        deadline = began + DLQ_TIMEOUT_S
        with self.client.using() as (producer, liveness):

            def reported(err: KafkaError | None, _msg: Message) -> None:
                reports.append(err)
                liveness.reported_at = time.monotonic()

            def waited(what: str) -> None:
                """Raise if the producer stalled (it is replaced) or the record's time is up."""
                if err := stalled(began, liveness, self.stall_s, what):
                    raise err
                if time.monotonic() >= deadline:
                    raise ProduceError(f"a dead-letter record not acknowledged after {DLQ_TIMEOUT_S}s")

            try:
                while True:
                    try:
                        producer.produce(self.dlq_topic, value=value, key=key, headers=list(headers),
                                         on_delivery=reported)
                        break
                    except BufferError:  # the local queue is full: serve delivery reports, try again
                        producer.poll(0.05)
                        waited("a dead-letter record waits for room in the local queue")
            except KafkaException as exc:
                if (err := record_fault(exc)) is not None:
                    return err
                raise
            while not reports:
                producer.poll(min(0.5, max(0.0, deadline - time.monotonic())))
                if not reports:
                    waited("a dead-letter record waits")
        if reports[0] is None or record_fault(reports[0]) is not None:
            return reports[0]
        raise ProduceError(f"a dead-letter record not delivered: {self.dlq_topic}: {reports[0]}")

    def close(self) -> None:
        """Deliver what is still queued (each dispatch flushes already; this is for a stop mid-way)."""
        self.producer.flush(10)


def _ending_with(reason: str, note: str) -> str:
    """``reason`` and ``note`` within :data:`MAX_REASON_CHARS`: the reason is cut, not the note."""
    room = MAX_REASON_CHARS - len(note)
    return (reason if len(reason) <= room else reason[: room - 1] + "…") + note


class KafkaRequestSource:
    """Job requests from the planner's consumer; a commit names the offset after a message.
    With ``record``, each commit is first recorded where the jobs are (``PostgresPositions``):
    a request below a recorded position has its effects durable there."""

    def __init__(self, consumer: AsyncConsumer, record: Record | None = None) -> None:
        self.consumer = consumer
        self.record = record

    @classmethod
    async def create(cls, kafka: KafkaSettings, group_id: str, registry: CollectorRegistry,
                     record: Record | None = None) -> KafkaRequestSource:
        """Subscribed to ``<prefix>.job-requests`` in group ``group_id`` (default
        ``<prefix>.planner``), sized for the largest request."""
        large: dict[str, Any] = {"fetch.max.bytes": MAX_REQUEST_BYTES,
                                 "receive.message.max.bytes": MAX_REQUEST_BYTES + 1_048_576}
        consumer = AsyncConsumer(make_consumer(kafka.client_config(), group_id, **large, **consumer_lag_config(registry)))
        await consumer.call(consumer.consumer.subscribe, [kafka.job_requests], **logged_rebalances(log))
        return cls(consumer, record)

    async def consume(self, n: int, timeout_s: float) -> list[Message]:
        return await self.consumer.consume(n, timeout_s)

    async def commit(self, msg: Message) -> None:
        at = next_offset(msg)
        if self.record is not None:
            await self.record(at.topic, at.partition, at.offset)
        await self.consumer.commit([at])

    async def close(self) -> None:
        """Leave the consumer group."""
        await self.consumer.close()

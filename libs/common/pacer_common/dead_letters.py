"""The DLQ topics read back and a refused job request sent again: one reader for ``pacer
dead-letters``, ``pacer status`` and the Control API.

Reading joins no consumer group and commits nothing: each reader is a consumer of a group of
its own that only ``assign``s, so the broker keeps no trace of it. The calls block (librdkafka);
async callers run them in a thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

from confluent_kafka import Consumer, Message, TopicPartition

from pacer_common.domain.dead_letters import REPUBLISHED_HEADER, DeadLetter, Queue
from pacer_common.kafka import MAX_REQUEST_BYTES, make_consumer, make_producer, produce_all
from pacer_common.settings import KafkaSettings

READ_TIMEOUT_S = 10.0  # a broker that has not answered by then is reported, not waited on for ever


def topic_of(k: KafkaSettings, queue: Queue) -> str:
    return k.callbacks_dlq if queue == "callbacks" else k.job_requests_dlq


def reader(k: KafkaSettings) -> Consumer:
    # A group of its own that never commits: the reading leaves no trace on the broker.
    return make_consumer(k.client_config(), f"{k.topic_prefix}.dead-letters-reader-{uuid.uuid4().hex[:8]}")


def _letter(msg: Message) -> DeadLetter:
    _, ms = msg.timestamp()
    headers: dict[str, str] = {}
    for header in msg.headers() or []:
        name, value = header[0], header[1]
        headers[str(name)] = value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")
    return DeadLetter(msg.partition() or 0, msg.offset() or 0, datetime.fromtimestamp(ms / 1000, UTC), msg.key(),
                      msg.value() or b"", headers)


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    meta = consumer.list_topics(topic, timeout=READ_TIMEOUT_S).topics.get(topic)
    if meta is None or meta.error is not None:
        raise LookupError(f"topic {topic} not found ({meta.error if meta else 'no metadata'})")
    return sorted(meta.partitions)


def last(consumer: Consumer, topic: str, n: int) -> Iterator[DeadLetter]:
    """The last ``n`` records of each partition of ``topic``."""
    ends: dict[int, int] = {}
    starts: list[TopicPartition] = []
    for p in _partitions(consumer, topic):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=READ_TIMEOUT_S)
        if high > low:
            ends[p] = high
            starts.append(TopicPartition(topic, p, max(low, high - n)))
    if not starts:
        return
    consumer.assign(starts)
    while ends:
        msg = consumer.poll(READ_TIMEOUT_S)
        if msg is None:
            raise TimeoutError(f"{topic}: no record within {READ_TIMEOUT_S:.0f} s of what the broker said it holds")
        if msg.error():
            continue  # end of a partition, or a transient error librdkafka retries
        p, offset = msg.partition() or 0, msg.offset() or 0
        if p in ends:
            yield _letter(msg)
            if offset + 1 >= ends[p]:
                del ends[p]


def newest(k: KafkaSettings, topic: str, n: int) -> list[DeadLetter]:
    """The last ``n`` records of each partition of ``topic``, oldest first (by time, then
    place): the ``n`` newest of the topic are the last ``n`` of them."""
    consumer = reader(k)
    try:
        return sorted(last(consumer, topic, n), key=lambda d: (d.at, d.partition, d.offset))
    finally:
        consumer.close()


def one(k: KafkaSettings, topic: str, where: tuple[int, int]) -> DeadLetter | None:
    """The record at ``where`` (partition, offset) of ``topic``; None if there is none (never
    written, or gone with the topic's retention)."""
    consumer = reader(k)
    try:
        p, offset = where
        if p not in _partitions(consumer, topic):
            return None
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=READ_TIMEOUT_S)
        if not low <= offset < high:
            return None
        consumer.assign([TopicPartition(topic, p, offset)])
        while (msg := consumer.poll(READ_TIMEOUT_S)) is not None:
            if not msg.error() and msg.offset() == offset:
                return _letter(msg)
        raise TimeoutError(f"{topic} {p}:{offset}: not read within {READ_TIMEOUT_S:.0f} s")
    finally:
        consumer.close()


def republish(k: KafkaSettings, topic: str, letter: DeadLetter, timeout_s: float = READ_TIMEOUT_S) -> None:
    """``letter`` (a refused job request) to the job requests topic again, as it came, with
    where it was dead-lettered in :data:`REPUBLISHED_HEADER`; raises unless acknowledged
    within ``timeout_s``."""
    headers = [(REPUBLISHED_HEADER, f"{topic}:{letter.where}".encode())]
    producer = make_producer(k.client_config(), **{"message.max.bytes": MAX_REQUEST_BYTES + 1_048_576})
    produce_all(producer, [(k.job_requests, letter.key, letter.value, headers)], timeout_s=timeout_s)

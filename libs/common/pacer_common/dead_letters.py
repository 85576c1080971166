"""The DLQ topics read back and a refused job request sent again: one reader for ``pacer
dead-letters``, ``pacer status`` and the Control API.

Reading joins no consumer group and commits nothing: each reader is a consumer of a group of
its own that only ``assign``s, so the broker keeps no trace of it. The calls block (librdkafka);
async callers run them in a thread.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from pacer_common.domain.dead_letters import (
    MAX_TENANT_PARSE_BYTES,
    REPUBLISHED_HEADER,
    TENANT_HEADER,
    Cursor,
    DeadLetter,
    NotRepublishable,
    Queue,
    Window,
)
from pacer_common.domain.requests import MAX_REQUEST_BYTES
from pacer_common.kafka import make_consumer, make_producer, produce_all
from pacer_common.settings import KafkaSettings

READ_TIMEOUT_S = 10.0  # a broker that has not answered by then is reported, not waited on for ever
PREFETCH_KIB = 16_384  # what a reader fetches ahead, per partition


def topic_of(k: KafkaSettings, queue: Queue) -> str:
    return k.callbacks_dlq if queue == "callbacks" else k.job_requests_dlq


def reader(k: KafkaSettings) -> Consumer:
    # A group of its own that never commits: the reading leaves no trace on the broker. Its
    # prefetch is bounded (librdkafka's default queue holds up to 64 MiB per partition read).
    bounded: dict[str, Any] = {"queued.max.messages.kbytes": PREFETCH_KIB,
                               "receive.message.max.bytes": MAX_REQUEST_BYTES + 1_048_576}
    return make_consumer(k.client_config(), f"{k.topic_prefix}.dead-letters-reader-{uuid.uuid4().hex[:8]}", **bounded)


def _letter(msg: Message, keep_bytes: int | None = None) -> DeadLetter:
    """``msg`` as a DeadLetter; with ``keep_bytes``, its value is kept only if it is no larger
    and the record names no tenant in a header (the value is what tells the tenant then)."""
    _, ms = msg.timestamp()
    value = msg.value() or b""
    headers: dict[str, str] = {}
    for header in msg.headers() or []:
        name, text = header[0], header[1]
        headers[str(name)] = text.decode(errors="replace") if isinstance(text, bytes) else str(text or "")
    kept = value if keep_bytes is None or (len(value) <= keep_bytes and TENANT_HEADER not in headers) else b""
    return DeadLetter(msg.partition() or 0, msg.offset() or 0, datetime.fromtimestamp(ms / 1000, UTC), msg.key(),
                      kept, headers, len(value))


class TopicMissing(LookupError):
    """The DLQ topic does not exist (yet): nothing was ever dead-lettered there."""


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    meta = consumer.list_topics(topic, timeout=READ_TIMEOUT_S).topics.get(topic)
    if meta is None or meta.error is not None:
        raise TopicMissing(f"topic {topic} not found ({meta.error if meta else 'no metadata'})")
    return sorted(meta.partitions)


def _ends(consumer: Consumer, topic: str, marks: dict[int, tuple[int, int]], before: datetime | None,
          older: Cursor | None) -> dict[int, int]:
    """Where each partition's read ends (not included): at ``older``'s offsets (a partition it
    does not name: nothing), else at the first record written at or after ``before``, else at
    the partition's end."""
    if older is not None:
        return {p: min(max(older[p], low), high) for p, (low, high) in marks.items() if p in older}
    if before is None:
        return {p: high for p, (_, high) in marks.items()}
    ms = int(before.timestamp() * 1000)
    found = consumer.offsets_for_times([TopicPartition(topic, p, ms) for p in marks], timeout=READ_TIMEOUT_S)
    return {tp.partition: marks[tp.partition][1] if tp.offset < 0 else min(tp.offset, marks[tp.partition][1])
            for tp in found}


def window(consumer: Consumer, topic: str, depth: int, keep_bytes: int = MAX_TENANT_PARSE_BYTES, *,
           before: datetime | None = None, older: Cursor | None = None) -> Window:
    """Up to ``depth`` records of each partition of ``topic``: the last ones, or the last
    written before ``before``, or the last before a page's ``older`` cursor. A value is kept
    only where it tells the record's tenant (no header does, and it is at most
    ``keep_bytes``): a list of large refused requests holds none of them."""
    marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=READ_TIMEOUT_S)
             for p in _partitions(consumer, topic)}
    ends = _ends(consumer, topic, marks, before, older)
    starts = {p: max(marks[p][0], end - depth) for p, end in ends.items()}
    letters: list[DeadLetter] = []
    reading = {p: end for p, end in ends.items() if end > starts[p]}
    if reading:
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in reading])
    while reading:
        msg = consumer.poll(READ_TIMEOUT_S)
        if msg is None:
            raise TimeoutError(f"{topic}: no record within {READ_TIMEOUT_S:.0f} s of what the broker said it holds")
        if msg.error():
            continue  # end of a partition, or a transient error librdkafka retries
        p, offset = msg.partition() or 0, msg.offset() or 0
        if p not in reading:
            continue
        if offset < reading[p]:
            letters.append(_letter(msg, keep_bytes))
        if offset + 1 >= reading[p]:
            del reading[p]
    return Window(letters, starts, {p: low for p, (low, _) in marks.items()})


def newest(k: KafkaSettings, topic: str, n: int, keep_bytes: int = MAX_TENANT_PARSE_BYTES, *,
           before: datetime | None = None, older: Cursor | None = None) -> Window:
    """:func:`window` on a reader of its own, its records oldest first (by time, then place):
    the ``n`` newest of the topic are the last ``n`` of them."""
    consumer = reader(k)
    try:
        read = window(consumer, topic, n, keep_bytes, before=before, older=older)
    finally:
        consumer.close()
    return Window(sorted(read.letters, key=lambda d: (d.at, d.partition, d.offset)), read.starts, read.lows)


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
    within ``timeout_s``, and :class:`NotRepublishable` (sending nothing) for a record that
    holds only part of the request."""
    if (why := letter.not_republishable()) is not None:
        raise NotRepublishable(why)
    headers = [(REPUBLISHED_HEADER, f"{topic}:{letter.where}".encode())]
    producer = make_producer(k.client_config(), **{"message.max.bytes": MAX_REQUEST_BYTES + 1_048_576})
    produce_all(producer, [(k.job_requests, letter.key, letter.value, headers)], timeout_s=timeout_s)

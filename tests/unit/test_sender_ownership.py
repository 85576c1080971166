"""The sender's sweep asks which guids it owns, with partition counts read from Kafka. While
Kafka cannot answer (a broker restart), the last counts read stand: the sweep, which starts
the owned guids' queued work from Postgres, must not die with the metadata request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry, Counter

from pacer_common.kafka import AsyncConsumer
from pacer_sender.adapters.kafka import ConsumerLoop
from pacer_sender.domain.partitions import partition_of
from pacer_sender.sweeper import Sweeper
from tests.unit.dispatching import FAST, cmd, dispatcher, stop, until


class Metadata:
    def __init__(self, counts: dict[str, int]) -> None:
        self.topics = {t: type("T", (), {"partitions": dict.fromkeys(range(n))})() for t, n in counts.items()}


class Consumer:
    """Answers list_topics with ``counts``, or raises as librdkafka does with no broker."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.down = False

    def list_topics(self, topic: str, timeout: float) -> Metadata:
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "1/1 brokers are down"))
        return Metadata({topic: self.counts[topic]})


def test_the_last_partition_counts_stand_while_kafka_cannot_answer() -> None:
    async def scenario() -> tuple[bool, bool]:
        raw = Consumer({"online": 4, "batch": 4})
        d, _, _ = dispatcher(FAST)
        loop = ConsumerLoop(AsyncConsumer(raw), d, Counter("bad", "bad", registry=CollectorRegistry()),  # type: ignore[arg-type]  # a stand-in consumer
                            "online", "batch")
        owns = await loop.ownership()
        guid = "g-1"
        loop.assigned = {("batch", partition_of(guid, 4)), ("online", partition_of(guid, 4))}  # type: ignore[arg-type]
        before = owns(guid)
        raw.down = True
        after = (await loop.ownership())(guid)
        return before, after

    before, after = asyncio.run(scenario())
    assert before, "the guid's partition is assigned"
    assert after, "a metadata error must not end the sweep nor forget what this sender owns"




def test_a_sweep_that_fails_is_tried_again_and_then_starts_the_guids_work() -> None:
    """The assign sweep of a new owner failing (here: Kafka's metadata request, while the
    broker restarts) must not end the sweep loop: the work a previous owner dropped has no
    doorbell left, and only a later sweep starts it."""
    async def scenario() -> tuple[int, list[str]]:
        d, rec, _ = dispatcher(FAST)
        rec.store.add(cmd("dropped", 0))  # in Postgres, its doorbell consumed by the previous owner
        calls = 0

        async def ownership() -> Callable[[str], bool]:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, "1/1 brokers are down"))
            return lambda g: True

        stopping = asyncio.Event()
        sweeper = Sweeper(d, rec.store, ownership, interval_s=0.05)
        sweeper.request()
        task = asyncio.create_task(sweeper.run(stopping))
        await until(lambda: bool(rec.sent) or task.done())
        stopping.set()
        await task
        stop(d)
        return calls, [i for _, i, _ in rec.sent]

    calls, sent = asyncio.run(scenario())
    assert sent == ["dropped-0"], "the dropped work was never started"
    assert calls >= 2

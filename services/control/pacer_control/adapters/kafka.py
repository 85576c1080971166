"""The dead-letter topics for the Control API: :mod:`pacer_common.dead_letters` in a thread,
its failures as ``Unavailable`` (503) with the broker's words. At most :data:`READERS` reads
at once: each may hold a large refused request (up to 64 MiB) and its reader's prefetch. At
most :data:`PUBLISHERS` republishes at once, on slots of their own: a republish waits up to
:data:`PRODUCE_TIMEOUT_S` for the broker, and neither kind waits behind the other."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import TypeVar

from confluent_kafka import KafkaException

from pacer_common import dead_letters as dlq
from pacer_common.domain.dead_letters import Cursor, DeadLetter, Queue, Window
from pacer_common.kafka import ProduceError
from pacer_common.settings import KafkaSettings
from pacer_control.domain.errors import Unavailable

T = TypeVar("T")
READERS = 2
PUBLISHERS = 2
PUBLISH_WAIT_S = 5.0  # a republish waits this long at most for a slot, then answers 503
PRODUCE_TIMEOUT_S = dlq.READ_TIMEOUT_S  # the broker's acknowledgement of a republish


class KafkaDeadLetters:
    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self._readers = asyncio.Semaphore(READERS)
        self._publishers = asyncio.Semaphore(PUBLISHERS)

    def topic(self, queue: Queue) -> str:
        return dlq.topic_of(self.kafka, queue)

    async def window(self, queue: Queue, depth: int, before: datetime | None = None,
                     older: Cursor | None = None) -> Window:
        return await self._call(queue, lambda topic: dlq.newest(self.kafka, topic, depth, before=before, older=older),
                                Window([]))

    async def one(self, queue: Queue, partition: int, offset: int) -> DeadLetter | None:
        return await self._call(queue, lambda topic: dlq.one(self.kafka, topic, (partition, offset)), None)

    @contextlib.asynccontextmanager
    async def publishing(self) -> AsyncIterator[None]:
        try:
            await asyncio.wait_for(self._publishers.acquire(), PUBLISH_WAIT_S)
        except TimeoutError:
            raise Unavailable(f"{PUBLISHERS} republishes are already waiting on Kafka (each up to "
                              f"{PRODUCE_TIMEOUT_S:.0f} s); nothing was sent: try again shortly") from None
        try:
            yield
        finally:
            self._publishers.release()

    async def republish(self, letter: DeadLetter) -> None:
        topic = self.topic("requests")
        try:
            await asyncio.to_thread(dlq.republish, self.kafka, topic, letter, PRODUCE_TIMEOUT_S)
        except (KafkaException, ProduceError, TimeoutError) as exc:
            raise Unavailable(f"Kafka did not acknowledge the republish of {topic} {letter.where} ({exc}); it "
                              "may or may not have reached the job requests topic. Republishing it again is safe: "
                              "the planner plans a request id once") from None

    async def _call(self, queue: Queue, fn: Callable[[str], T], missing: T) -> T:
        topic = self.topic(queue)
        try:
            async with self._readers:
                return await asyncio.to_thread(fn, topic)
        except dlq.TopicMissing:
            return missing  # no such topic yet: nothing was ever dead-lettered there
        except (KafkaException, ProduceError, TimeoutError) as exc:
            raise Unavailable(f"Kafka cannot be reached for {topic} right now ({exc}); try again") from None

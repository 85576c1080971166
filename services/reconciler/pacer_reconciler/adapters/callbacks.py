"""The callbacks topic as the consumer's source: records in, offsets committed after them."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import Message, TopicPartition
from prometheus_client import CollectorRegistry

from pacer_common.domain.dead_letters import TENANT_HEADER
from pacer_common.kafka import AsyncConsumer, logged_rebalances, make_consumer, position
from pacer_common.metrics import consumer_lag_config
from pacer_common.settings import KafkaSettings
from pacer_reconciler.ports import RawCallback

log = logging.getLogger(__name__)


def _tenant(msg: Message) -> str | None:
    for header in msg.headers() or []:
        if header[0] == TENANT_HEADER and isinstance(header[1], bytes):
            return header[1].decode(errors="replace")
    return None


class KafkaCallbackSource:
    def __init__(self, consumer: AsyncConsumer) -> None:
        self.consumer = consumer

    @classmethod
    async def create(cls, kafka: KafkaSettings, group: str,
                     registry: CollectorRegistry | None = None) -> KafkaCallbackSource:
        """A consumer of its own in ``group``, subscribed to ``kafka``'s callbacks topic; its lag
        in ``registry`` (``pacer_kafka_consumer_lag``), if given."""
        lag = consumer_lag_config(registry) if registry is not None else {}
        consumer = AsyncConsumer(make_consumer(kafka.client_config(), group, **lag))
        await consumer.call(consumer.consumer.subscribe, [kafka.callbacks], **logged_rebalances(log))
        return cls(consumer)

    async def close(self) -> None:
        await self.consumer.close()

    async def fetch(self, n: int, timeout_s: float) -> list[RawCallback]:
        return [RawCallback(m.value(), position(m), _tenant(m)) for m in await self.consumer.consume(n, timeout_s)]

    async def commit(self, done: Sequence[RawCallback]) -> None:
        last: dict[tuple[str, int], int] = {}
        for r in done:
            topic, partition, offset = r.position
            last[(topic, partition)] = max(offset, last.get((topic, partition), -1))
        await self.consumer.commit([TopicPartition(t, p, o + 1) for (t, p), o in last.items()])

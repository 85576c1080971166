"""The services' consume call hands over what is there instead of waiting for a full batch."""

from __future__ import annotations

import asyncio
import time

from pacer_common.kafka import AsyncConsumer, ensure_topics, make_consumer, make_producer, produce_all


def test_a_lone_message_is_handed_over_without_waiting_for_the_batch_to_fill(
    kafka_config: dict[str, str], topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.lone"
    ensure_topics(kafka_config, {topic: (1, {})})

    async def scenario() -> list[tuple[int, float]]:
        consumer = AsyncConsumer(make_consumer(kafka_config, f"{topic_prefix}.g"))
        await consumer.call(consumer.consumer.subscribe, [topic])
        try:
            rounds = []
            for value in (b"first", b"second"):
                produce_all(make_producer(kafka_config), [(topic, None, value, None)])
                got: list = []
                deadline = time.monotonic() + 60  # the group's first assignment may take a while
                while not got and time.monotonic() < deadline:
                    started = time.monotonic()
                    got = await consumer.consume(500, 20.0)
                rounds.append((len(got), time.monotonic() - started))
            return rounds
        finally:
            await consumer.close()

    for count, waited in asyncio.run(scenario()):
        assert count == 1
        # A batch consume of 500 would hold the one message until its 20 s timeout.
        assert waited < 20.0, "the call waited for a batch that was never coming"

"""Latency of one message through ``AsyncConsumer.consume`` when traffic is light.

A lone auto-reply must not wait for a batch to fill: this produces one message every
``--gap-ms`` and measures produce → handed-to-the-caller for the services' call
(``AsyncConsumer.consume(n, timeout)``), for librdkafka's batch consume with the same
``n`` and timeout, and for a single-message poll (the floor).
Uses the Kafka at ``PACER_KAFKA_BOOTSTRAP_SERVERS`` or starts the local one.

Usage: python -m bench.consume_latency [--messages 100] [--gap-ms 100] [--batch 16] [--timeout-s 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import time
import uuid

from bench.common import real_infra
from pacer_common.kafka import AsyncConsumer, ensure_topics, make_consumer, make_producer
from pacer_dev.stack import drop_topics_or_warn


async def measure(bootstrap: str, messages: int, gap_s: float, batch: int, timeout_s: float,
                  call: str) -> list[float]:
    prefix = f"b{uuid.uuid4().hex[:10]}"
    topic = f"{prefix}.latency"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: (1, {})})
    consumer = AsyncConsumer(make_consumer({"bootstrap.servers": bootstrap}, f"g-{topic}"))
    await consumer.call(consumer.consumer.subscribe, [topic])
    producer = make_producer({"bootstrap.servers": bootstrap}, **{"linger.ms": 0})
    latencies: list[float] = []

    joined = time.monotonic() + 30  # the clock starts once the group has given us the partition
    while not await consumer.call(consumer.consumer.assignment):
        if time.monotonic() > joined:
            raise RuntimeError(f"no partition of {topic} assigned within 30 s")
        await consumer.call(consumer.consumer.consume, 1, 0.2)  # serves the rebalance callbacks

    async def produce() -> None:
        for _ in range(messages):
            producer.produce(topic, struct.pack("d", time.time()))
            producer.poll(0)
            await asyncio.sleep(gap_s)
        producer.flush(10)

    task = asyncio.create_task(produce())
    deadline = time.monotonic() + 30 + messages * gap_s
    while len(latencies) < messages and time.monotonic() < deadline:
        if call == "pacer":
            got = await consumer.consume(batch, timeout_s)
        elif call == "raw_batch":
            got = await consumer.call(consumer.consumer.consume, batch, timeout_s)
        else:
            got = await consumer.call(consumer.consumer.consume, 1, timeout_s)
        now = time.time()
        latencies.extend((now - struct.unpack("d", m.value() or b"")[0]) * 1000 for m in got)
    await task
    await consumer.close()
    drop_topics_or_warn({"bootstrap.servers": bootstrap}, prefix)
    return latencies


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100)
    ap.add_argument("--gap-ms", type=float, default=100)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--timeout-s", type=float, default=0.5)
    a = ap.parse_args()
    bootstrap = os.environ.get("PACER_KAFKA_BOOTSTRAP_SERVERS") or real_infra().kafka_bootstrap
    runs = {call: sorted(asyncio.run(measure(bootstrap, a.messages, a.gap_ms / 1000, a.batch, a.timeout_s, call)))
            for call in ("pacer", "raw_batch", "single")}
    p99 = {call: lat[min(len(lat) - 1, int(len(lat) * 0.99))] for call, lat in runs.items()}
    for call, lat in runs.items():  # each call's p99 over the single-message poll's, the floor
        print(f"bench consume_latency: call={call} n={1 if call == 'single' else a.batch} timeout_s={a.timeout_s}"
              f" gap_ms={a.gap_ms:g} p50_ms={statistics.median(lat):.1f} p99_ms={p99[call]:.1f}"
              f" p99_over_single={p99[call] / p99['single']:.2f} received={len(lat)}/{a.messages} cores={os.cpu_count()}")


if __name__ == "__main__":
    main()

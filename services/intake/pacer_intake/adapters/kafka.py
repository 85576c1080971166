"""The callback log on Kafka: each append awaits its own acknowledgement.

The producer is Pacer's usual one (``acks=all``, idempotent), with a short linger so an
answer waits milliseconds, not a batch. A thread serves the producer's delivery reports and
hands each to the request that waits for it; ``message.timeout.ms`` equals the wait, so a
callback answered 503 has given up in the producer too (a late delivery is still possible
and is a duplicate, which consumers absorb).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from pacer_common.domain.dead_letters import TENANT_HEADER
from pacer_common.domain.tenants import MAX_CALLBACK_BYTES
from pacer_common.kafka import dead_letter_headers, make_producer
from pacer_intake.ports import LogUnavailable

MAX_REASON_CHARS = 1000


def callback_producer(config: dict[str, str], timeout_s: float) -> Producer:
    return make_producer(config, **{"linger.ms": 1, "message.timeout.ms": int(timeout_s * 1000),
                                    "message.max.bytes": MAX_CALLBACK_BYTES + 1_048_576})


class KafkaCallbackLog:
    def __init__(self, producer: Producer, topic: str, dlq_topic: str, timeout_s: float) -> None:
        self.producer, self.topic, self.dlq_topic, self.timeout_s = producer, topic, dlq_topic, timeout_s
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._serve_reports, name="intake-delivery-reports", daemon=True)
        self._poller.start()

    async def append(self, tenant: str, guid: str, raw: bytes) -> None:
        await self._produce(self.topic, guid.encode(errors="surrogatepass"), raw, [(TENANT_HEADER, tenant.encode())])

    async def dead_letter(self, tenant: str, raw: bytes, reason: str) -> None:
        await self._produce(self.dlq_topic, None, raw, [*dead_letter_headers(reason, "intake", MAX_REASON_CHARS, tenant)])

    async def _produce(self, topic: str, key: bytes | None, value: bytes,
                       headers: list[tuple[str, str | bytes | None]]) -> None:
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[None] = loop.create_future()

        def report(err: KafkaError | None, _msg: Message) -> None:
            loop.call_soon_threadsafe(_settle, acked, err)

        try:
            self.producer.produce(topic, value, key, headers=headers, on_delivery=report)
        except BufferError as exc:
            raise LogUnavailable(f"producer queue full: {exc}") from exc
        except KafkaException as exc:
            raise LogUnavailable(f"cannot produce: {exc}") from exc
        try:
            await asyncio.wait_for(acked, self.timeout_s)
        except TimeoutError as exc:
            raise LogUnavailable(f"no acknowledgement within {self.timeout_s}s") from exc

    def _serve_reports(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.1)

    def close(self, flush_s: float = 10.0) -> int:
        """Stop serving reports after flushing what is queued; how many were left unflushed."""
        left = int(self.producer.flush(flush_s))
        self._stop.set()
        self._poller.join()
        return left


def _settle(acked: asyncio.Future[Any], err: KafkaError | None) -> None:
    if acked.done():  # the request gave up waiting (timeout, client gone)
        return
    if err is None:
        acked.set_result(None)
    else:
        acked.set_exception(LogUnavailable(f"delivery failed: {err}"))

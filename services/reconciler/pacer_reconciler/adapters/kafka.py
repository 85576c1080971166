"""Outcomes for business consumers, and item commands for re-queued items."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

from confluent_kafka import Producer

from pacer_common import tracing
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.dead_letters import TENANT_HEADER
from pacer_common.domain.events import ItemEvent
from pacer_common.domain.requests import lane_of
from pacer_common.kafka import ProducerLiveness, ProduceStalled, make_producer, produce_all_async, retire
from pacer_common.settings import KafkaSettings
from pacer_reconciler.ports import Rejected

Msg = tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]

log = logging.getLogger("pacer.reconciler")


class KafkaPublisher:
    def __init__(self, producer: Producer, outcomes_topic: str, commands_topic: Callable[[str], str],
                 max_message_bytes: int = 1_000_000, timeout_s: float = 60.0, *,
                 renew: Callable[[], Producer] | None = None, stall_s: float | None = None) -> None:
        self.producer = producer
        self.outcomes_topic = outcomes_topic
        self.commands_topic = commands_topic
        self.max_message_bytes = max_message_bytes  # at most the topics' max.message.bytes
        self.timeout_s = timeout_s  # for Kafka to acknowledge a batch
        self.liveness = ProducerLiveness()  # the producer's last delivery report, to any segment
        self.renew = renew  # a new producer, for one that stalled
        self.stall_s = stall_s  # without any delivery report for this long, the producer stalled
        self.renewals = 0

    @classmethod
    def create(cls, kafka: KafkaSettings, max_message_bytes: int, stall_s: float) -> KafkaPublisher:
        """A publisher with a producer of its own, to the topics ``kafka`` names; a producer
        that stalls for ``stall_s`` is replaced by a new one."""
        config = kafka.client_config()
        return cls(make_producer(config), kafka.item_outcomes, kafka.item_commands, max_message_bytes,
                   renew=lambda: make_producer(config), stall_s=stall_s)

    def close(self) -> None:
        """Deliver what is still queued (publish flushes already; this is for a stop mid-way)."""
        self.producer.flush(10)

    async def publish(self, events: Sequence[ItemEvent], commands: Sequence[ItemCommand]) -> list[Rejected]:
        """Produce and flush all that fit; raises unless Kafka acknowledged every one of them.

        A message larger than ``max_message_bytes`` would be refused by the broker on every
        try: it is left out and returned, so that it cannot hold up the batch for ever.

        Waiting for the acknowledgements (up to ``timeout_s`` while Kafka is away) leaves the
        event loop free: it goes on renewing leases and answering /healthz meanwhile.
        """
        rejected: list[Rejected] = []
        fit: list[Msg] = []
        for item_id, msg in self._messages(events, commands):
            size = len(msg[1] or b"") + len(msg[2]) + sum(len(k) + len(v) for k, v in msg[3] or [])
            if size > self.max_message_bytes:
                rejected.append(Rejected(item_id, f"{msg[0]} message of {size} bytes exceeds {self.max_message_bytes}"))
            else:
                fit.append(msg)
        producer = self.producer
        try:
            await produce_all_async(producer, fit, timeout_s=self.timeout_s, stall_s=self.stall_s,
                                    liveness=self.liveness)
        except ProduceStalled as exc:
            self._replace(producer, exc)
            raise
        return rejected

    def _replace(self, stalled: Producer, why: ProduceStalled) -> None:
        """Put a new producer in place of one that served no delivery report for ``stall_s``
        (once, whichever segment saw it first).

        A client can stop trying to reach a broker that came back (seen once after a Kafka
        restart: no connection attempt for a minute while the broker answered everyone else);
        a new one starts from the bootstrap servers. What the old one still holds is purged:
        the segments waiting on it get their batches' failure now, and publish them again, at
        their next round, through the new one (a message purged in flight may have been
        written: outcomes are at-least-once). The old client is destroyed off the event loop."""
        if self.renew is None or self.producer is not stalled:
            return
        self.producer, self.liveness = self.renew(), ProducerLiveness()
        self.renewals += 1
        # The binding's blocking=True (its default) is librdkafka's non-blocking purge: the
        # call does not wait on the stalled client's threads.
        stalled.purge(in_queue=True, in_flight=True)
        retire(stalled, within_s=self.timeout_s * 2)
        log.warning("Kafka producer replaced: %s; the batches waiting on it go out through a new one", why)

    def _messages(self, events: Sequence[ItemEvent], commands: Sequence[ItemCommand]) -> Iterator[tuple[str, Msg]]:
        # An item's events in version order: the log is read in transaction-id order, and a
        # transaction takes its id at its first write or lock, which may come before another
        # that moves the same item first (a cancel locks its job, then abandons an item the
        # retry sweep re-queued meanwhile). Other items' order is nothing to a consumer by key.
        for ev in sorted(events, key=lambda e: (e.item_id, e.version)):
            headers = [("pacer-event-type", ev.type.encode()), ("pacer-dedupe-key", ev.dedupe_key.encode()),
                       *tracing.kafka_headers(ev.traceparent)]
            if ev.tenant is not None:
                headers.append((TENANT_HEADER, ev.tenant.encode()))
            yield ev.item_id, (self.outcomes_topic, ev.item_id.encode(), ev.model_dump_json().encode(), headers)
        for cmd in commands:
            yield cmd.item_id, (self.commands_topic(lane_of(cmd.priority)), cmd.guid.encode(),
                                cmd.model_dump_json().encode(), tracing.kafka_headers(cmd.traceparent) or None)

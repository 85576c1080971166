"""Outcomes for business consumers, and item commands for re-queued items."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from confluent_kafka import Producer

from pacer_common import tracing
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.dead_letters import TENANT_HEADER
from pacer_common.domain.events import ItemEvent
from pacer_common.domain.requests import lane_of
from pacer_common.kafka import Renewing, make_producer, produce_all_async
from pacer_common.settings import KafkaSettings
from pacer_reconciler.ports import Rejected

Msg = tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]


class KafkaPublisher:
    def __init__(self, producer: Producer, outcomes_topic: str, commands_topic: Callable[[str], str],
                 max_message_bytes: int = 1_000_000, timeout_s: float = 60.0, *,
                 renew: Callable[[], Producer] | None = None, stall_s: float | None = None) -> None:
        self.client = Renewing(producer, renew, retire_after_s=timeout_s * 2)
        self.outcomes_topic = outcomes_topic
        self.commands_topic = commands_topic
        self.max_message_bytes = max_message_bytes  # at most the topics' max.message.bytes
        self.timeout_s = timeout_s  # for Kafka to acknowledge a batch
        self.stall_s = stall_s  # without any delivery report for this long, the producer stalled

    @property
    def producer(self) -> Producer:
        return self.client.producer

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
        with self.client.using() as (producer, liveness):  # stalled: replaced; the waiting segments fail too
            await produce_all_async(producer, fit, timeout_s=self.timeout_s, stall_s=self.stall_s, liveness=liveness)
        return rejected

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

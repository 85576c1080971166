"""Outcomes for business consumers, and item commands for re-queued items."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from confluent_kafka import Producer

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.events import ItemEvent
from pacer_common.domain.requests import lane_of
from pacer_common.kafka import produce_all

Msg = tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]


class KafkaPublisher:
    def __init__(self, producer: Producer, outcomes_topic: str, commands_topic: Callable[[str], str]) -> None:
        self.producer = producer
        self.outcomes_topic = outcomes_topic
        self.commands_topic = commands_topic

    def publish(self, events: Sequence[ItemEvent], commands: Sequence[ItemCommand]) -> None:
        """Produce and flush all; raises unless Kafka acknowledged every message."""
        produce_all(self.producer, self._messages(events, commands))

    def _messages(self, events: Sequence[ItemEvent], commands: Sequence[ItemCommand]) -> Iterator[Msg]:
        for ev in events:
            headers = [("pacer-event-type", ev.type.encode()), ("pacer-dedupe-key", f"{ev.item_id}:{ev.version}".encode())]
            yield self.outcomes_topic, ev.item_id.encode(), ev.model_dump_json().encode(), headers
        for cmd in commands:
            yield self.commands_topic(lane_of(cmd.priority)), cmd.guid.encode(), cmd.model_dump_json().encode(), None

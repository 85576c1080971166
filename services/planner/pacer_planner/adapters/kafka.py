"""The command bus on Kafka: item commands keyed by guid, rejected requests to the DLQ."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from confluent_kafka import Producer

from pacer_common.domain.commands import ItemCommand, JobCommands
from pacer_common.domain.requests import LANES, lane_of
from pacer_common.kafka import produce_all


class KafkaCommandBus:
    def __init__(self, producer: Producer, commands_topic: Callable[[str], str], dlq_topic: str) -> None:
        self.producer = producer
        self.commands_topic = commands_topic  # lane → topic
        self.dlq_topic = dlq_topic

    def dispatch(self, commands: Sequence[ItemCommand]) -> int:
        """Produce and flush every command; raises unless Kafka acknowledged all of them."""
        topics = {lane: self.commands_topic(lane) for lane in LANES}
        if isinstance(commands, JobCommands):  # a job's: encoded in bulk, no model per item
            topic = topics[lane_of(commands.priority)]
            return produce_all(self.producer, ((topic, guid.encode(), value, None) for guid, value in commands.encoded()))
        return produce_all(
            self.producer,
            ((topics[lane_of(c.priority)], c.guid.encode(), c.model_dump_json().encode(), None) for c in commands),
        )

    def dead_letter(self, key: bytes | None, value: bytes, reason: str) -> None:
        """The original bytes, untouched, with the reason in headers."""
        headers = [
            ("pacer-error-reason", reason.encode()),
            ("pacer-error-at", datetime.now(UTC).isoformat().encode()),
            ("pacer-error-source", b"planner"),
        ]
        produce_all(self.producer, [(self.dlq_topic, key, value, headers)])

"""Records a topic's retention deleted before a consumer group read them are counted and
logged, never skipped in silence; a group's first start is not such a loss."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from pacer_common.kafka import CLIENT_LOG, ensure_topics, make_consumer, make_producer, produce_all
from pacer_common.metrics import OffsetResets


def _read_all(consumer: Consumer, topic: str, want: int) -> list[int]:
    """Offsets read from ``topic`` until ``want`` arrived (the group's join may take a while)."""
    consumer.subscribe([topic])
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < want and time.monotonic() < deadline:
        got += [m.offset() for m in consumer.consume(10, 1.0) if m.error() is None]
    consumer.close()
    return got


def test_a_committed_offset_the_retention_passed_is_counted_and_logged_and_a_first_start_is_not(
        kafka_config: dict[str, str], topic_prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"{topic_prefix}.requests"
    ensure_topics(kafka_config, {topic: (1, {})})
    produce_all(make_producer(kafka_config), [(topic, None, str(i).encode(), None) for i in range(10)])
    registry = CollectorRegistry()
    resets = OffsetResets(registry, [topic])
    # The topic's series is there from the start, at 0: "nothing lost" is not "not exported".
    assert registry.get_sample_value("pacer_kafka_offset_resets_total", {"topic": topic}) == 0
    try:
        with caplog.at_level(logging.WARNING):
            # A new group, no committed offset: it starts at the oldest record, and nothing is lost.
            assert sorted(_read_all(make_consumer(kafka_config, f"{topic_prefix}.new"), topic, 10)) == list(range(10))
            assert registry.get_sample_value("pacer_kafka_offset_resets_total", {"topic": topic}) == 0

            # A group that had got to offset 3 when the retention deleted everything before 8.
            group = f"{topic_prefix}.behind"
            committer = make_consumer(kafka_config, group)
            committer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
            committer.close()
            admin = AdminClient(dict(kafka_config))
            for fut in admin.delete_records([TopicPartition(topic, 0, 8)]).values():
                fut.result(30)
            assert sorted(_read_all(make_consumer(kafka_config, group), topic, 2)) == [8, 9]

        assert registry.get_sample_value("pacer_kafka_offset_resets_total", {"topic": topic}) == 1
        (lost,) = [r for r in caplog.records if r.name == "pacer_common.metrics"]
        assert lost.levelno == logging.ERROR
        assert (lost.__dict__["topic"], lost.__dict__["partition"], lost.__dict__["committed_offset"]) == (topic, 0, 3)
        assert "deleted by the topic's retention" in lost.getMessage()
    finally:
        resets.close()
    assert resets not in CLIENT_LOG.handlers

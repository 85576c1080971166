"""The planner's command bus replaces a producer that stalls: the attempt that saw the stall
fails well before the publish timeout, and the request's next attempt goes out through a new
producer to the live broker."""

from __future__ import annotations

import time

import pytest

from pacer_common.kafka import ProduceStalled, ensure_topics, make_producer
from pacer_dev.fakegateway.process import free_port
from pacer_planner.adapters.kafka import KafkaCommandBus
from tests.integration.helpers import cmd, read_topic


def test_a_stalled_producer_is_replaced_and_the_next_dispatch_goes_out_through_the_new_one(
        kafka_config: dict[str, str], topic_prefix: str) -> None:
    commands = f"{topic_prefix}.item-commands"
    ensure_topics(kafka_config, {f"{commands}.batch": (1, {}), f"{commands}.online": (1, {}),
                                 f"{topic_prefix}.dlq": (1, {})})
    wedged = make_producer({"bootstrap.servers": f"127.0.0.1:{free_port()}"})
    bus = KafkaCommandBus(wedged, lambda lane: f"{commands}.{lane}", f"{topic_prefix}.dlq",
                          renew=lambda: make_producer(kafka_config), stall_s=3.0)
    started = time.monotonic()
    with pytest.raises(ProduceStalled):
        bus.dispatch([cmd("i1", "k1"), cmd("i2", "k2", "g2")])
    assert time.monotonic() - started < 30, "the stall must be seen well before the 60 s timeout"
    assert bus.producer is not wedged and bus.client.renewals == 1
    bus.stall_s = 60.0  # the new producer's first report may wait for a busy broker's start-up
    assert bus.dispatch([cmd("i1", "k1"), cmd("i2", "k2", "g2")]) == 2
    sent = read_topic(kafka_config, f"{commands}.batch", expect=2)
    assert sorted(m["value"]["item_id"] for m in sent) == ["i1", "i2"], "once each, through the new producer"

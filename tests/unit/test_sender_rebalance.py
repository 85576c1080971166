"""The sender's rebalance callbacks never raise: confluent-kafka re-raises a callback's
exception from ``consume()``, which ended the consumer loop and the sender, with the leases
of every guid it owned held to their TTL. A release of the revoked guids that hangs (Postgres
slow) or fails is logged, and the consumer goes on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry, Counter

from pacer_common.db.errors import TransientError
from pacer_common.kafka import AsyncConsumer
from pacer_sender.adapters.kafka import ConsumerLoop


class _Releases:
    """A dispatcher whose release of the revoked guids hangs, or fails as a database that
    cannot be reached does."""

    def __init__(self, hangs: bool) -> None:
        self.hangs = hangs
        self.asked = 0

    async def release(self, gone: Callable[[str], bool], timeout_s: float = 30.0) -> None:
        self.asked += 1
        if self.hangs:
            await asyncio.Event().wait()
        raise TransientError("connection to the database lost")


@pytest.mark.parametrize("hangs", [True, False], ids=["release-hangs", "release-fails"])
@pytest.mark.parametrize("callback", ["on_revoke", "on_lost"])
def test_a_rebalance_callback_whose_release_hangs_or_fails_logs_it_and_returns(
        hangs: bool, callback: str, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> tuple[set[tuple[str, int]], int]:
        releases = _Releases(hangs)
        loop = ConsumerLoop(AsyncConsumer(object()), releases, Counter("bad", "bad", registry=CollectorRegistry()),  # type: ignore[arg-type]  # stand-ins: no broker, no dispatcher
                            "online", "batch")
        loop.release_wait_s = 0.2
        loop.assigned = {("online", 0), ("batch", 0), ("batch", 1)}
        # On the consumer's thread, as librdkafka calls it from inside consume()
        await asyncio.to_thread(getattr(loop, callback), None, [TopicPartition("online", 0), TopicPartition("batch", 0)])
        return loop.assigned, releases.asked

    with caplog.at_level(logging.WARNING, logger="pacer_sender.adapters.kafka"):
        assigned, asked = asyncio.run(scenario())
    assert asked == 1
    assert assigned == {("batch", 1)}, "the revoked partitions are no longer this sender's"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("not given back" in m and "expire at their TTL" in m for m in warned), warned

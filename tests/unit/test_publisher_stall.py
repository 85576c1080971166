"""The reconciler's publisher replaces a producer that served no delivery report at all, once
however many segments wait on it, and not one that keeps serving other segments' reports."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from pacer_common.domain.events import ItemEvent
from pacer_common.domain.status import ItemStatus as S
from pacer_common.kafka import ProduceError, ProduceStalled
from pacer_reconciler.adapters.kafka import KafkaPublisher


class Msg:
    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic


class Fake:
    """A producer that acknowledges, at each poll, what goes to the topics in ``acks``."""

    def __init__(self, acks: frozenset[str] = frozenset()) -> None:
        self.acks = acks
        self.pending: list[tuple[str, Callable[[Any, Any], None]]] = []
        self.purges: list[dict[str, Any]] = []
        self.seen: set[Any] = set()

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any, on_delivery: Any) -> None:
        self.pending.append((topic, on_delivery))

    def poll(self, timeout: float) -> int:
        """Acknowledges what was already there at the poll before: a publish waits a round."""
        done = [(t, cb) for t, cb in self.pending if t in self.acks and cb in self.seen]
        self.pending = [(t, cb) for t, cb in self.pending if (t, cb) not in done]
        self.seen = {cb for _, cb in self.pending}
        for t, cb in done:
            cb(None, Msg(t))
        return len(done)

    def purge(self, **flags: Any) -> None:
        """Recorded only: a stalled client's purge reports may never be served either (a
        non-blocking purge leaves them to its threads), so whoever waits on it stalls too."""
        self.purges.append(flags)


def event(item: str) -> ItemEvent:
    return ItemEvent(seq=1, type="ItemConfirmed", item_id=item, job_id="j", shard_id=1, guid="g", version=3,
                     from_status=S.SUBMITTED, to_status=S.CONFIRMED, occurred_at=datetime.now(UTC), payload={})


def publisher(first: Fake, renewed: list[Fake], outcomes: str = "outcomes", **kw: Any) -> KafkaPublisher:
    def renew() -> Fake:
        renewed.append(Fake(frozenset({"outcomes", "good"})))
        return renewed[-1]

    return KafkaPublisher(first, outcomes, lambda lane: f"commands.{lane}", renew=renew, **kw)  # type: ignore[arg-type]


def test_segments_waiting_on_a_stalled_producer_replace_it_once_and_all_fail_their_round() -> None:
    stalled, renewed = Fake(), list[Fake]()
    pub = publisher(stalled, renewed, timeout_s=30.0, stall_s=0.3)

    async def go() -> list[object]:
        return list(await asyncio.gather(*(pub.publish([event(f"i{k}")], []) for k in range(4)),
                                          return_exceptions=True))

    results = asyncio.run(go())
    assert all(isinstance(r, ProduceStalled) for r in results), results
    assert len(renewed) == 1 and pub.producer is renewed[0] and pub.client.renewals == 1, "one replacement, not one a segment"
    assert stalled.purges == [{"in_queue": True, "in_flight": True}], (
        "purged once, with the binding's default blocking=True, which is librdkafka's non-blocking purge")
    assert asyncio.run(pub.publish([event("again")], [])) == []  # through the new producer


def test_a_producer_that_serves_other_segments_reports_is_not_replaced() -> None:
    """One partition without a leader: its batch waits (up to the timeout) while the other
    segments' batches are acknowledged; the producer is alive and stays."""
    partial, renewed = Fake(frozenset({"good"})), list[Fake]()
    slow = publisher(partial, renewed, outcomes="bad", timeout_s=1.0, stall_s=0.3)
    fine = KafkaPublisher(partial, "good", lambda lane: f"commands.{lane}")  # type: ignore[arg-type]
    fine.client = slow.client  # the same producer: one record of its reports
    delivered = 0

    async def go() -> BaseException | None:
        nonlocal delivered
        waiting = asyncio.ensure_future(slow.publish([event("b")], []))
        while not waiting.done():  # the other segments' batches, acknowledged all along
            await fine.publish([event(f"g{delivered}")], [])
            delivered += 1
        try:
            await waiting
        except ProduceError as exc:
            return exc
        return None

    error = asyncio.run(go())
    assert isinstance(error, ProduceError) and not isinstance(error, ProduceStalled), repr(error)
    assert renewed == [] and slow.producer is partial
    assert delivered > 0


def test_without_a_stall_time_a_producer_is_never_replaced() -> None:
    stalled, renewed = Fake(), list[Fake]()
    pub = publisher(stalled, renewed, timeout_s=0.5, stall_s=None)
    with pytest.raises(ProduceError) as caught:
        asyncio.run(pub.publish([event("i")], []))
    assert not isinstance(caught.value, ProduceStalled) and renewed == []

"""The sender's sweep asks which guids it owns, with partition counts read from Kafka. While
Kafka cannot answer (a broker restart), the last counts read stand: the sweep, which starts
the owned guids' queued work from Postgres, must not die with the metadata request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry, Counter

from pacer_common.domain.ids import Guid
from pacer_common.kafka import AsyncConsumer
from pacer_sender.adapters.kafka import ConsumerLoop
from pacer_sender.domain.partitions import partition_of
from pacer_sender.sweeper import Sweeper
from tests.unit.dispatching import FAST, cmd, dispatcher, ring, stop, unchanged_counts, until
from tests.unit.fakes import GrantAll


class Metadata:
    def __init__(self, counts: dict[str, int]) -> None:
        self.topics = {t: type("T", (), {"partitions": dict.fromkeys(range(n))})() for t, n in counts.items()}


class Consumer:
    """Answers list_topics with ``counts``, or raises as librdkafka does with no broker."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.down = False

    def list_topics(self, topic: str, timeout: float) -> Metadata:
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "1/1 brokers are down"))
        return Metadata({topic: self.counts[topic]})


def test_the_last_partition_counts_stand_while_kafka_cannot_answer() -> None:
    async def scenario() -> tuple[bool, bool]:
        raw = Consumer({"online": 4, "batch": 4})
        d, _, _ = dispatcher(FAST)
        loop = ConsumerLoop(AsyncConsumer(raw), d, Counter("bad", "bad", registry=CollectorRegistry()),  # type: ignore[arg-type]  # a stand-in consumer
                            "online", "batch")
        owns = await loop.ownership()
        guid = "g-1"
        loop.assigned = {("batch", partition_of(guid, 4)), ("online", partition_of(guid, 4))}  # type: ignore[arg-type]
        before = owns(guid)
        raw.down = True
        after = (await loop.ownership())(guid)
        return before, after

    before, after = asyncio.run(scenario())
    assert before, "the guid's partition is assigned"
    assert after, "a metadata error must not end the sweep nor forget what this sender owns"


def test_guids_that_hash_elsewhere_after_partitions_were_added_are_given_back() -> None:
    """Partitions added to the lane topics move guids to other partitions without revoking
    any from a sender that keeps its own. The guids that left must be given back: a kept
    lease is renewed for ever, and their new owner would never send for them."""
    moved, stayed = _guids(lambda g: partition_of(Guid(g), 2) == 1), _guids(lambda g: partition_of(Guid(g), 2) == 0)

    async def scenario() -> tuple[set[str], set[str]]:
        raw = Consumer({"online": 1, "batch": 1})
        d, rec, _ = dispatcher(FAST)
        loop = ConsumerLoop(AsyncConsumer(raw), d, Counter("bad", "bad", registry=CollectorRegistry()),  # type: ignore[arg-type]  # a stand-in consumer
                            "online", "batch")
        d.owns = loop.owns
        await loop.ownership()
        loop.assigned = {("online", 0), ("batch", 0)}
        for g in moved + stayed:
            ring(d, rec.store, cmd(g, 0))
        await until(lambda: len(rec.sent) == len(moved + stayed))
        held_before = set(d.leases.held)
        raw.counts = {"online": 2, "batch": 2}  # partition 1 added to both, assigned elsewhere
        await loop.ownership()
        held_after = set(d.leases.held)
        stop(d)
        return held_before, held_after

    before, after = asyncio.run(scenario())
    assert before == set(moved + stayed), "every guid sent once and kept its lease"
    assert after == set(stayed), "the guids that now hash to partition 1 are given back, the others kept"


def test_a_worker_rung_for_a_guid_it_does_not_own_ends_when_the_owner_holds_the_lease() -> None:
    """A planner still hashing with the count from before partitions were added rings the
    old partition's sender. If the guid's owner holds its lease, that worker must end (the
    owner has the work in Postgres), not wait for the lease for ever; a guid this sender owns
    keeps waiting for its lease, as at any handover."""
    async def scenario() -> tuple[set[str], list[str]]:
        leases = GrantAll(held_elsewhere={"moved", "mine"})
        d, rec, _ = dispatcher(FAST, store=leases)
        d.owns = lambda g: g != "moved"
        for g in ("moved", "mine"):
            ring(d, rec.store, cmd(g, 0))
        await until(lambda: "moved" not in d.guids)
        asked = leases.asked
        await until(lambda: leases.asked >= asked + 3)  # "mine" asks for its lease again and again
        running = set(d.guids)
        stop(d)
        return running, [i for _, i, _ in rec.sent]

    running, sent = asyncio.run(scenario())
    assert running == {"mine"}, "the owned guid's worker waits for its lease"
    assert sent == [], "neither is sent while another sender holds its lease"


def _guids(where: Callable[[str], bool], n: int = 3) -> list[str]:
    found = [g for g in (f"g-{i}" for i in range(100)) if where(g)]
    return found[:n]


def test_a_sweep_whose_partition_count_read_fails_starts_the_work_on_the_last_counts_and_goes_on() -> None:
    """The assign sweep of a new owner while Kafka's metadata request fails (the broker
    restarting): the work a previous owner dropped has no doorbell left, and only a sweep
    starts it. The last counts read stand, and the failed read does not end the sweep loop."""
    async def scenario() -> tuple[int, list[str]]:
        d, rec, _ = dispatcher(FAST)
        rec.store.add(cmd("dropped", 0))  # in Postgres, its doorbell consumed by the previous owner
        calls = 0

        async def recount() -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, "1/1 brokers are down"))

        stopping = asyncio.Event()
        sweeper = Sweeper(d, rec.store, lambda g: True, recount, interval_s=0.05)
        sweeper.request()
        task = asyncio.create_task(sweeper.run(stopping))
        await until(lambda: (bool(rec.sent) and calls >= 2) or task.done())
        stopping.set()
        await task
        stop(d)
        return calls, [i for _, i, _ in rec.sent]

    calls, sent = asyncio.run(scenario())
    assert sent == ["dropped-0"], "the dropped work was never started"
    assert calls >= 2, "the sweep loop ended with the failed read"


def test_the_sweep_starts_the_moved_guids_work_without_waiting_for_fresh_partition_counts() -> None:
    """At an assignment under load Kafka's metadata answer takes up to a second; the guids
    that moved here start on the counts last read while it is asked for, and the sweep still
    waits for the read before it ends (its next one reads again, never two at once)."""
    async def scenario() -> tuple[list[str], bool, bool]:
        d, rec, _ = dispatcher(FAST)
        rec.store.add(cmd("moved", 0))
        answered = asyncio.Event()

        async def recount() -> None:
            await answered.wait()  # Kafka slow to answer

        sweep = asyncio.create_task(Sweeper(d, rec.store, lambda g: True, recount, interval_s=1.0).sweep("assign"))
        await until(lambda: bool(rec.sent))
        waited = not sweep.done()
        answered.set()
        found = await sweep
        stop(d)
        return [i for _, i, _ in rec.sent], waited, found == 1

    sent, waited, counted = asyncio.run(scenario())
    assert sent == ["moved-0"], "the moved guid's work waited for the partition counts"
    assert waited, "the sweep ended before the partition counts were read"
    assert counted, "the moved guid's overdue work was not counted as found"


def test_the_sweep_asks_postgres_for_the_guids_of_the_partitions_the_sender_owns() -> None:
    """The pairs the sweep passes down (partition count, partition) claim exactly the guids
    that ``owns`` accepts, over lane topics of different partition counts; the store then
    reads those guids alone, and the sweep starts the work of this sender's guids only."""
    async def scenario() -> tuple[list[tuple[int, int]], list[list[tuple[int, int]] | None], set[str], set[str]]:
        raw = Consumer({"online": 6, "batch": 4})
        d, rec, _ = dispatcher(FAST)
        loop = ConsumerLoop(AsyncConsumer(raw), d, Counter("bad", "bad", registry=CollectorRegistry()),  # type: ignore[arg-type]  # a stand-in consumer
                            "online", "batch")
        await loop.ownership()
        loop.assigned = {("online", 1), ("online", 4), ("batch", 2)}
        d.owns = loop.owns
        guids = [f"g-{n}" for n in range(60)]
        for g in guids:
            rec.store.add(cmd(g, 0))
        await Sweeper(d, rec.store, loop.owns, unchanged_counts, interval_s=60.0,
                      owned=loop.owned_partitions).sweep("assign")
        await until(lambda: len(rec.sent) == len({g for g in guids if loop.owns(g)}))
        started = {guid for guid, _, _ in rec.sent}
        stop(d)
        return loop.owned_partitions(), rec.store.sweeps_owned, started, {g for g in guids if loop.owns(g)}

    pairs, asked, started, owned = asyncio.run(scenario())
    assert pairs == [(4, 2), (6, 1), (6, 4)]
    assert asked == [pairs], "the sweep read every guid, not this sender's"
    assert started == owned and 0 < len(owned) < 60

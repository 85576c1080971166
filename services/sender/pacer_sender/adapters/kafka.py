"""The sender's Kafka side: doorbells in, offsets committed, partitions assigned and revoked.

An item command says "this guid has work"; the work itself is in Postgres. So a command's
offset is committed as soon as the command is noted (held in its guid's window, or rung
for), and a partition's commit point never waits on queued or scheduled work. Partition
assignment decides which guids this sender runs; the guid lease in Postgres decides which
sender may send for a guid.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future

from confluent_kafka import KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError

from pacer_common.domain.commands import CommandHead, ItemCommand
from pacer_common.domain.ids import Guid
from pacer_common.kafka import AsyncConsumer, describe_partitions, make_consumer, position
from pacer_common.metrics import consumer_lag_config
from pacer_common.settings import KafkaSettings
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.partitions import partition_of

log = logging.getLogger(__name__)
TP = tuple[str, int]


def command_consumer(kafka: KafkaSettings, group_id: str | None, registry: CollectorRegistry) -> AsyncConsumer:
    """The consumer of both lane topics, in group ``group_id`` (default ``<prefix>.sender``).

    Kafka 4's consumer group protocol (KIP-848) rebalances incrementally, and its range
    assignor gives partition N of both lane topics to the same sender: a guid's online and
    batch commands meet in one process."""
    return AsyncConsumer(make_consumer(kafka.client_config(), group_id or f"{kafka.topic_prefix}.sender",
                                       protocol="consumer", remote_assignor="range",
                                       **consumer_lag_config(registry)))


class ConsumerLoop:
    """Polls, rings doorbells, commits what was noted; handles rebalances."""

    def __init__(self, consumer: AsyncConsumer, dispatcher: Dispatcher, bad_commands: Counter,
                 online_topic: str, batch_topic: str, on_assigned: Callable[[], None] = lambda: None) -> None:
        self.consumer = consumer
        self.dispatcher = dispatcher
        self.bad_commands = bad_commands
        self.online_topic, self.batch_topic = online_topic, batch_topic
        self.on_assigned = on_assigned  # called on the event loop after partitions were assigned
        self.assigned: set[TP] = set()
        self.partitions: dict[str, int] = {}  # topic → partition count
        self.noted: dict[TP, int] = {}  # the next offset to read, per partition: commit point
        self.committed: dict[TP, int] = {}
        self.release_wait_s = 60.0  # how long a rebalance callback waits for the guids to be given back
        self.loop = asyncio.get_running_loop()

    # -- ownership --------------------------------------------------------------------------
    def owns(self, guid: str) -> bool:
        """Is ``guid``'s partition (of either lane topic) assigned to this sender?"""
        return any((t, partition_of(Guid(guid), n)) in self.assigned for t, n in self.partitions.items())

    def owned_partitions(self) -> list[tuple[int, int]]:
        """:meth:`owns` as (partition count, partition) pairs: a guid is this sender's if its
        partition under some pair's count is that pair's partition. The assignment is copied
        in one step first: the rebalance callbacks change it on the consumer's thread."""
        assigned, counts = tuple(self.assigned), dict(self.partitions)
        return sorted({(counts[t], p) for t, p in assigned if t in counts})

    async def ownership(self) -> Callable[[str], bool]:
        """:meth:`owns`, with partition counts read afresh (partitions may have been added).
        While Kafka cannot answer, the last counts read stand: the sweep that asks is what
        starts the owned guids' queued work from Postgres, and must go on through an outage.

        Partitions added change which partition a guid hashes to, without revoking anything
        from a sender that keeps its own: the guids that now hash to another sender's
        partitions are given back here (workers stopped, leases released), as on a revoke.
        Kept, their leases would be renewed for ever and their new owner never get them."""
        before = dict(self.partitions)
        await self._read_partition_counts()
        if before and self.partitions != before:
            log.warning("partition counts changed from %s to %s: giving back the guids that now hash elsewhere",
                        before, self.partitions)
            await self.dispatcher.release(lambda g: not self.owns(g))
        return self.owns

    async def _read_partition_counts(self) -> None:
        for topic in (self.online_topic, self.batch_topic):
            try:
                meta = await self.consumer.call(self.consumer.consumer.list_topics, topic, 10)
            except KafkaException as exc:
                log.warning("partition count of %s not read (%s); using the last one read", topic, exc)
                continue
            n = len(meta.topics[topic].partitions) if topic in meta.topics else 0
            if n:
                self.partitions[topic] = n

    # -- rebalance callbacks: on the consumer thread, inside poll --------------------------
    def on_assign(self, consumer: object, partitions: list[TopicPartition]) -> None:
        self.assigned |= {(p.topic, p.partition) for p in partitions}
        log.info("partitions assigned: %s", describe_partitions(partitions))
        self.loop.call_soon_threadsafe(self.on_assigned)  # sweep: the new partitions' guids get going

    def on_revoke(self, consumer: object, partitions: list[TopicPartition]) -> None:
        tps = self._drop(partitions)
        points = {tp: off for tp, off in self.noted.items() if tp in tps and off > self.committed.get(tp, -1)}
        if points:
            try:
                self.consumer.consumer.commit(offsets=_offsets(points), asynchronous=False)
            except KafkaException as exc:
                log.warning("offset commit on revoke refused: %s", exc)  # the next owner re-reads: harmless
        for tp in tps:
            self.noted.pop(tp, None)
            self.committed.pop(tp, None)
        log.info("partitions revoked: %s", describe_partitions(partitions))

    def on_lost(self, consumer: object, partitions: list[TopicPartition]) -> None:
        for tp in self._drop(partitions):
            self.noted.pop(tp, None)
            self.committed.pop(tp, None)
        log.warning("partitions lost: %s", describe_partitions(partitions))

    def _drop(self, partitions: list[TopicPartition]) -> set[TP]:
        """Stop the guids of these partitions (items in hand finish) and give their leases back.

        Never raises: confluent-kafka re-raises a rebalance callback's exception from
        ``consume()``, which ended the consumer loop and the sender, its leases held to their
        TTL. With Postgres slow, the release (up to 30 s for items in hand, then the leases
        released with retries) outlasted the wait, or failed. The guids' workers are stopped
        by then; a lease not given back expires at its TTL, and the new owner's epoch fences
        this sender's writes meanwhile."""
        tps = {(p.topic, p.partition) for p in partitions}
        self.assigned -= tps
        fut = asyncio.run_coroutine_threadsafe(self.dispatcher.release(lambda g: not self.owns(g)), self.loop)
        where = describe_partitions(partitions)
        try:
            fut.result(timeout=self.release_wait_s)
        except TimeoutError:
            log.warning("guids of %s not given back within %.0f s; going on (their leases expire at their TTL"
                        " if the release does not end)", where, self.release_wait_s)
            fut.add_done_callback(lambda f: _released_late(f, where))
        except Exception:
            log.warning("guids of %s not given back; going on (their leases expire at their TTL)", where,
                        exc_info=True)
        return tps

    # -- the loop ---------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        await self.ownership()
        await self.consumer.call(self.consumer.consumer.subscribe, [self.online_topic, self.batch_topic],
                                 on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)
        last_commit = self.loop.time()
        while not stop.is_set():
            for msg in await self.consumer.consume(500, 0.05):
                self._doorbell(msg)
            if self.loop.time() - last_commit >= 0.5:
                await self._commit()
                last_commit = self.loop.time()
        # Graceful stop: finish the items in hand, commit, give the guids back, leave the group.
        self.assigned.clear()  # owns nothing any more: a sweep under way starts nothing
        await self.dispatcher.release(lambda g: True)
        await self._commit()

    async def close(self) -> None:
        """Leave the consumer group (after :meth:`run` returned)."""
        await self.consumer.close()

    def _doorbell(self, msg: Message) -> None:
        topic, partition, offset = position(msg)
        tp = (topic, partition)
        if tp not in self.assigned:
            return
        self.noted[tp] = offset + 1
        key = _text(msg.key())
        if key is not None and msg.topic() == self.batch_topic and self.dispatcher.full(key):
            # It would not be held: its head says all that matters — whether it sorts ahead of
            # the window (a ticket, a new job) and when it is due. Half the cost of the whole.
            try:
                self.dispatcher.ring(key, CommandHead.model_validate_json(msg.value() or b""))
                return
            except ValidationError:
                pass  # read whole below: counted, and rung by its key
        try:
            cmd = ItemCommand.model_validate_json(msg.value() or b"")
        except ValidationError as exc:
            # Only a doorbell lost: the item, if there is one, is in Postgres. Ring by the key.
            self.bad_commands.inc()
            log.error("unreadable item command at %s[%d]@%d: %s", *tp, msg.offset(), exc)
            if key:
                self.dispatcher.ring(key)
            return
        self.dispatcher.ring(cmd.guid, cmd)

    async def _commit(self) -> None:
        points = {tp: off for tp, off in self.noted.items() if off > self.committed.get(tp, -1)}
        if not points:
            return
        try:
            await self.consumer.commit(_offsets(points))
        except KafkaException as exc:
            # A rebalance in progress: what these offsets cover is read again by whoever owns
            # the partitions next, and only rings for work Postgres holds anyway.
            log.warning("offset commit refused, will retry: %s", exc)
            return
        for tp, off in points.items():
            if tp in self.noted:
                self.committed[tp] = off


def _released_late(fut: Future[None], where: str) -> None:
    """The end of a release the rebalance callback stopped waiting for."""
    if fut.cancelled():
        log.warning("release of the guids of %s cancelled: their leases expire at their TTL", where)
    elif (exc := fut.exception()) is not None:
        log.warning("release of the guids of %s failed: their leases expire at their TTL", where,
                    exc_info=(type(exc), exc, exc.__traceback__))
    else:
        log.info("guids of %s given back, late", where)


def _offsets(points: dict[TP, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p, off) for (t, p), off in points.items()]


def _text(key: bytes | None) -> str | None:
    if not key:
        return None
    try:
        return key.decode()
    except UnicodeDecodeError:
        return None

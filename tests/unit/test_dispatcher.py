"""The per-guid dispatcher: priority lanes, no head-of-line blocking, hot limits, leases."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from pacer_common.domain.commands import ItemCommand
from pacer_sender.core import Executed
from pacer_sender.dispatcher import Dispatcher, Envelope
from pacer_sender.domain.pacing import Limits
from pacer_sender.leases import GuidLeases
from pacer_sender.ports import GuidLease


class GrantAll:
    """A lease store that grants every guid except those listed as held elsewhere."""

    def __init__(self, held_elsewhere: set[str] | None = None) -> None:
        self.held_elsewhere = held_elsewhere or set()
        self.asked = 0

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        self.asked += 1
        now = datetime.now(UTC)
        return [GuidLease(g, 1, None, False, now) for g in guids if g not in self.held_elsewhere]

    async def release(self, guids: Sequence[str], owner: str) -> int:
        return len(guids)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float]] = []

    async def execute(self, cmd: ItemCommand) -> Executed:
        await asyncio.sleep(0)  # as a database or gateway call would, let other guids run
        self.sent.append((cmd.guid, cmd.item_id, time.monotonic()))
        return Executed("confirmed", True)


def cmd(guid: str, n: int, priority: int = 3, job: str = "j") -> ItemCommand:
    return ItemCommand(item_id=f"{guid}-{n}", job_id=job, shard_id=1, guid=guid, to_id=f"r{n}", content="x",
                       idem_key=f"k-{guid}-{n}", priority=priority, kind="campaign")


async def until(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def dispatcher(limits: Limits, store: GrantAll | None = None) -> tuple[Dispatcher, Recorder, dict[str, Limits]]:
    rec = Recorder()
    table: dict[str, Limits] = {}
    d = Dispatcher(rec, lambda g: table.get(g, limits), GuidLeases(store or GrantAll(), "me", 30.0))  # type: ignore[arg-type]
    return d, rec, table


def test_an_auto_reply_does_not_wait_behind_a_campaign_backlog() -> None:
    async def scenario() -> list[str]:
        d, rec, _ = dispatcher(Limits(min_interval_s=0.2, jitter_s=0.0, online_reserve=0.2))
        for n in range(50):
            d.submit(Envelope(("t", 0), n, cmd("g1", n)))
        await until(lambda: len(rec.sent) >= 2)
        d.submit(Envelope(("t", 0), 99, cmd("g1", 99, priority=1)))
        await until(lambda: any(i == "g1-99" for _, i, _ in rec.sent))
        for t in d.workers.values():
            t.cancel()
        return [i for _, i, _ in rec.sent]

    order = asyncio.run(scenario())
    assert order.index("g1-99") <= 3, f"the reply waited behind the backlog: {order}"


def test_a_slow_guid_does_not_hold_up_another_guid() -> None:
    async def scenario() -> list[tuple[str, str, float]]:
        d, rec, table = dispatcher(Limits(min_interval_s=0.0, jitter_s=0.0))
        table["slow"] = Limits(min_interval_s=60.0, jitter_s=0.0)
        for n in range(3):
            d.submit(Envelope(("t", 0), n, cmd("slow", n)))
        for n in range(20):
            d.submit(Envelope(("t", 0), 10 + n, cmd("fast", n)))
        await until(lambda: sum(g == "fast" for g, _, _ in rec.sent) == 20)
        for t in d.workers.values():
            t.cancel()
        return rec.sent

    sent = asyncio.run(scenario())
    assert sum(g == "slow" for g, _, _ in sent) == 1
    assert sum(g == "fast" for g, _, _ in sent) == 20


def test_a_hot_rate_change_applies_to_a_waiting_guid() -> None:
    async def scenario() -> int:
        d, rec, table = dispatcher(Limits(min_interval_s=3600.0, jitter_s=0.0))
        for n in range(5):
            d.submit(Envelope(("t", 0), n, cmd("g", n)))
        await until(lambda: len(rec.sent) == 1)
        table["g"] = Limits(min_interval_s=0.0, jitter_s=0.0)
        d.wake(["g"])  # what the limits book does when guid_limits changes
        await until(lambda: len(rec.sent) == 5, timeout=5.0)
        return len(rec.sent)

    assert asyncio.run(scenario()) == 5


def test_a_guid_held_by_another_sender_waits_and_sends_nothing() -> None:
    async def scenario() -> tuple[int, int]:
        store = GrantAll(held_elsewhere={"g"})
        d, rec, _ = dispatcher(Limits(min_interval_s=0.0, jitter_s=0.0), store)
        d.lease_retry_s = 0.02
        for n in range(3):
            d.submit(Envelope(("t", 0), n, cmd("g", n)))
        await until(lambda: store.asked >= 3)  # it keeps asking for the lease, sending nothing
        before = len(rec.sent)
        store.held_elsewhere.clear()
        await until(lambda: len(rec.sent) == 3)
        return before, len(rec.sent)

    assert asyncio.run(scenario()) == (0, 3)


def test_finished_offsets_commit_in_order_even_when_guids_finish_out_of_order() -> None:
    async def scenario() -> dict:  # type: ignore[type-arg]
        d, rec, table = dispatcher(Limits(min_interval_s=0.0, jitter_s=0.0))
        table["slow"] = Limits(min_interval_s=60.0, jitter_s=0.0)
        d.submit(Envelope(("t", 0), 0, cmd("slow", 0)))
        d.submit(Envelope(("t", 0), 1, cmd("slow", 1)))
        d.submit(Envelope(("t", 0), 2, cmd("fast", 0)))
        await until(lambda: len(rec.sent) == 2)
        points = d.commit_points()
        for t in d.workers.values():
            t.cancel()
        return points

    assert asyncio.run(scenario()) == {("t", 0): 1}, "offset 1 is unfinished: commit stops there"


def test_releasing_partitions_drops_their_queued_items_and_keeps_the_others() -> None:
    async def scenario() -> tuple[dict, int, int, list[str]]:  # type: ignore[type-arg]
        d, rec, table = dispatcher(Limits(min_interval_s=0.0, jitter_s=0.0))
        table["slow"] = Limits(min_interval_s=3600.0, jitter_s=0.0)
        for n in range(3):
            d.submit(Envelope(("t", 0), n, cmd("slow", n)))
        for n in range(3):
            d.submit(Envelope(("t", 1), n, cmd("other", n, job="k")))
        await until(lambda: len(rec.sent) >= 4)  # slow sent one and waits; other sent all
        points = await d.release({("t", 0)})
        await until(lambda: "slow" not in d.workers)
        return points, d.buffered, d.by_tp.get(("t", 0), 0), sorted(d.queues)

    points, buffered, held, queues = asyncio.run(scenario())
    assert points == {("t", 0): 1}, "the two dropped items stay uncommitted for the next owner"
    assert (buffered, held, queues) == (0, 0, [])


def test_releasing_when_nothing_is_queued_is_harmless() -> None:
    async def scenario() -> dict:  # type: ignore[type-arg]
        d, _, _ = dispatcher(Limits())
        return await d.release({("t", 3)})

    assert asyncio.run(scenario()) == {}


def test_guids_asking_for_their_lease_at_once_are_granted_in_one_round_trip() -> None:
    store = GrantAll(held_elsewhere={"g-7"})
    leases = GuidLeases(store, "me", 30.0)  # type: ignore[arg-type]

    async def go() -> list[object]:
        return list(await asyncio.gather(*(leases.acquire(f"g-{i}") for i in range(50))))

    got = asyncio.run(go())
    assert store.asked == 1
    assert [g is None for g in got] == [i == 7 for i in range(50)]
    assert set(leases.held) == {f"g-{i}" for i in range(50)} - {"g-7"}


class SlowGrant(GrantAll):
    """Grants after a moment, and records releases."""

    def __init__(self) -> None:
        super().__init__()
        self.granted = asyncio.Event()
        self.released: list[str] = []

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        await asyncio.sleep(0.01)  # the statement is on its way when the worker is stopped
        got = await super().acquire(guids, owner)
        self.granted.set()
        return got

    async def release(self, guids: Sequence[str], owner: str) -> int:
        self.released.extend(guids)
        return len(guids)


def test_a_lease_taken_for_a_worker_stopped_meanwhile_is_given_back() -> None:
    store = SlowGrant()
    leases = GuidLeases(store, "me", 30.0)  # type: ignore[arg-type]

    async def go() -> None:
        worker = asyncio.ensure_future(leases.acquire("g-1"))
        await asyncio.sleep(0)
        worker.cancel()  # the partition was revoked while the lease was being taken
        await asyncio.wait_for(store.granted.wait(), 5)
        for _ in range(100):
            if store.released:
                break
            await asyncio.sleep(0.01)

    asyncio.run(go())
    assert store.released == ["g-1"]
    assert "g-1" not in leases.held


class GatedRecorder(Recorder):
    """Executes only when let through: a guid stays 'executing' as long as the test likes."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def execute(self, cmd: ItemCommand) -> Executed:
        await self.gate.wait()
        return await super().execute(cmd)


def test_a_guid_executing_when_its_partition_goes_gives_its_lease_back_after_the_item() -> None:
    store = SlowGrant()
    rec = GatedRecorder()
    d = Dispatcher(rec, lambda g: Limits(min_interval_s=0, jitter_s=0),  # type: ignore[arg-type]
                   GuidLeases(store, "me", 30.0))  # type: ignore[arg-type]

    async def go() -> None:
        d.submit(Envelope(("t", 0), 0, cmd("g", 0)))
        await until(lambda: "g" in d.executing)
        await d.release({("t", 0)}, timeout_s=0.05)  # gives up waiting for the item in hand
        assert store.released == []  # in hand: the lease stays while the item runs
        rec.gate.set()
        await until(lambda: store.released == ["g"])

    asyncio.run(go())
    assert "g" not in d.leases.held


class Pending:
    """Postgres as parking reads it: the commands of items still pending."""

    def __init__(self, cmds: list[ItemCommand]) -> None:
        self.by_id = {c.item_id: c for c in cmds}
        self.reads: list[list[str]] = []

    async def __call__(self, item_ids: Sequence[str]) -> list[ItemCommand]:
        self.reads.append(list(item_ids))
        return [self.by_id[i] for i in item_ids if i in self.by_id]


def parking_dispatcher(pending: Pending, cap: int) -> tuple[Dispatcher, Recorder]:
    rec = Recorder()
    d = Dispatcher(rec, lambda g: Limits(min_interval_s=0.0, jitter_s=0.0), GuidLeases(GrantAll(), "me", 30.0),  # type: ignore[arg-type]
                   read_back=pending, guid_cap=cap)
    return d, rec


def test_a_guid_backlog_is_parked_so_its_partition_keeps_room_for_other_guids() -> None:
    backlog = [cmd("g1", n) for n in range(40)]
    pending = Pending(backlog + [cmd("g2", 0)])

    async def scenario() -> tuple[int, int, list[str], dict]:
        d, rec = parking_dispatcher(pending, cap=4)
        for n, c in enumerate(backlog):
            d.submit(Envelope(("t", 0), n, c))
        d.submit(Envelope(("t", 0), 40, cmd("g2", 0)))
        in_memory, parked = d.by_tp[("t", 0)], d.parked_by_tp[("t", 0)]
        await until(lambda: len(rec.sent) == 41)
        await until(lambda: not d.workers)
        return in_memory, parked, [i for _, i, _ in rec.sent], d.commit_points()

    in_memory, parked, sent, points = asyncio.run(scenario())
    assert (in_memory, parked) == (5, 36), "four of g1's commands and g2's in memory, the rest parked"
    assert sorted(sent) == sorted([c.item_id for c in backlog] + ["g2-0"]), "each item once"
    assert [i for i in sent if i.startswith("g1")] == [c.item_id for c in backlog], "g1 in order"
    assert sent.index("g2-0") < 4, "g2 did not wait for g1's backlog"
    assert points == {("t", 0): 41}, "parked offsets commit once their items are done"
    assert all(len(r) <= 4 for r in pending.reads), "read back a guid's cap at a time"


def test_a_parked_item_finished_meanwhile_is_not_sent_and_its_offset_completes() -> None:
    backlog = [cmd("g1", n) for n in range(6)]
    pending = Pending([c for c in backlog if c.item_id != "g1-4"])  # g1-4 was cancelled meanwhile

    async def scenario() -> tuple[list[str], dict]:
        d, rec = parking_dispatcher(pending, cap=2)
        for n, c in enumerate(backlog):
            d.submit(Envelope(("t", 0), n, c))
        await until(lambda: not d.workers)
        return [i for _, i, _ in rec.sent], d.commit_points()

    sent, points = asyncio.run(scenario())
    assert sent == ["g1-0", "g1-1", "g1-2", "g1-3", "g1-5"]
    assert points == {("t", 0): 6}


def test_parked_commands_of_a_revoked_partition_stay_uncommitted_for_the_next_owner() -> None:
    backlog = [cmd("g1", n) for n in range(10)]
    pending = Pending(backlog)
    gate = asyncio.Event

    class Stuck(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.go = gate()

        async def execute(self, c: ItemCommand) -> Executed:
            await self.go.wait()
            return await super().execute(c)

    async def scenario() -> tuple[dict, dict, dict, list[str]]:
        d, _ = parking_dispatcher(pending, cap=2)
        d.executor = stuck = Stuck()  # type: ignore[assignment]
        for n, c in enumerate(backlog):
            d.submit(Envelope(("t", 0), n, c))
        await until(lambda: "g1" in d.executing)
        releasing = asyncio.create_task(d.release({("t", 0)}, timeout_s=5.0))
        await asyncio.sleep(0)
        stuck.go.set()  # the item in hand finishes; nothing else of the partition may start
        points = await releasing
        await until(lambda: not d.workers)
        return points, d.parked, d.parked_by_tp, [i for _, i, _ in stuck.sent]

    points, parked, parked_by_tp, sent = asyncio.run(scenario())
    assert sent == ["g1-0"]
    assert points == {("t", 0): 1}, "only the finished item's offset is committed"
    assert parked == {} and parked_by_tp == {}

"""Priority across a handover and a lost doorbell: a guid's worker reads the head of the guid's
order in Postgres before it sends what its doorbells brought (the previous owner may have
consumed the doorbell of an auto-reply that is still pending), and a sweep that finds an
overdue item the worker neither holds nor means to read makes it read that head at once —
at no more than one read per guid per takeover, and never one per sweep for a busy guid."""

from __future__ import annotations

import asyncio

from pacer_sender.domain.pacing import Limits
from pacer_sender.sweeper import Sweeper
from tests.unit.dispatching import FAST, cmd, dispatcher, name, ring, stop, unchanged_counts, until

REPLY = cmd("g", 0, priority=1, job="reply")  # an auto-reply: the online lane


def _owns_all(guid: str) -> bool:
    return True


def test_a_reply_the_previous_owner_was_rung_for_goes_before_the_doorbells_that_started_the_guid() -> None:
    """The previous owner consumed and committed the reply's doorbell, then lost the partition
    and dropped its window; the reply is pending in Postgres. This sender consumes the guid's
    campaign doorbells before its assignment sweep looks at the guid (which then leaves the
    guid alone: it has a worker, and the reply is not yet overdue). The reply must go first,
    not after the forty campaign items the window was rung for."""
    async def scenario() -> tuple[list[str], list[tuple[str, int]]]:
        d, rec, _ = dispatcher(FAST)
        rec.store.overdue = False
        rec.store.add(REPLY)  # its doorbell went to the previous owner
        for n in range(1, 41):
            ring(d, rec.store, cmd("g", n))  # the doorbells this sender consumed
        await Sweeper(d, rec.store, _owns_all, unchanged_counts, interval_s=20.0).sweep("assign")
        await until(lambda: not d.guids)
        return [i for _, i, _ in rec.sent], rec.store.reads

    sent, reads = asyncio.run(scenario())
    assert sent[0] == name(REPLY.item_id), f"the reply went out as send number {sent.index(name(REPLY.item_id)) + 1}"
    assert sorted(sent) == sorted([name(REPLY.item_id)] + [f"g-{n}" for n in range(1, 41)]), "each item once"
    assert reads == [("g", 50)], f"one read of a whole window, as a worker started by doorbells made before: {reads}"


def test_an_overdue_reply_the_sweep_finds_behind_a_window_that_read_everything_goes_out_next() -> None:
    """The worker has read its queue to the end (``more`` false) and holds forty campaign items
    when a reply is planned and its doorbell lost. The periodic sweep finds the reply overdue:
    the worker must read the head of its order at once, not once its window is down to half.
    The next sweeps find the guid busy reading on and leave it alone (no read per sweep)."""
    async def scenario() -> tuple[list[str], int, int]:
        d, rec, table = dispatcher(FAST)
        table["g"] = Limits(min_interval_s=3600.0, jitter_s=0.0)  # sends one, then waits an hour
        for n in range(1, 42):
            ring(d, rec.store, cmd("g", n))
        window = d.guids["g"].window
        await until(lambda: len(rec.sent) == 1 and len(window) == 40 and not window.more)
        rec.store.add(REPLY)  # its doorbell lost
        # waiting_guids names any one pending item of the guid (LIMIT 1, in no order): the reply
        for item in [i for i in rec.store.pending if i != REPLY.item_id]:
            rec.store.pending[item] = rec.store.pending.pop(item)
        sweeper = Sweeper(d, rec.store, _owns_all, unchanged_counts, interval_s=20.0)
        await sweeper.sweep("periodic")
        await until(lambda: REPLY.item_id in window.ids, timeout=5.0)
        reads = len(rec.store.reads)
        for _ in range(3):
            await sweeper.sweep("periodic")  # the reply is held now: nothing to read
        again = len(rec.store.reads) - reads
        table["g"] = FAST
        d.wake(["g"])
        await until(lambda: len(rec.sent) >= 3)
        stop(d)
        return [i for _, i, _ in rec.sent], again, len(window)

    sent, again, _ = asyncio.run(scenario())
    assert sent[1] == name(REPLY.item_id), f"the reply waited behind the window: {sent}"
    assert again == 0, "a sweep re-read a guid whose worker holds the overdue item"


def test_a_held_guids_doorbells_are_still_tried_when_its_first_read_finds_nothing_ready() -> None:
    """A kicked guid's queue reads nothing from Postgres (next_ready.sql holds it at any depth);
    the items its doorbells brought must still be claimed, each claim saying why it is not sent
    (begin_send marks a held guid's item held, to be published again when the hold is lifted).
    Dropped for the first read and never tried, they stayed pending, unmarked."""
    async def scenario() -> list[str]:
        d, rec, _ = dispatcher(FAST)
        rec.store.held_guids.add("g")
        for n in range(1, 4):
            ring(d, rec.store, cmd("g", n))
        await until(lambda: len(rec.sent) == 3)
        stop(d)
        return [i for _, i, _ in rec.sent]

    assert sorted(asyncio.run(scenario())) == ["g-1", "g-2", "g-3"]

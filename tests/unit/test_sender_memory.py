"""The memory budget of the guids' windows (``flow.Buffer``): refills under way count from the
moment they are asked, and once memory is short a window reads its share of the budget when
it is empty, not one item per send."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pacer_common.domain.commands import CommandHead, ItemCommand
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.pacing import Limits
from pacer_sender.flow import Buffer
from pacer_sender.ports import Ready
from pacer_sender.sweeper import Sweeper
from tests.unit.dispatching import FAST, cmd, dispatcher, stop, unchanged_counts, until
from tests.unit.fakes import InMemoryGuidQueue


def test_a_window_still_holding_work_does_not_read_while_memory_is_short() -> None:
    buffer = Buffer(guid_cap=50, max_buffered=100, windows=lambda: 10)
    buffer.held = 100
    assert buffer.read_size(48, holding=3) == 0, "a window with work to send read while memory was full"


def test_an_empty_window_reads_its_share_of_the_budget_once_memory_is_short() -> None:
    """Read one item at a time, every send of a guid with a deep queue cost a read of its own."""
    buffer = Buffer(guid_cap=50, max_buffered=100, windows=lambda: 10)
    buffer.held = 100
    assert buffer.read_size(48, holding=0) == 10, "not the window's share (100 over 10 windows)"
    buffer.held = 0
    assert buffer.read_size(48, holding=0) == 48, "memory allows the whole window"


def test_refills_under_way_count_against_the_budget_from_the_moment_they_are_asked() -> None:
    """A sender that starts or takes over many guids at once: each asks for its window before
    any read is answered. Counted only once answered, each read its whole window: 40 guids
    with deep queues asked 2,000 items against a budget of 200."""
    async def scenario() -> list[int]:
        d, rec, _ = dispatcher(FAST, cap=50, max_buffered=200)
        guids = [f"deep-{i}" for i in range(40)]
        rec.store.add(*(cmd(g, n) for g in guids for n in range(60)))
        asked: list[int] = []
        answer = asyncio.Event()
        read = rec.store.next_ready

        async def held_back(guid: str, exclude: Sequence[str], limit: int) -> Ready:
            asked.append(limit)
            await answer.wait()  # every read in flight at once, as on a busy database
            return await read(guid, exclude, limit)

        rec.store.next_ready = held_back  # type: ignore[method-assign]  # the same store, its answers held back
        await Sweeper(d, rec.store, lambda g: True, unchanged_counts, interval_s=60.0).sweep("assign")
        await until(lambda: len(asked) == len(guids))
        in_flight = list(asked)  # every moved guid's first read, none answered yet
        answer.set()
        await until(lambda: len(rec.sent) >= len(guids))
        stop(d)
        return in_flight

    asked = asyncio.run(scenario())
    assert sum(asked) <= 2 * 200, f"reads under way asked {sum(asked)} items against a budget of 200: {asked}"
    assert min(asked) >= 200 // 40, f"a window read less than its share of the budget: {asked}"


def _doorbell(d: Dispatcher, store: InMemoryGuidQueue, c: ItemCommand) -> None:
    """A command consumed as ``adapters/kafka.py`` does: read only for its head when its
    guid's batch lane would not hold it."""
    store.add(c)
    d.ring(c.guid, CommandHead.model_validate_json(c.model_dump_json()) if d.full(c.guid) else c)


def test_a_batch_lane_dropped_by_a_doorbell_read_for_its_head_is_counted_out_of_memory() -> None:
    """A new job's doorbell for a guid whose batch lane is full is read only for its head; it
    sorts ahead of the lane (fair share owes the job a turn), which is dropped. Counted only
    around the callers' blocks, those drops were never counted out: each one left up to a
    window of phantom items in ``held`` (the pacer_sender_buffered gauge), until the budget
    read full for ever and no window with work read again."""
    async def scenario() -> tuple[list[tuple[int, int]], int]:
        d, rec, table = dispatcher(FAST, cap=4, max_buffered=1_000)
        table["g"] = Limits(min_interval_s=3600.0, jitter_s=0.0)  # sends one, then waits an hour
        counts: list[tuple[int, int]] = []
        for job in range(20):
            for n in range(6):
                _doorbell(d, rec.store, cmd("g", 100 * job + n, job=f"job-{job}"))
            window = d.guids["g"].window
            await until(lambda w=window: not w.urgent and not d.crew.buffer.reading)  # its head read is in
            counts.append((d.buffered, sum(len(w.window) for w in d.guids.values())))
        await d.release(lambda g: True)
        return counts, d.buffered

    counts, after = asyncio.run(scenario())
    assert all(held == true for held, true in counts), f"held drifted from what the windows hold: {counts}"
    assert after == 0, f"{after} items counted as held after every window was dropped"

"""Requests made in the same instant go to the database as one batch, results kept apart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from pacer_common.db.batching import Batcher


def _recording() -> tuple[list[list[int]], Callable[[Sequence[int]], Awaitable[list[int]]]]:
    """A run_many that answers each request with itself, and the batches it was given."""
    calls: list[list[int]] = []

    async def run_many(reqs: Sequence[int]) -> list[int]:
        calls.append(list(reqs))
        return list(reqs)

    return calls, run_many


def test_requests_made_together_run_as_one_batch_and_each_gets_its_own_result() -> None:
    calls: list[list[int]] = []

    async def run_many(reqs: Sequence[int]) -> list[int]:
        calls.append(list(reqs))
        return [r * 10 for r in reqs]

    async def scenario() -> list[int]:
        b: Batcher[int, int] = Batcher(run_many)
        return await asyncio.gather(*(b.submit(i) for i in range(50)))

    assert asyncio.run(scenario()) == [i * 10 for i in range(50)]
    assert calls == [list(range(50))]


def test_batches_are_capped() -> None:
    sizes: list[int] = []

    async def run_many(reqs: Sequence[int]) -> list[int]:
        sizes.append(len(reqs))
        return list(reqs)

    async def scenario() -> None:
        b: Batcher[int, int] = Batcher(run_many, max_batch=20)
        await asyncio.gather(*(b.submit(i) for i in range(50)))

    asyncio.run(scenario())
    assert sizes == [20, 20, 10]


def test_a_failed_batch_fails_every_request_in_it() -> None:
    async def run_many(reqs: Sequence[int]) -> list[int]:
        raise RuntimeError("database gone")

    async def scenario() -> list[object]:
        b: Batcher[int, int] = Batcher(run_many)
        return await asyncio.gather(*(b.submit(i) for i in range(3)), return_exceptions=True)

    results = asyncio.run(scenario())
    assert all(isinstance(r, RuntimeError) for r in results)


def test_requests_after_a_batch_started_go_in_the_next_one() -> None:
    calls: list[list[int]] = []

    async def run_many(reqs: Sequence[int]) -> list[int]:
        calls.append(list(reqs))
        await asyncio.sleep(0)
        return list(reqs)

    async def scenario() -> None:
        b: Batcher[int, int] = Batcher(run_many)
        first = asyncio.gather(b.submit(1), b.submit(2))
        await asyncio.sleep(0)
        await asyncio.gather(first, b.submit(3))

    asyncio.run(scenario())
    assert calls == [[1, 2], [3]]


def test_what_is_asked_while_batches_run_waits_and_goes_as_one_batch() -> None:
    calls: list[list[int]] = []
    release = asyncio.Event()

    async def run_many(reqs: Sequence[int]) -> list[int]:
        calls.append(list(reqs))
        await release.wait()
        return list(reqs)

    async def scenario() -> list[int]:
        b: Batcher[int, int] = Batcher(run_many, max_running=1)
        first = asyncio.ensure_future(b.submit(0))
        for _ in range(100):  # until the first batch is running (a few loop turns)
            if calls:
                break
            await asyncio.sleep(0)
        assert calls == [[0]], "the first batch never started"
        later = []
        for i in range(1, 6):  # asked one by one, in separate loop turns, while the first batch runs
            later.append(asyncio.ensure_future(b.submit(i)))
            for _ in range(3):
                await asyncio.sleep(0)
        assert calls == [[0]], "nothing more may start while max_running batches are in flight"
        release.set()
        return list(await asyncio.gather(first, *later))

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4, 5]
    assert calls == [[0], [1, 2, 3, 4, 5]]


def test_a_request_lingers_for_others_asked_meanwhile_and_they_go_as_one_batch() -> None:
    calls: list[list[int]] = []
    linger_s = 0.5

    async def run_many(reqs: Sequence[int]) -> list[int]:
        calls.append(list(reqs))
        return list(reqs)

    async def scenario() -> float:
        b: Batcher[int, int] = Batcher(run_many, linger_s=linger_s)
        began = time.monotonic()
        first = asyncio.ensure_future(b.submit(1))
        await asyncio.wait_for(_loop_turns(5), 10)  # without the linger, 1 would have gone alone by now
        assert calls == [], "a batch started before its linger was over"
        await asyncio.gather(first, b.submit(2))
        return time.monotonic() - began

    took = asyncio.run(scenario())
    assert calls == [[1, 2]]
    assert took >= linger_s * 0.9, took


def test_a_full_batch_goes_at_once_whatever_the_linger() -> None:
    calls, run_many = _recording()

    async def scenario() -> list[int]:
        b: Batcher[int, int] = Batcher(run_many, max_batch=3, linger_s=600)
        return list(await asyncio.wait_for(asyncio.gather(*(b.submit(i) for i in range(3))), 10))

    assert asyncio.run(scenario()) == [0, 1, 2]
    assert calls == [[0, 1, 2]]


def _loop_turns(n: int) -> asyncio.Future[None]:
    """Done once the event loop has run ``n`` more turns (each turn runs what the previous
    one scheduled with call_soon, as the batcher's start is)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def turn(left: int) -> None:
        if left == 0:
            done.set_result(None)
        else:
            loop.call_soon(turn, left - 1)

    loop.call_soon(turn, n)
    return done


def test_a_request_with_time_to_spare_waits_longer_and_goes_with_an_earlier_batch() -> None:
    """A request's own linger: a long one waits past the batcher's, and rides along with a
    batch that another request's shorter linger starts first."""
    calls, run_many = _recording()

    async def scenario() -> None:
        b: Batcher[int, int] = Batcher(run_many, linger_s=0.0)
        spare = asyncio.ensure_future(b.submit(1, linger_s=600))
        await asyncio.wait_for(_loop_turns(5), 10)  # past the batcher's own linger of 0
        assert calls == [], "a request with time to spare went at the batcher's own linger"
        await asyncio.wait_for(asyncio.gather(spare, b.submit(2)), 10)  # 2 is due at once: 1 goes with it

    asyncio.run(scenario())
    assert calls == [[1, 2]]


def test_a_batch_starts_when_its_first_request_is_due_not_its_first_asked() -> None:
    calls, run_many = _recording()

    async def scenario() -> None:
        b: Batcher[int, int] = Batcher(run_many, linger_s=600)
        first = asyncio.ensure_future(b.submit(1))  # due in 600 s
        await asyncio.wait_for(asyncio.gather(first, b.submit(2, linger_s=0.0)), 10)

    asyncio.run(scenario())
    assert calls == [[1, 2]]


def test_what_gathered_while_a_batch_ran_goes_when_the_first_of_it_is_due() -> None:
    calls: list[list[int]] = []
    release = asyncio.Event()

    async def run_many(reqs: Sequence[int]) -> list[int]:
        calls.append(list(reqs))
        if reqs == [0]:
            await release.wait()
        return list(reqs)

    async def scenario() -> None:
        b: Batcher[int, int] = Batcher(run_many, max_running=1, linger_s=0.0)
        first = asyncio.ensure_future(b.submit(0))
        await asyncio.wait_for(_loop_turns(5), 10)
        assert calls == [[0]]
        later = [asyncio.ensure_future(b.submit(1, linger_s=600)), asyncio.ensure_future(b.submit(2))]
        await asyncio.wait_for(_loop_turns(5), 10)
        release.set()
        await asyncio.wait_for(asyncio.gather(first, *later), 10)

    asyncio.run(scenario())
    assert calls == [[0], [1, 2]]

"""The guid worker's wake-up: a timed sleep that a ring ends early, with Event semantics."""

from __future__ import annotations

import asyncio
import time

import pytest

from pacer_sender.wakeup import WakeUp


def test_a_sleep_nobody_rings_lasts_its_time() -> None:
    async def go() -> tuple[bool, float]:
        w = WakeUp()
        t0 = time.monotonic()
        rung = await w.sleep(0.05)
        return rung, time.monotonic() - t0

    rung, took = asyncio.run(go())
    assert not rung and took >= 0.05


def test_a_ring_ends_a_sleep_early_and_stays_rung_until_cleared() -> None:
    async def go() -> tuple[bool, bool, bool]:
        w = WakeUp()
        asyncio.get_running_loop().call_later(0.01, w.set)
        rung = await asyncio.wait_for(w.sleep(30.0), timeout=5.0)
        again = await asyncio.wait_for(w.sleep(30.0), timeout=5.0)  # still rung: at once
        w.clear()
        after_clear = await w.sleep(0.01)
        return rung, again, after_clear

    assert asyncio.run(go()) == (True, True, False)


def test_a_zero_sleep_still_lets_other_tasks_run() -> None:
    async def go() -> list[str]:
        order: list[str] = []

        async def other() -> None:
            order.append("other")

        task = asyncio.create_task(other())
        await WakeUp().sleep(0)
        order.append("after sleep")
        await task
        return order

    assert asyncio.run(go()) == ["other", "after sleep"]


def test_cancelling_a_sleep_cancels_its_timer_and_a_later_ring_is_harmless() -> None:
    async def go() -> int:
        loop = asyncio.get_running_loop()
        w = WakeUp()
        task = asyncio.create_task(w.sleep(30.0))
        await asyncio.sleep(0)
        timers = len(loop._scheduled)  # type: ignore[attr-defined]  # the loop's pending timers, to see ours go
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        w.set()
        return timers - sum(1 for h in loop._scheduled if not h.cancelled())  # type: ignore[attr-defined]

    assert asyncio.run(go()) == 1

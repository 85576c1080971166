"""A guid worker's wake-up: sleep until a moment, or until rung, whichever comes first.

``asyncio.wait_for(event.wait(), timeout)`` costs a task, two futures, a timer, callbacks and,
on every timeout, a cancellation that takes another pass of the event loop. A sender keeps a
worker per guid, nearly all of them asleep in their pacing gap, so at 10,000 guids those
sleeps were the largest share of its CPU (docs/performance.md, "What bounds bench scale").
This is one future and one timer handle per sleep, with the semantics of ``asyncio.Event``
that the worker relied on: a ring stays rung until cleared.
"""

from __future__ import annotations

import asyncio


class WakeUp:
    __slots__ = ("_rung", "_waiter")

    def __init__(self) -> None:
        self._rung = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        """Ring: a sleep in progress ends now; the next one returns at once until cleared."""
        self._rung = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._rung = False

    def is_set(self) -> bool:
        return self._rung

    async def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds`` or until rung; True if rung. Always yields to the event loop once."""
        if self._rung or seconds <= 0:
            await asyncio.sleep(0)
            return self._rung
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(seconds, _ring_out, waiter)
        self._waiter = waiter
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        return self._rung


def _ring_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)

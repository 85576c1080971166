"""Gather requests made in the same instant and run them as one statement.

Per-guid workers each ask for one item step at a time; with hundreds of guids ready at
once, sending those steps to Postgres together turns hundreds of round trips (and
commits) into one, while each caller still awaits its own result.

At most ``max_running`` batches are in flight at a time; what is asked meanwhile waits and
goes as the next batch. Under sustained load (workers paced apart, each asking on its own)
requests then gather while a statement runs, instead of each going as a statement of its
own: the client's cost per statement (py-spy: the psycopg pipeline was 26% of a sender's
CPU) is shared by more items, and the wait is at most the statements in flight.

Below that load, at a human pace (10,000 guids at one send per 10 s: a thousand steps a second
of each kind, each statement done in a millisecond or two), nothing gathers while a statement
runs and batches held three items. ``linger_s`` then lets a request wait that long for others
before its batch starts, as Kafka's ``linger.ms`` does for a producer's batch: the fixed cost
of a statement, in the client and in Postgres, is shared by the items that arrive in that
time (docs/performance.md, "Steps at a human pace"). A batch starts without waiting once it is
full (``max_batch``); nothing waits longer than ``linger_s`` while a slot is free.

A request whose caller has time to spare may say so (``submit(request, linger_s)``): it
waits that long instead, and goes sooner with any batch that starts meanwhile. A batch starts
when the first of its requests is due.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Req = TypeVar("Req")
Res = TypeVar("Res")


class Batcher(Generic[Req, Res]):
    def __init__(self, run_many: Callable[[Sequence[Req]], Awaitable[Sequence[Res]]], max_batch: int = 500,
                 max_running: int = 4, linger_s: float = 0.0) -> None:
        self.run_many = run_many
        self.max_batch = max_batch
        self.max_running = max_running
        self.linger_s = linger_s
        self._running = 0
        self._pending: list[tuple[Req, asyncio.Future[Res], float]] = []  # request, its result, due at
        self._start_at: float | None = None  # when _start is due, if scheduled
        self._handle: asyncio.Handle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, request: Req, linger_s: float | None = None) -> Res:
        """``request``'s result, once its batch has run: the batch starts within ``linger_s``
        (the batcher's own linger if None) while a slot is free, at once if full."""
        fut: asyncio.Future[Res] = asyncio.get_running_loop().create_future()
        now = time.monotonic()
        due = now + (self.linger_s if linger_s is None else linger_s)
        self._pending.append((request, fut, due))
        # After every worker that is ready now has asked, and the linger; a full batch at once.
        self._schedule(now if len(self._pending) >= self.max_batch else due)
        return await fut

    def _schedule(self, at: float) -> None:
        """Run _start at ``at`` (on the next loop turn if it has passed), unless it is already
        due no later."""
        if self._start_at is not None and self._start_at <= at:
            return
        if self._handle is not None:
            self._handle.cancel()
        loop = asyncio.get_running_loop()
        delay = at - time.monotonic()
        self._start_at = at
        self._handle = loop.call_later(delay, self._start) if delay > 0 else loop.call_soon(self._start)

    def _start(self) -> None:
        self._start_at = self._handle = None
        while self._pending and self._running < self.max_running:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
            self._running += 1
            task = asyncio.create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._running -= 1
        if self._pending:  # what gathered meanwhile goes next, once the first of it is due
            self._schedule(min(due for _, _, due in self._pending))

    async def _run(self, batch: list[tuple[Req, asyncio.Future[Res], float]]) -> None:
        try:
            results = await self.run_many([r for r, _, _ in batch])
        except BaseException as exc:  # every caller sees the failure of its batch
            for _, fut, _ in batch:
                if not fut.done():
                    fut.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, fut, _), result in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(result)

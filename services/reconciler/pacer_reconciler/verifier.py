"""Verification of in-doubt sends, apart from the event tail.

Each in-doubt item gets one gateway lookup at a time, at most ``concurrency`` at once, each
cut off after ``timeout_s``. The lookups run in tasks of their own, so a gateway that hangs
or crawls holds up nothing but verification: the tail, outcomes, projections, re-dispatch
and lease takeovers go on. While a round's read still lists items it had no free slot for,
the next round starts as soon as a lookup finishes, so verification goes as fast as the
gateway answers; only a round with nothing left to start waits the sweep interval. A lookup
that times out or fails is "no answer yet": the item stays in doubt and is asked again no
sooner than a sweep interval later (the rounds in between pass over it and read past it, so
it holds no newer item back), until ``verify_deadline_s`` makes it ``unverified``. It never
counts as proof of non-delivery. The deadline is applied by the resolution itself: while
reading the in-doubt items or writing their resolution fails (the database), nothing is
decided, not even ``unverified``; each failure is counted by step (``errors``, exported as
``pacer_reconciler_verifier_errors_total``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

from pacer_reconciler.ports import DeliveryLookup, InDoubt, Sweeps

log = logging.getLogger(__name__)
LOOKUP_RESULTS = ("found", "not_found", "unknown", "timeout", "error")
# Steps that can fail: a round's read of the in-doubt items, an item's resolution (its outcome written).
VERIFY_STEPS = ("read", "resolve")


class Verifier:
    def __init__(self, sweeps: Sweeps, lookup: DeliveryLookup, *, concurrency: int = 16, timeout_s: float = 5.0,
                 limit: int = 200, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        if concurrency < 1 or timeout_s <= 0:
            raise ValueError("verifier: concurrency >= 1 and timeout_s > 0")
        self.sweeps = sweeps
        self.lookup = lookup
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.limit = limit
        self.clock = clock
        self.lookups: Counter[str] = Counter()  # by LOOKUP_RESULTS
        self.resolved: Counter[str] = Counter()  # by the status an item moved to
        self.errors: Counter[str] = Counter()  # by VERIFY_STEPS: what failed (database down, a bug)
        self._tasks: dict[str, asyncio.Task[None]] = {}  # item_id → its lookup
        # item_id → the episode (InDoubt.since) of a lookup that finished during this round's
        # read: the read may predate its resolution, and must not start a second lookup for it.
        self._finished: dict[str, datetime] = {}
        # item_id → (episode, loop time before which it is not asked again): items whose lookup
        # left them in doubt. Only those answered within the last ``again_after_s`` are kept.
        self._waiting: dict[str, tuple[datetime, float]] = {}
        self.again_after_s = 0.0  # run() sets it to its interval: an item left in doubt waits that long
        self._freed = asyncio.Event()  # a lookup finished since the last round began
        self._more = False  # the last round's read listed items it had no free slot for

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def start_round(self) -> int:
        """Start lookups for in-doubt items not already being looked up, nor left in doubt by
        a lookup within the last ``again_after_s``, up to the free slots; returns how many
        started. Never waits for a lookup."""
        self._freed.clear()
        self._more = False
        free = self.concurrency - len(self._tasks)
        if free <= 0:
            self._more = True  # every slot busy: the next round comes when one frees
            return 0
        now = asyncio.get_running_loop().time()
        self._waiting = {k: w for k, w in self._waiting.items() if w[1] > now}
        started = 0
        self._finished = {}  # lookups resolved before this read began: the read sees their outcome
        # Read past the items this round passes over (in flight, or waiting to be asked
        # again), so those at the head of the oldest-first read hold no other back.
        for item in await self.sweeps.in_doubt(self.limit + len(self._tasks) + len(self._waiting)):
            if item.item_id in self._tasks:
                continue
            if (done := self._finished.get(item.item_id)) is not None and item.since <= done:
                continue  # an episode whose lookup finished while this round read: next round sees it as it is
            if (w := self._waiting.get(item.item_id)) is not None and item.since <= w[0]:
                continue  # left in doubt a moment ago: asked again once its wait is over
            if started >= free:
                self._more = True
                break
            task = asyncio.create_task(self._verify(item), name=f"verify:{item.item_id}")
            self._tasks[item.item_id] = task
            task.add_done_callback(functools.partial(self._forget, item))
            started += 1
        return started

    def _forget(self, item: InDoubt, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(item.item_id, None)
        self._finished[item.item_id] = item.since
        self._freed.set()

    async def _verify(self, item: InDoubt) -> None:
        found: bool | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                found = await self.lookup.lookup(item.guid, item.idem_key, tenant=item.tenant)
            self.lookups[{True: "found", False: "not_found", None: "unknown"}[found]] += 1
        except TimeoutError:
            self.lookups["timeout"] += 1
        except Exception:
            log.exception("lookup of item %s failed; it stays in doubt", item.item_id)
            self.lookups["error"] += 1
        try:
            # found is None after a timeout: only the verify deadline can decide then.
            result = await self.sweeps.resolve(item, found, self.clock())
        except Exception:
            log.exception("resolving item %s failed; it stays in doubt and is asked again", item.item_id)
            self.errors["resolve"] += 1
            self._ask_later(item)
            return
        if result:
            self.resolved[result] += 1
        else:
            self._ask_later(item)

    def _ask_later(self, item: InDoubt) -> None:
        if self.again_after_s > 0:
            self._waiting[item.item_id] = (item.since, asyncio.get_running_loop().time() + self.again_after_s)

    async def run(self, stop: asyncio.Event, may_work: Callable[[], bool], interval_s: float) -> None:
        """Start rounds while ``may_work()`` (the leader), until ``stop``: the next as soon as
        a lookup finishes while the last read listed items it had no slot for, else after
        ``interval_s``. An item left in doubt is asked again no sooner than ``interval_s``
        after its answer. A failing round (database down, a bug) is logged and the next one
        comes anyway."""
        self.again_after_s = interval_s
        failures = 0
        try:
            while not stop.is_set():
                delay, more = interval_s, False
                if may_work():
                    try:
                        await self.start_round()
                        failures = 0
                        more = self._more
                    except Exception:
                        failures += 1
                        self.errors["read"] += 1
                        delay = min(30.0, interval_s * 2 ** min(failures, 6))
                        log.exception("verification round failed; next in %.1fs", delay)
                await self._pause(stop, delay, self._freed if more else None)
        finally:
            await self.close()

    @staticmethod
    async def _pause(stop: asyncio.Event, delay: float, freed: asyncio.Event | None) -> None:
        """Until ``stop``, ``freed`` (when given) or ``delay`` seconds, whichever comes first."""
        waits = [asyncio.ensure_future(stop.wait())] + ([asyncio.ensure_future(freed.wait())] if freed else [])
        try:
            await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

"""Verification of in-doubt sends, apart from the event tail.

Each in-doubt item gets one gateway lookup at a time, at most ``concurrency`` at once, each
cut off after ``timeout_s``. The lookups run in tasks of their own, so a gateway that hangs
or crawls holds up nothing but verification: the tail, outcomes, projections, re-dispatch
and lease takeovers go on. A lookup that times out or fails is "no answer yet": the item
stays in doubt and is asked again next round, until ``verify_deadline_s`` makes it
``unverified``. It never counts as proof of non-delivery. The deadline is applied by the
resolution itself: while reading the in-doubt items or writing their resolution fails (the
database), nothing is decided, not even ``unverified``; each failure is counted by step
(``errors``, exported as ``pacer_reconciler_verifier_errors_total``).
"""

from __future__ import annotations

import asyncio
import contextlib
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

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def start_round(self) -> int:
        """Start lookups for in-doubt items not already being looked up, up to the free
        slots; returns how many started. Never waits for a lookup."""
        free = self.concurrency - len(self._tasks)
        if free <= 0:
            return 0
        started = 0
        self._finished = {}  # lookups resolved before this read began: the read sees their outcome
        for item in await self.sweeps.in_doubt(self.limit):
            if started >= free:
                break
            if item.item_id in self._tasks:
                continue
            if (done := self._finished.get(item.item_id)) is not None and item.since <= done:
                continue  # an episode whose lookup finished while this round read: next round sees it as it is
            task = asyncio.create_task(self._verify(item), name=f"verify:{item.item_id}")
            self._tasks[item.item_id] = task
            task.add_done_callback(functools.partial(self._forget, item))
            started += 1
        return started

    def _forget(self, item: InDoubt, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(item.item_id, None)
        self._finished[item.item_id] = item.since

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
            return
        if result:
            self.resolved[result] += 1

    async def run(self, stop: asyncio.Event, may_work: Callable[[], bool], interval_s: float) -> None:
        """Start rounds every ``interval_s`` while ``may_work()`` (the leader), until ``stop``.
        A failing round (database down, a bug) is logged and the next one comes anyway."""
        failures = 0
        try:
            while not stop.is_set():
                delay = interval_s
                if may_work():
                    try:
                        await self.start_round()
                        failures = 0
                    except Exception:
                        failures += 1
                        self.errors["read"] += 1
                        delay = min(30.0, interval_s * 2 ** min(failures, 6))
                        log.exception("verification round failed; next in %.1fs", delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
        finally:
            await self.close()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

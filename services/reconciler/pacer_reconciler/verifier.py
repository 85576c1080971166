"""Verification of in-doubt sends, apart from the event tail.

Each in-doubt item gets one gateway lookup at a time, at most ``concurrency`` at once, each
cut off after ``timeout_s``. The lookups run in tasks of their own, so a gateway that hangs
or crawls holds up nothing but verification: the tail, outcomes, projections, re-dispatch
and lease takeovers go on. While a round's read still lists items it had no free slot for,
the next round starts as soon as a lookup settles its item (the gateway said delivered, or
not delivered), so verification goes as fast as the gateway answers. A lookup that gets no
such answer starts no round (its slot serves whichever round comes next, else the one a sweep
interval later), so a gateway that fails fast (refuses connections, or answers "cannot say"
at once) gets at most ``concurrency`` lookups an interval, not one after another without
pause. No lookup is made of a guid while the quiet a gateway asked of it lasts (its lease
row's, which the sender answered writes: ``Sweeps.in_doubt`` does not return such an item
while the quiet lasts), and a lookup the gateway refuses so (``Hushed``) writes its quiet there
(``quiets``), for the guid's senders. Such an item is not decided until the quiet is over, so
no verify deadline makes it ``unverified`` without a lookup; but at most :data:`QUIET_HOLD`
from the start of its episode: a guid the gateway keeps limiting cannot hold it in doubt for
ever (read past the hold, ``InDoubt.quiet_s`` says its guid is still quiet; a quiet with at
most :data:`QUIET_GRACE_S` left is waited out, within as long past the hold, and the item
looked up then, once). A
lookup that times out, fails or cannot say is "no answer yet": the item stays in doubt and is
asked again no sooner than a sweep interval later, and after the items of the round's read
not yet left in doubt, until ``verify_deadline_s`` makes it ``unverified``.
Rounds read past the items they pass over or put last, at most ``READ_PAST`` times
``concurrency`` rows further, so those hold no newer item back. It never counts as proof of
non-delivery. The deadline is applied by the resolution itself: while reading the in-doubt
items or writing their resolution fails (the database), nothing is decided, not even
``unverified``; each failure is counted by step (``errors``, exported as
``pacer_reconciler_verifier_errors_total``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from pacer_common.domain.failures import RETRY_AFTER_MAX, Hushed
from pacer_reconciler.ports import DeliveryLookup, InDoubt, Quiets, Sweeps

log = logging.getLogger(__name__)
LOOKUP_RESULTS = ("found", "not_found", "unknown", "timeout", "error", "quiet")
# Steps that can fail: a round's read of the in-doubt items, an item's resolution (its outcome
# written), a gateway's quiet written to the guid's lease row.
VERIFY_STEPS = ("read", "resolve", "quiet")
# A round reads ``limit`` rows and, past the items it passes over (in flight) or puts last (left
# in doubt by a lookup), at most this many times ``concurrency`` rows more: a round's read stays
# bounded however many items get no answer. Lookups with no answer start no round, so a gateway
# that never answers leaves at most ``concurrency`` items in doubt an interval (two intervals'
# worth waiting at once); more pile up only while other lookups settle items and start rounds.
READ_PAST = 4
# A quiet a gateway asked of an item's guid holds the item's decision off, the verify deadline
# included, at most this long from the start of its episode in doubt (the longest quiet a
# gateway may ask): a guid the gateway keeps limiting cannot keep an item in doubt for ever.
QUIET_HOLD = RETRY_AFTER_MAX
# Past the hold, a quiet with at most this long left is waited out and the item looked up.
QUIET_GRACE_S = 60.0  # and only within as long past the hold


class Verifier:
    def __init__(self, sweeps: Sweeps, lookup: DeliveryLookup, *, concurrency: int = 16, timeout_s: float = 5.0,
                 limit: int = 200, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 quiets: Quiets | None = None) -> None:
        if concurrency < 1 or timeout_s <= 0:
            raise ValueError("verifier: concurrency >= 1 and timeout_s > 0")
        self.sweeps = sweeps
        self.lookup = lookup
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.limit = limit
        self.clock = clock
        self.quiets = quiets  # where a quiet a lookup was asked for is kept for the guid's senders
        self.lookups: Counter[str] = Counter()  # by LOOKUP_RESULTS
        self.resolved: Counter[str] = Counter()  # by the status an item moved to
        self.errors: Counter[str] = Counter()  # by VERIFY_STEPS: what failed (database down, a bug)
        self._tasks: dict[str, asyncio.Task[bool]] = {}  # item_id → its lookup: True if it settled the item
        # item_id → the episode (InDoubt.since) of a lookup that finished during this round's
        # read: the read may predate its resolution, and must not start a second lookup for it.
        self._finished: dict[str, datetime] = {}
        # item_id → (episode, loop time of the answer): items a lookup left in doubt, kept while
        # the rounds' reads list them or their wait is not over. Asked again ``again_after_s``
        # after that answer at the soonest, and after the items of a round's read never left in doubt.
        self._left: dict[str, tuple[datetime, float]] = {}
        self.again_after_s = 0.0  # run() sets it to its interval: an item left in doubt waits that long
        self.read_past = READ_PAST * concurrency  # the most rows a round reads beyond ``limit``
        self._freed = asyncio.Event()  # a lookup settled its item since the last round began
        self._more = False  # the last round's read listed items it had no free slot for

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def start_round(self) -> int:
        """Start lookups for in-doubt items not already being looked up, nor left in doubt by
        a lookup within the last ``again_after_s``, up to the free slots: first the items no
        lookup left in doubt, oldest first, then those left in doubt longest ago. Returns how
        many started. Never waits for a lookup."""
        self._freed.clear()
        self._more = False
        free = self.concurrency - len(self._tasks)
        if free <= 0:
            self._more = True  # every slot busy: the next round comes when one settles its item
            return 0
        self._finished = {}  # lookups resolved before this read began: the read sees their outcome
        # Read past the items this round passes over (in flight) or puts last (left in doubt),
        # so those at the head of the oldest-first read hold no other back; bounded, whatever
        # the count of those.
        past = len(self._tasks) + len(self._left.keys() - self._tasks.keys())
        items = await self.sweeps.in_doubt(self.limit + min(past, self.read_past))
        now = asyncio.get_running_loop().time()
        listed = {item.item_id for item in items}
        # Items no longer listed are resolved or out of reach: kept only until their wait is over.
        self._left = {k: v for k, v in self._left.items() if k in listed or v[1] + self.again_after_s > now}
        fresh: list[InDoubt] = []
        again: list[tuple[float, InDoubt]] = []
        for item in items:
            if item.item_id in self._tasks:
                continue
            if (done := self._finished.get(item.item_id)) is not None and item.since <= done:
                continue  # an episode whose lookup finished while this round read: next round sees it as it is
            if (left := self._left.get(item.item_id)) is None or item.since > left[0]:
                fresh.append(item)
            elif left[1] + self.again_after_s <= now:
                again.append((left[1], item))
            # else: left in doubt a moment ago; asked again once its wait is over
        again.sort(key=lambda a: a[0])
        queue = fresh + [item for _, item in again]
        self._more = len(queue) > free
        for item in queue[:free]:
            task = asyncio.create_task(self._verify(item), name=f"verify:{item.item_id}")
            self._tasks[item.item_id] = task
            task.add_done_callback(functools.partial(self._forget, item))
        return min(len(queue), free)

    def _forget(self, item: InDoubt, task: asyncio.Task[bool]) -> None:
        self._tasks.pop(item.item_id, None)
        self._finished[item.item_id] = item.since
        # Only a lookup that settled its item starts the next round early: one that failed or
        # got no answer frees a slot for whichever round comes next.
        if not task.cancelled() and task.exception() is None and task.result():
            self._freed.set()

    async def _verify(self, item: InDoubt) -> bool:
        """Look the item up and resolve it; True if the gateway's answer settled it."""
        if item.quiet_s:  # read past QUIET_HOLD with its guid still quiet
            if item.quiet_s <= QUIET_GRACE_S and self.clock() - item.since < QUIET_HOLD + timedelta(seconds=QUIET_GRACE_S):
                # Not made unverified for a quiet about to end: asked again (``again_after_s``
                # later) until it is over, and looked up then. Once: the hold is past, so a
                # lookup the gateway asks for quiet again decides it without another; and
                # within the grace past the hold, however often a short quiet comes back.
                self._ask_later(item)
                return False
            self.lookups["quiet"] += 1  # longer: decided without a lookup
            found: bool | Hushed | None = None
        else:
            found = await self._look_up(item)
        if isinstance(found, Hushed):
            self.lookups["quiet"] += 1
            if self._held_off(item):
                # The gateway asked for no call of the guid yet: nothing is decided, not even
                # the verify deadline (no lookup could be made); asked again after its wait.
                self._ask_later(item)
                return False
            item, found = replace(item, quiet_s=found.seconds), None  # decided as a quiet item
        try:
            # found is None after a timeout: only the verify deadline can decide then.
            result = await self.sweeps.resolve(item, found, self.clock())
        except Exception:
            log.exception("resolving item %s failed; it stays in doubt and is asked again", item.item_id)
            self.errors["resolve"] += 1
            self._ask_later(item)
            return False
        if result:
            self.resolved[result] += 1
            return found is not None  # unverified past its deadline is no answer of the gateway's
        self._ask_later(item)
        return False

    async def _look_up(self, item: InDoubt) -> bool | Hushed | None:
        """The gateway's answer: delivered, not delivered, :class:`Hushed` (it asked for quiet
        on the guid), or None (it cannot say, did not answer in time, or the lookup failed)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                found = await self.lookup.lookup(item.guid, item.idem_key, tenant=item.tenant)
        except TimeoutError:
            self.lookups["timeout"] += 1
            return None
        except Exception:
            log.exception("lookup of item %s failed; it stays in doubt", item.item_id)
            self.lookups["error"] += 1
            return None
        if isinstance(found, Hushed):
            await self._keep_quiet(item.guid, found.seconds)
            return found
        self.lookups[{True: "found", False: "not_found", None: "unknown"}[found]] += 1
        return found

    async def _keep_quiet(self, guid: str, seconds: float) -> None:
        """The gateway asked a lookup of ``guid`` for quiet: the guid's lease row keeps it, so
        the senders of the guid make no call of it either (the lookup client keeps it for the
        lookups in any case)."""
        if self.quiets is None:
            return
        try:
            await self.quiets.keep_quiet(guid, seconds)
        except Exception:
            log.exception("the gateway's quiet on guid %s not kept on its lease row", guid)
            self.errors["quiet"] += 1

    def _held_off(self, item: InDoubt) -> bool:
        """Whether a quiet of the item's guid still holds the item's decision off (QUIET_HOLD)."""
        return self.clock() - item.since < QUIET_HOLD

    def _ask_later(self, item: InDoubt) -> None:
        self._left[item.item_id] = (item.since, asyncio.get_running_loop().time())

    async def run(self, stop: asyncio.Event, may_work: Callable[[], bool], interval_s: float) -> None:
        """Start rounds while ``may_work()`` (the leader), until ``stop``: the next as soon as
        a lookup settles its item while the last read listed items it had no slot for, else
        after ``interval_s``. An item left in doubt is asked again no sooner than ``interval_s``
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

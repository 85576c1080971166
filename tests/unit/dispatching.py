"""Helpers for driving a Dispatcher in unit tests: an executor that records what it sent,
commands, a dispatcher built on the fakes of ``fakes.py`` (a lease store that grants all,
the in-memory guid queue), and an event loop on virtual time (:func:`run_virtual`).

The dispatcher these build paces by the recorder's clock, which reads the running loop's
time: on a loop of ``asyncio.run`` that is ``time.monotonic()``, as in production; on the
virtual loop it is the loop's own virtual time, so the gaps a test measures are exactly the
gaps the dispatcher kept, whatever the machine's load."""

from __future__ import annotations

import asyncio
import selectors
import uuid
from collections.abc import Coroutine, Sequence
from datetime import datetime
from typing import Any, TypeVar

from pacer_common.domain.commands import ItemCommand
from pacer_sender.core import BeforeCall as CoreBeforeCall
from pacer_sender.core import Executed
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.pacing import Limits
from pacer_sender.leases import GuidLeases
from tests.unit.fakes import GrantAll, InMemoryGuidLeases, InMemoryGuidQueue

BeforeCall = CoreBeforeCall | None


EPS = 1e-6  # a difference of two clock readings, rounded

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    """The selector of :class:`VirtualTimeLoop`, which keeps the loop's time. The loop asks it
    to wait for I/O at most ``timeout`` seconds, the time until its next timer. It looks for
    I/O without waiting; finding none, it moves the time on to that timer at once instead of
    sleeping. With no timer at all (``timeout`` None) only I/O can wake the loop (a thread's
    ``call_soon_threadsafe``), and it waits for it for real."""

    def __init__(self, start: float) -> None:
        super().__init__()
        self.now = start

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:
            return super().select(None)
        self.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time: ``time()`` stands still while anything is ready to run and
    jumps to the next timer when the loop would otherwise wait for it. Sleeps, timeouts and
    ``call_later`` keep their order and their lengths in the loop's time but take none in real
    time, and no scheduling delay of a loaded machine enters the loop's time: a guid paced 0.3 s
    apart sends exactly 0.3 s apart by ``loop.time()``. Give the code under test ``loop.time``
    as its clock (the recorder's clock reads it). Wall-clock time (``time.time()``, ``datetime.now``)
    is not virtual: a test whose timing depends on it (``not_before``, ``expire_at``, the online
    lane's lateness) runs on a real loop. As on any asyncio loop, timers due within the clock's
    resolution (a nanosecond) of the one the time jumped to run with it, a hair early: compare
    readings within ``EPS``. Starts at 1,000 s: clock readings are never near zero, as
    ``time.monotonic()``'s are not."""

    def __init__(self, start: float = 1000.0) -> None:
        self._virtual = _VirtualSelector(start)
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a :class:`VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)


def now() -> float:
    """The running loop's time: virtual on a :class:`VirtualTimeLoop`, ``time.monotonic()`` on
    asyncio's own loop."""
    return asyncio.get_running_loop().time()


class SteppedClock:
    """The running loop's time (:func:`now`), moved on at once by :meth:`advance`: a step
    that took that long, without waiting for it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return now() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


class Recorder:
    """Executes an item as begin_send would: only if it is still pending in the store. The
    n-th claim takes ``claims[n]`` seconds of ``clock`` (the last, once they run out; give the
    dispatcher the same clock); ``sent`` holds each gateway call's start, ``claimed`` each
    claim's start, ``yielded`` each item that gave its turn up (pending again at once, as
    the reconciler makes it; its doorbell, which the reconciler publishes, is the test's).
    ``quiets``: guid → when a quiet a gateway asked of it ends by ``clock``, as its lease row
    keeps it; a claim hands what is left of it to ``before_call``, as begin_send does."""

    def __init__(self, store: InMemoryGuidQueue | None = None, claims: Sequence[float] = (0.0,)) -> None:
        self.store = store or InMemoryGuidQueue()
        self.claims = claims
        self.clock = SteppedClock()
        self.sent: list[tuple[str, str, float]] = []
        self.claimed: list[tuple[str, float]] = []
        self.spares: list[float] = []  # each execution's spare_s
        self.yielded: list[ItemCommand] = []
        self.quiets: dict[str, float] = {}

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        claim_s = self.claims[min(len(self.claimed), len(self.claims) - 1)]
        self.spares.append(spare_s)
        self.claimed.append((name(cmd.item_id), self.clock()))
        self.clock.advance(claim_s)
        await asyncio.sleep(0)  # as a database or gateway call would, let other guids run
        if self.store.pending.pop(cmd.item_id, None) is None:
            return Executed("not_pending", False)
        left = self.quiets.get(cmd.guid, 0.0) - self.clock()
        if before_call is not None and not await before_call(left if left > 0 else None):
            self.store.add(cmd)  # waiting_retry, then pending again: nothing was sent
            self.yielded.append(cmd)
            return Executed("yielded", False, claim_s=claim_s)
        self.sent.append((cmd.guid, name(cmd.item_id), self.clock()))
        return Executed("confirmed", True, claim_s=claim_s)


def item_id(guid: str, n: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_OID, f"{guid}-{n}"))


NAMES: dict[str, str] = {}


def name(item: str) -> str:
    return NAMES.get(item, item)


def cmd(guid: str, n: int, priority: int = 3, job: str = "j", not_before: datetime | None = None,
        content: str = "x") -> ItemCommand:
    i = item_id(guid, n)
    NAMES[i] = f"{guid}-{n}"
    return ItemCommand(item_id=i, job_id=job, shard_id=1, guid=guid, to_id=f"r{n}", content=content,
                       idem_key=f"k-{guid}-{n}", priority=priority, kind="campaign", not_before=not_before)


def ring(d: Dispatcher, store: InMemoryGuidQueue, c: ItemCommand) -> None:
    """The planner's order: the item row first, then its command (a doorbell)."""
    store.add(c)
    d.ring(c.guid, c)


async def until(cond, timeout: float = 10.0) -> None:
    """Wait for ``cond()``, looking every 10 ms of the loop's time, at most ``timeout`` of it
    (virtual on a :class:`VirtualTimeLoop`)."""
    deadline = now() + timeout
    while not cond():
        assert now() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def dispatcher(limits: Limits, store: GrantAll | InMemoryGuidLeases | None = None, cap: int = 50, executor: Recorder | None = None,
               **kw: Any) -> tuple[Dispatcher, Recorder, dict[str, Limits]]:
    rec = executor or Recorder()
    kw.setdefault("clock", rec.clock)  # the recorder's times and the dispatcher's pacing agree
    table: dict[str, Limits] = {}
    d = Dispatcher(rec, lambda g: table.get(g, limits), GuidLeases(store or GrantAll(), "me", 30.0),  # type: ignore[arg-type]  # a Recorder for the Executor
                   rec.store, guid_cap=cap, **kw)
    d.lease_retry_s = 0.02
    return d, rec, table


def stop(d: Dispatcher) -> None:
    for g in d.guids.values():
        if g.task is not None:
            g.task.cancel()


FAST = Limits(min_interval_s=0.0, jitter_s=0.0)


async def unchanged_counts() -> None:
    """A sweep's fresh read of the partition counts: nothing changed."""

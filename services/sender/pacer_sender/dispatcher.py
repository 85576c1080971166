"""Per-guid serial execution, guids in parallel, paced; offsets committed only when done.

Each guid with work has one worker task that takes its most urgent ready item, waits out
the guid's pacing gap, and executes it. The Kafka poll loop never waits on pacing: it only
hands envelopes over and pauses partitions when too much is buffered.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from pacer_common.db.errors import TransientError
from pacer_common.domain.commands import ItemCommand
from pacer_sender.core import Executed, Executor
from pacer_sender.domain.offsets import PartitionOffsets
from pacer_sender.domain.pacing import GuidPace, PacingPolicy
from pacer_sender.domain.queue import GuidQueue
from pacer_sender.leases import GuidLeases

log = logging.getLogger(__name__)
TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Envelope:
    tp: TP
    offset: int
    cmd: ItemCommand


class Dispatcher:
    def __init__(self, executor: Executor, pacing: PacingPolicy, leases: GuidLeases, *,
                 on_executed: Callable[[Envelope, Executed], None] | None = None,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.executor = executor
        self.pacing = pacing
        self.leases = leases
        self.lease_retry_s = 1.0
        self.guid_tp: dict[str, TP] = {}
        self.on_executed = on_executed or (lambda env, res: None)
        self.rng = rng or random.Random()
        self.clock = clock
        self.queues: dict[str, GuidQueue[Envelope]] = {}
        self.paces: dict[str, GuidPace] = {}
        self.workers: dict[str, asyncio.Task[None]] = {}
        self.executing: dict[str, Envelope] = {}
        self.books: dict[TP, PartitionOffsets] = {}
        self.buffered = 0
        self._progress = asyncio.Event()

    # -- intake ---------------------------------------------------------------------------
    def submit(self, env: Envelope) -> None:
        self.books.setdefault(env.tp, PartitionOffsets()).add(env.offset)
        q = self.queues.setdefault(env.cmd.guid, GuidQueue())
        self.guid_tp[env.cmd.guid] = env.tp
        q.push(env, env.cmd.priority, self._due(env.cmd))
        self.buffered += 1
        if env.cmd.guid not in self.workers:
            self.workers[env.cmd.guid] = asyncio.create_task(self._run(env.cmd.guid), name=f"guid:{env.cmd.guid}")

    def skip(self, tp: TP, offset: int) -> None:
        """An offset with nothing to execute (unreadable command): count it done."""
        book = self.books.setdefault(tp, PartitionOffsets())
        book.add(offset)
        book.done(offset)

    def _due(self, cmd: ItemCommand) -> float | None:
        if cmd.not_before is None:
            return None
        delta = (cmd.not_before - datetime.now(UTC)).total_seconds()
        return self.clock() + delta if delta > 0 else None

    # -- per-guid worker ------------------------------------------------------------------
    async def _run(self, guid: str) -> None:
        q = self.queues[guid]
        pace = self.paces.setdefault(guid, GuidPace())
        try:
            while q:
                if guid not in self.leases.held:
                    try:
                        lease = await self.leases.acquire(guid)
                    except TransientError:
                        log.exception("guid lease for %s not taken; trying again", guid)
                        lease = None
                    if lease is None:
                        # Another sender still holds the guid (finishing, or not yet expired).
                        await asyncio.sleep(self.lease_retry_s)
                        continue
                    since = None if lease.last_send_at is None else (lease.db_now - lease.last_send_at).total_seconds()
                    pace.resume_after(self.clock(), since, self.pacing)
                now = self.clock()
                wait = pace.wait(now)
                if wait > 0:
                    await asyncio.sleep(wait)  # pacing gap: the next due moment, jittered
                    continue
                env = q.pop(now)
                if env is None:
                    due = q.next_due()
                    if due is None:
                        break
                    await asyncio.sleep(max(0.0, due - now))  # a scheduled send: sleep until due
                    continue
                self.executing[guid] = env
                try:
                    result = await self.executor.execute(env.cmd)
                except Exception:
                    # The database stayed away past the retry deadline. Every step is guarded,
                    # so running the item again is safe: back off, put it back, go on.
                    log.exception("item execution failed; retrying it after a pause")
                    q.push(env, env.cmd.priority)
                    pace.next_at = self.clock() + 1.0
                    continue
                finally:
                    self.executing.pop(guid, None)
                if result.outcome == "guid_lost":
                    self.leases.forget(guid)
                    q.push(env, env.cmd.priority)
                    continue
                if result.called_gateway:
                    if result.outcome == "rate_limited":
                        pace.slowed(self.clock(), self.pacing, self.rng)
                    else:
                        pace.sent(self.clock(), self.pacing, self.rng)
                self._done(env)
                self.on_executed(env, result)
        finally:
            self.workers.pop(guid, None)
            if not q:
                self.queues.pop(guid, None)

    def _done(self, env: Envelope) -> None:
        self.buffered -= 1
        book = self.books.get(env.tp)
        if book is not None:
            book.done(env.offset)
        self._progress.set()

    # -- commit points, revocation, shutdown ----------------------------------------------
    def commit_points(self, tps: Iterable[TP] | None = None) -> dict[TP, int]:
        out = {}
        for tp in list(self.books) if tps is None else tps:
            book = self.books.get(tp)
            cp = book.commit_point() if book else None
            if cp is not None and cp > book.committed:  # type: ignore[union-attr]
                out[tp] = cp
        return out

    def mark_committed(self, points: dict[TP, int]) -> None:
        for tp, cp in points.items():
            if tp in self.books:
                self.books[tp].committed = cp

    async def release(self, tps: set[TP], timeout_s: float = 30.0) -> dict[TP, int]:
        """Stop work for these partitions: drop queued items, let in-hand ones finish.

        Returns the commit points to commit before the partitions go. Dropped items stay
        uncommitted, so whoever owns the partitions next reads them again.
        """
        for guid, q in list(self.queues.items()):
            self.buffered -= len(q.remove_if(lambda e: e.tp in tps))
            task = self.workers.get(guid)
            if not q and task is not None and guid not in self.executing:
                task.cancel()  # only ever cancelled while waiting, never mid-item
        deadline = self.clock() + timeout_s
        while any(e.tp in tps for e in self.executing.values()) and self.clock() < deadline:
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), timeout=0.5)
            except TimeoutError:
                pass
        points = self.commit_points(tps)
        for tp in tps:
            self.books.pop(tp, None)
        gone = [g for g, tp in self.guid_tp.items() if tp in tps and g not in self.executing]
        await self.leases.release(gone)
        for g in gone:
            self.guid_tp.pop(g, None)
        return points

    @property
    def active_guids(self) -> int:
        return len(self.workers)

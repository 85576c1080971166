"""Per-guid serial execution, guids in parallel, paced; offsets committed only when done.

Each guid with work has one worker task that takes its most urgent ready item, waits out
the guid's pacing gap, and executes it. The Kafka poll loop never waits on pacing: it only
hands envelopes over and pauses partitions when too much is buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from pacer_sender.domain.pacing import GuidPacer, Lane, Limits, lane_of
from pacer_sender.domain.queue import GuidLanes
from pacer_sender.leases import GuidLeases

log = logging.getLogger(__name__)
TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Envelope:
    tp: TP
    offset: int
    cmd: ItemCommand


class Dispatcher:
    def __init__(self, executor: Executor, limits: Callable[[str], Limits], leases: GuidLeases, *,
                 on_executed: Callable[[Envelope, Executed], None] | None = None,
                 job_interval: Callable[[str], float | None] = lambda job_id: None,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.executor = executor
        self.limits = limits  # guid → its current limits (hot-adjustable)
        self.job_interval = job_interval  # job → its own interval per guid, if set (hot-adjustable)
        self.max_idle_s = 30.0  # a waiting guid re-checks at least this often (changes wake it sooner)
        self.fatal: BaseException | None = None
        self.leases = leases
        self.lease_retry_s = 1.0
        self.guid_tp: dict[str, TP] = {}
        self.on_executed = on_executed or (lambda env, res: None)
        self.rng = rng or random.Random()
        self.clock = clock
        self.queues: dict[str, GuidLanes[Envelope]] = {}
        self.paces: dict[str, GuidPacer] = {}
        self.wakes: dict[str, asyncio.Event] = {}
        self.workers: dict[str, asyncio.Task[None]] = {}
        self.executing: dict[str, Envelope] = {}
        self._releasing: set[asyncio.Future[None]] = set()
        self.books: dict[TP, PartitionOffsets] = {}
        self.by_lane: dict[Lane, int] = {"online": 0, "batch": 0}  # commands held, per lane
        self.by_tp: dict[TP, int] = {}  # commands held, per partition (flow control)
        self._progress = asyncio.Event()

    # -- intake ---------------------------------------------------------------------------
    def submit(self, env: Envelope) -> None:
        self.books.setdefault(env.tp, PartitionOffsets()).add(env.offset)
        lanes = self.queues.setdefault(env.cmd.guid, GuidLanes())
        self.guid_tp[env.cmd.guid] = env.tp
        lanes.push(env, env.cmd.priority, self._due(env.cmd), env.cmd.job_id)
        self.by_lane[lane_of(env.cmd.priority)] += 1
        self.by_tp[env.tp] = self.by_tp.get(env.tp, 0) + 1
        wake = self.wakes.get(env.cmd.guid)
        if wake is not None:
            wake.set()
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
        lanes = self.queues[guid]
        pacer = self.paces.setdefault(guid, GuidPacer())
        wake = self.wakes.setdefault(guid, asyncio.Event())
        try:
            while lanes:
                limits = self.limits(guid)
                if guid not in self.leases.held and not await self._take_lease(guid, pacer, limits):
                    await self._sleep(wake, self.lease_retry_s)
                    continue
                picked, wait = self._pick(lanes, pacer, limits)
                if picked is None:
                    if wait is None:
                        break
                    await self._sleep(wake, wait)  # the guid's next moment; new work wakes it early
                    continue
                lane, env = picked
                self.executing[guid] = env
                try:
                    result = await self.executor.execute(env.cmd)
                except TransientError:
                    # The database stayed away past the retry deadline. Every step is guarded,
                    # so running the item again is safe: back off, put it back, go on.
                    log.exception("item execution failed; retrying it after a pause")
                    lanes.push(env, env.cmd.priority, self.clock() + 1.0, env.cmd.job_id)
                    continue
                except Exception as exc:
                    self.fatal = exc  # a bug, not weather: stop the service rather than loop
                    raise
                finally:
                    self.executing.pop(guid, None)
                if result.outcome == "guid_lost":
                    self.leases.forget(guid)
                    lanes.push(env, env.cmd.priority, None, env.cmd.job_id)
                    continue
                if result.called_gateway:
                    if result.outcome == "rate_limited":
                        pacer.slowed(lane, limits, self.clock(), self.rng)
                    else:
                        pacer.sent(lane, limits, self.clock(), time.time(), self.rng,
                                   self.job_interval(env.cmd.job_id))
                self._done(env)
                self.on_executed(env, result)
        finally:
            self.workers.pop(guid, None)
            if not lanes:
                self.queues.pop(guid, None)
                self.wakes.pop(guid, None)
            tp = self.guid_tp.get(guid)
            if not lanes and tp is not None and tp not in self.books:
                # Its partition was revoked while it was executing: release() had to leave
                # the lease to it. Give it back now, or it would be renewed for nobody.
                self.guid_tp.pop(guid, None)
                task = asyncio.ensure_future(self.leases.release([guid]))
                self._releasing.add(task)
                task.add_done_callback(self._releasing.discard)

    async def _take_lease(self, guid: str, pacer: GuidPacer, limits: Limits) -> bool:
        try:
            lease = await self.leases.acquire(guid)
        except TransientError:
            log.exception("guid lease for %s not taken; trying again", guid)
            return False
        if lease is None:
            return False  # another sender still holds the guid (finishing, or not yet expired)
        since = None if lease.last_send_at is None else (lease.db_now - lease.last_send_at).total_seconds()
        pacer.resume_after(self.clock(), since, limits, lease.windows)
        return True

    def _pick(self, lanes: GuidLanes[Envelope], pacer: GuidPacer,
              limits: Limits) -> tuple[tuple[Lane, Envelope] | None, float | None]:
        """The next item to send now (online lane first), or how long to wait (None: no work)."""
        now, wall = self.clock(), time.time()
        wait: float | None = None
        for lane, q in lanes.lanes.items():
            if not q:
                continue
            due = q.next_due()
            if q.has_ready() or (due is not None and due <= now):
                ready_at = pacer.ready_at(lane, limits, now, wall)
                if ready_at <= now:
                    env = q.pop(now)
                    if env is not None:
                        return (lane, env), None
                candidate = ready_at - now
            else:
                candidate = (due or now) - now
            wait = candidate if wait is None else min(wait, candidate)
        return None, wait

    async def _sleep(self, wake: asyncio.Event, seconds: float) -> None:
        """Wait for the guid's next moment; a new command for the guid ends the wait early."""
        wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=max(0.0, min(seconds, self.max_idle_s)))

    def _done(self, env: Envelope) -> None:
        self.by_lane[lane_of(env.cmd.priority)] -= 1
        self.by_tp[env.tp] = self.by_tp.get(env.tp, 1) - 1
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
            for env in q.remove_if(lambda e: e.tp in tps):
                self.by_lane[lane_of(env.cmd.priority)] -= 1
            task = self.workers.get(guid)
            if not q and task is not None and guid not in self.executing:
                task.cancel()  # only ever cancelled while waiting, never mid-item
        for tp in tps:
            self.by_tp.pop(tp, None)
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

    def wake(self, guids: list[str]) -> None:
        """Make waiting workers look again now (their limits changed); ``*`` wakes all."""
        targets = self.wakes.keys() if "*" in guids else [g for g in guids if g in self.wakes]
        for guid in list(targets):
            self.wakes[guid].set()

    @property
    def buffered(self) -> int:
        return sum(self.by_lane.values())

    @property
    def active_guids(self) -> int:
        return len(self.workers)

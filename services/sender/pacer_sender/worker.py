"""One guid's worker: serial, paced, reading the guid's ready work from Postgres.

The worker holds a small window of the guid's ready commands (``GuidWindow``, at most
``guid_cap`` per lane, more while the backlog is deep) and reads the guid's next ready items from Postgres as the window
runs low. When a doorbell sorts ahead of the window or scheduled work comes due, it reads
the head of the order (``HEAD_READ``) at once and tops up after the guid's next send, so a
hundred guids whose order changes at once read spread over their pacing gaps. With nothing
ready it learns from Postgres when the guid's next scheduled item is due and sleeps until
then (a doorbell that changes what it acts on wakes it sooner); if that is beyond
``horizon_s`` it ends, and the sweep (``sweeper.py``) starts it again in time. Every wait, a
pacing gap included, ends when scheduled work comes due, so that work takes its place in the
order during the gap, not after it. Scheduled work is never in the window, so it never holds
up ready work.

While an online command has waited longer than the guid's ``online_yield_s``, the batch lane
yields entirely. Every ``shed_every_s`` a guid with batch work checks, in Postgres, which of
its batch items cannot go out before their ``expire_at`` at its current rate, and expires
them early (reason ``shed``): the sender is where the guid's rate is known.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from pacer_common.db.errors import TransientError
from pacer_common.domain.commands import CommandHead, ItemCommand
from pacer_common.domain.requests import Lane
from pacer_sender.crew import Crew
from pacer_sender.domain.pacing import GuidPacer, Limits
from pacer_sender.domain.queue import GuidWindow
from pacer_sender.execution import ItemRunner
from pacer_sender.wakeup import WakeUp

log = logging.getLogger(__name__)


class GuidWorker:
    def __init__(self, guid: str, crew: Crew, pacer: GuidPacer, on_end: Callable[[GuidWorker], None]) -> None:
        self.guid = guid
        self.crew = crew
        self.pacer = pacer  # kept across workers by the dispatcher: spacing survives an idle spell
        self.on_end = on_end
        self.window = GuidWindow(crew.buffer.guid_cap, crew.hooks.job_weight, crew.buffer.count,
                                 crew.buffer.guid_cap_max)
        self.wake = WakeUp()
        self.runner = ItemRunner(guid, crew, self.window, pacer, lambda: self.stopping, self.wake)
        self.task: asyncio.Task[None] | None = None
        self.due_at: float | None = None  # when its earliest scheduled item in Postgres is due (clock)
        self.due_rung: float | None = None  # the earliest due time rung since its last read began (clock)
        self.shed_at: float | None = None  # when its batch queue was last checked for shedding (clock)
        self.stopping = False  # its partition went: finish the item in hand, then end
        self.revived = False  # rung again while stopping: start afresh once stopped
        self.sent = False  # it executed an item since its last refill: time to top up, if low
        self.batch_idle = True  # no batch work in sight since it last had some
        self.read = False  # it has read the guid's queue in Postgres at least once

    @property
    def executing(self) -> ItemCommand | None:
        return self.runner.executing

    # -- doorbells ------------------------------------------------------------------------
    def hold(self, cmd: ItemCommand) -> None:
        """A ready command: held in the window if it and memory have room, else it rings."""
        self.window.offer(cmd, self.crew.buffer.admits(cmd), time.time())

    def ring(self, not_before: datetime | None = None) -> None:
        """Postgres has work the window does not hold (due at ``not_before``, if scheduled)."""
        self.window.ring()
        if not_before is not None:
            due = self.crew.clock() + (not_before - datetime.now(UTC)).total_seconds()
            self.due_at = _earliest(self.due_at, due)  # on time, whatever the window holds
            self.due_rung = _earliest(self.due_rung, due)

    def note(self, head: CommandHead) -> None:
        """A ready command the window would not hold, read only for its head: Postgres has
        it; the window reads at once if it sorts ahead of what the window holds."""
        self.window.note(head.priority, head.job_id, head.item_id)

    def reorder(self) -> None:
        """Postgres may hold work that sorts ahead of everything the window holds (an overdue
        item the sweep found): read the head of the guid's order now."""
        self.window.reorder()

    def acted_on(self) -> tuple[bool, bool, int, float | None]:
        """What the worker acts on at its next moment: a doorbell that leaves this as it was
        need not wake it."""
        return self.window.more, self.window.urgent, len(self.window), self.due_at

    def start(self, wake: bool = True) -> None:
        """Wake the worker (if ``wake``), starting its task if it has none."""
        if self.stopping:
            self.revived = True
        if wake:
            self.wake.set()
        if self.task is None:
            self.task = asyncio.create_task(self._run(), name=f"guid:{self.guid}")

    def stop(self) -> bool:
        """The guid's partition went: drop the window (its work stays in Postgres for the next
        owner). True if no item is in hand (the task may be cancelled)."""
        self.stopping = True
        self.revived = False
        self.drop_window()
        return self.executing is None

    def drop_window(self) -> None:
        self.window.clear()

    # -- the loop ---------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            while not self.stopping and await self._turn():
                pass
        except Exception:
            # A bug outside any one item. The guid's work is in Postgres: the next doorbell
            # or sweep starts a fresh worker; the sender itself goes on.
            log.exception("guid worker for %s failed", self.guid)
            self.crew.hooks.on_internal_error()
        finally:
            self.on_end(self)

    async def _turn(self) -> bool:
        """One step: read, shed, wait, or send one item. False when nothing is ready and
        nothing due soon (the worker ends)."""
        retry_s = self.crew.config.lease_retry_s
        self._order_due_work()
        if not await self._refill():
            await self._sleep(retry_s)
            return True
        limits = self.crew.limits(self.guid)
        if limits.shed and self._shed_due(limits):
            await self._shed(limits)
        if not self.window:
            return await self._idle()
        if not await self.crew.leases.take(self.guid, self.pacer, limits):
            if not self.crew.owns(self.guid):
                # Rung through a partition the guid no longer hashes to (a planner still on the
                # count before partitions were added), and its owner holds it: the work is in
                # Postgres for that owner. Waiting here would wait for ever.
                return False
            await self._sleep(retry_s)
            return True
        self._start_batch(limits)
        picked, wait = self._pick(limits)
        if picked is None:
            await self._sleep(wait if wait is not None else retry_s)
            return True
        lane, cmd, go_at = picked
        pause = await self.runner.run(lane, cmd, limits, go_at)
        self.sent = True
        if pause:
            await self._sleep(pause)
        return True

    def _order_due_work(self) -> None:
        if self.due_at is not None and self.due_at <= self.crew.clock():
            self.due_at = None
            self.window.reorder()  # scheduled work came due: it takes its place in the order

    async def _idle(self) -> bool:
        """Nothing in the window: read again, sleep until scheduled work is due, or end.
        A worker ends only on Postgres' word, never on its doorbells' alone: one started by
        doorbells reads the guid's queue once before it ends. After a partition moved, the
        doorbells of the guid's first items may have gone to the previous owner, who committed
        them and dropped its window; the window, holding all it was rung for, would otherwise
        end with those items pending until a periodic sweep."""
        if self.window.more:
            return True  # rung while reading: read again
        if not self.read:
            self.window.ring()
            return True
        self.batch_idle = True
        if self.due_at is None or self.due_at - self.crew.clock() > self.crew.config.horizon_s:
            return False  # nothing ready, nothing due soon: the sweep restarts it in time
        await self._sleep(self.due_at - self.crew.clock())
        return True

    def _start_batch(self, limits: Limits) -> None:
        """Batch work reaching a guid that had none: if the guid is rested (no batch send
        within its batch interval, its previous owner's included), its first campaign send
        waits a random part of one interval (``first_send_spread``). Guids that get work
        together — a sender starting or taking a partition, a campaign starting on guids it
        holds — then start spread over the interval, not as one burst that comes round every
        interval."""
        has_batch = bool(self.window.lanes.lanes["batch"])
        if has_batch and self.batch_idle:
            spread, now = self.crew.config.first_send_spread, self.crew.clock()
            if spread > 0 and self.pacer.rested(now, limits):
                self.pacer.spread_start(now, limits, self.crew.rng.random() * spread)
        if has_batch:
            self.batch_idle = False
        elif not self.window.more:
            self.batch_idle = True

    async def _refill(self) -> bool:
        """Read the guid's next ready items from Postgres into its window, if it runs low.
        False if the database could not be read.

        A worker reads before it sends anything its doorbells brought, and reads the head of
        the guid's order, a whole window of it (its batch lane dropped): the guid's earlier
        doorbells may have gone to a sender that owned its partition before, committed them and
        dropped its window, so an auto-reply may be pending in Postgres that this window knows
        nothing of. Read only as the window ran low, it went out after up to half a window of
        campaign sends. It costs no read more than before for a guid whose work fits a window
        (a worker reads Postgres before it ends anyway); a worker the sweep started has an
        empty window, whose first read is the whole head anyway. If that read finds nothing
        ready (the guid's state holds its queue: offline, kicked; or the items are taken), what
        the doorbells brought is tried as it came, each claim saying why it is not sent: a held
        guid's items are marked held, to be published again when the hold is lifted."""
        rung: list[ItemCommand] = []
        if not self.read and self.window:
            rung = list(self.window.lanes.lanes["batch"].values())
            self.window.reorder(whole=True)
        n = self.window.refill_size()
        # A top-up (the window low, nothing ahead of it) waits for the guid's next send: the
        # window is a prefix of the order, so what it reads goes after what it holds.
        if not n or not (self.window.urgent or not self.window or self.sent):
            return True
        n = self.crew.buffer.read_size(n, len(self.window))
        if not n:
            return True  # memory is short: this window reads once it is empty
        self.window.refilling()
        self.due_rung = None
        self.sent = False
        try:
            with self.crew.buffer.reading_for(n):
                ready = await self.crew.queue.next_ready(self.guid, list(self.window.ids), n)
        except TransientError:
            log.exception("next items of guid %s not read; trying again", self.guid)
            return False
        self.read = True
        if self.stopping:
            return True
        self.window.refilled(ready.commands, n, ready.ready_since, time.time(), self.crew.buffer.share())
        if rung and not ready.commands:
            for cmd in rung:
                self.window.put(cmd, time.time())
        # The read says when the guid's next scheduled item is due, as of its snapshot; a doorbell
        # rung while it ran may name an item planned after that snapshot (a ticket whose row
        # committed while the read was under way), which the read's answer must not erase.
        due = None if ready.due_in_s is None else self.crew.clock() + max(0.0, ready.due_in_s)
        self.due_at = _earliest(due, self.due_rung)
        return True

    def _shed_due(self, limits: Limits) -> bool:
        """Time to check the guid's batch queue for items that cannot make their expire_at:
        every ``shed_every_s`` while Postgres holds more than the window, or when an item in
        the window itself would miss it. The window holds the head of each job's queue (fair
        share), so a guid none of whose jobs has an expire_at there costs no read."""
        if self.shed_at is not None and self.crew.clock() - self.shed_at < self.crew.config.shed_every_s:
            return False
        if not self.window.expiring:
            return False
        batch = self.window.lanes.lanes["batch"].values()
        if not self.window.more:
            last, wall = self.pacer.drain(limits).at(len(batch)), time.time()
            if all(c.expire_at is None or c.expire_at.timestamp() > wall + last for c in batch):
                return False
        return True

    async def _shed(self, limits: Limits) -> None:
        self.shed_at = self.crew.clock()
        try:
            shed = await self.crew.queue.shed(self.guid, self.pacer.drain(limits))
        except TransientError:
            log.exception("batch queue of guid %s not checked for shedding; trying again later", self.guid)
            return
        if shed:
            log.warning("guid %s: %d batch items shed (they could not go out before their expire_at)", self.guid, shed)
            self.crew.hooks.on_shed(shed)
            self.window.drop("batch")  # some may be among those shed: read the rest afresh
            self.window.ring()

    def _pick(self, limits: Limits) -> tuple[tuple[Lane, ItemCommand, float | None] | None, float | None]:
        """The next item to send (online lane first) — now, or, claimed ahead, when its
        pacing gap ends within the claim's lead (the moment it may go, else None) — or how
        long to wait."""
        now, wall, lead = self.crew.clock(), time.time(), self.crew.ahead.lead_s
        wait: float | None = None
        for lane, q in self.window.lanes.lanes.items():
            if not q:
                continue
            if lane == "batch" and self._online_behind(limits, wall):
                continue  # the online lane is behind: batch yields until it recovers
            ready_at = self.pacer.ready_at(lane, limits, now, wall, q.best_priority())
            if ready_at <= now + lead:
                cmd = self.window.take(lane)
                if cmd is not None:
                    return (lane, cmd, ready_at if ready_at > now else None), None
            wait = ready_at - lead - now if wait is None else min(wait, ready_at - lead - now)
        return None, wait

    def _online_behind(self, limits: Limits, wall: float) -> bool:
        oldest = self.window.oldest("online")
        return oldest is not None and wall - oldest > limits.online_yield_s

    async def _sleep(self, seconds: float) -> None:
        """Wait for the guid's next moment; a doorbell for the guid ends the wait early, and so
        does its scheduled work coming due (so it takes its place in the window while the guid
        waits out its pacing gap, not after)."""
        if self.due_at is not None:
            seconds = min(seconds, self.due_at - self.crew.clock())
        self.wake.clear()
        await self.wake.sleep(min(seconds, self.crew.config.max_idle_s))


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)

"""One guid's in-memory window: an online lane and a batch lane, each in the send order of
``order.py`` (priority, then fair share across jobs, then age), bounded; Postgres holds the
rest of the guid's queue and decides what enters the window.

Fair share is start-time fair queuing: a job's next item starts at the virtual time its
previous one finished (``1 / weight`` later), and a job that arrives late starts at the
current virtual time, so one large broadcast cannot starve the others and a new one cannot
starve it either. The virtual times outlive a refill: a job whose items were dropped from
the window keeps the place of the first one dropped, so a job that has just sent does not
win a tie against one that has just arrived.

The window only ever holds ready commands, at most ``cap`` per lane. A command that does
not fit, a scheduled one, or a doorbell without a readable command *rings*: the window
notes that Postgres may hold more ready work than it does (``more``), and the guid's worker
reads the next items from Postgres when its window runs low.

While Postgres holds more than the window, the window is a prefix of the guid's order in
Postgres, and must stay one: a batch doorbell that would sort ahead of what the window
holds — a better priority, or a job the window holds nothing of at that priority (fair
share owes it a turn) — drops the batch lane (its items are still pending in Postgres) and
asks for a refill at once (``urgent``). So a ticket behind a deep campaign goes out with the
guid's next send, and a new job gets its turn within one send of arriving.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.ids import ItemId, JobId
from pacer_common.domain.requests import Lane, lane_of
from pacer_sender.domain.order import weight_of

NO_JOB = JobId("")  # entries not of any job (tests, single-queue use)

T = TypeVar("T")
HEAD_READ = 8  # items read at once when the window's order changed; the rest while the guid waits
_arrival = itertools.count()


@dataclass(order=True)
class _Entry(Generic[T]):
    key: tuple[int, float, int]
    job: JobId = field(compare=False)
    value: T = field(compare=False)


def _uncounted(n: int) -> None:
    pass


class GuidQueue(Generic[T]):
    """Entries in send order. ``counted`` hears every change of the number held (+1 a push,
    -1 a pop, -n a removal), so a count kept outside (``flow.Buffer``) cannot drift from it.

    What the queue remembers of jobs stays bounded by what it holds: a job's held count goes
    when it reaches zero, and a job's virtual time once it holds nothing and its time is not
    ahead of the queue's (then it starts where a new job would: the same). A busy guid whose
    lane never empties otherwise kept an entry for every job it ever held — 20,000 one-item
    ticket jobs, 20,000 entries."""

    def __init__(self, weight: Callable[[JobId], float | None] = lambda job: None,
                 counted: Callable[[int], None] = _uncounted) -> None:
        self._ready: list[_Entry[T]] = []
        self._vtime = 0.0
        self._job_v: dict[JobId, float] = {}  # job → virtual time its next item starts at
        self._held: Counter[tuple[int, JobId]] = Counter()  # (priority, job) → entries held (never 0)
        self.weight = weight
        self.counted = counted

    def push(self, value: T, priority: int, job: JobId = NO_JOB) -> None:
        start = max(self._job_v.get(job, 0.0), self._vtime)
        self._job_v[job] = start + 1.0 / weight_of(self.weight(job))
        heapq.heappush(self._ready, _Entry((priority, start, next(_arrival)), job, value))
        self._held[priority, job] += 1
        self.counted(1)

    def pop(self) -> T | None:
        if not self._ready:
            return None
        e = heapq.heappop(self._ready)
        self._vtime = e.key[1]
        self._release(e)
        self.counted(-1)
        if not self._ready:
            self._job_v.clear()  # idle: nobody is owed anything any more
        else:
            self._forget_idle_jobs()
        return e.value

    def _release(self, e: _Entry[T]) -> None:
        key = (e.key[0], e.job)
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]

    def _forget_idle_jobs(self) -> None:
        """Drop the virtual times of jobs that hold nothing, once they outnumber what is held
        (amortized: each pass leaves at most the jobs held plus those owed a place). A time
        not ahead of the queue's means nothing; one ahead is kept (the job has just had its
        turn, and must not win a tie against one that has just arrived) unless even those
        outnumber what is held, as when one-item jobs follow each other at one virtual time:
        then a job that comes back may go a turn early, which memory is worth."""
        if len(self._job_v) <= 2 * len(self._ready) + 64:
            return
        held = {job for _, job in self._held}
        idle = [job for job in self._job_v if job not in held]
        for job in idle:
            if self._job_v[job] <= self._vtime:
                del self._job_v[job]
        if len(self._job_v) > len(self._ready) + 64:
            for job in idle:
                self._job_v.pop(job, None)

    def holds(self, priority: int, job: JobId) -> bool:
        """Whether an entry of ``job`` at ``priority`` is held."""
        return (priority, job) in self._held

    def best_priority(self) -> int | None:
        return self._ready[0].key[0] if self._ready else None

    def values(self) -> list[T]:
        return [e.value for e in self._ready]

    def remove_if(self, pred: Callable[[T], bool]) -> list[T]:
        """Drop the entries for which ``pred(value)`` holds; return their values."""
        dropped = [e for e in self._ready if pred(e.value)]
        self._ready = [e for e in self._ready if not pred(e.value)]
        heapq.heapify(self._ready)
        first_dropped: dict[JobId, float] = {}
        for e in dropped:
            self._release(e)
            first_dropped[e.job] = min(first_dropped.get(e.job, e.key[1]), e.key[1])
        # A job's next item starts where its first one dropped would have (it keeps its place:
        # what it sent still counts, what it did not send costs it nothing), yet after any of
        # its items still held (first in, first out within a job).
        last_held: dict[JobId, float] = {}
        for e in self._ready:
            if e.job in first_dropped:
                last_held[e.job] = max(last_held.get(e.job, e.key[1]), e.key[1])
        for job, start in first_dropped.items():
            held = last_held.get(job)
            self._job_v[job] = start if held is None else max(start, held + 1.0 / weight_of(self.weight(job)))
        if dropped:
            self.counted(-len(dropped))
            self._forget_idle_jobs()
        return [e.value for e in dropped]

    def __len__(self) -> int:
        return len(self._ready)


class GuidLanes(Generic[T]):
    """The two lanes of one guid."""

    def __init__(self, weight: Callable[[JobId], float | None] = lambda job: None,
                 counted: Callable[[int], None] = _uncounted) -> None:
        self.lanes: dict[Lane, GuidQueue[T]] = {"online": GuidQueue(weight, counted),
                                                "batch": GuidQueue(weight, counted)}

    def push(self, value: T, priority: int, job: JobId = NO_JOB) -> None:
        self.lanes[lane_of(priority)].push(value, priority, job)

    def remove_if(self, pred: Callable[[T], bool]) -> list[T]:
        return [v for q in self.lanes.values() for v in q.remove_if(pred)]

    def __len__(self) -> int:
        return sum(len(q) for q in self.lanes.values())


def _expiring(cmd: ItemCommand) -> int:
    """1 for a batch command with an ``expire_at``, else 0."""
    return int(cmd.expire_at is not None and lane_of(cmd.priority) == "batch")


class GuidWindow:
    """The ready commands of one guid held in memory (at most ``cap`` per lane), and
    whether Postgres may hold more ready work for it than the window does. ``counted`` hears
    every change of the number held, whichever way it happens (the sender's memory budget).

    A guid with a deep backlog reads more at a time: each whole refill that Postgres answers
    in full doubles ``cap``, up to ``grows_to``, and one answered short (the backlog fits the
    window) brings it back to the first. A refill's cost is mostly its own (a transaction of
    a few statements, each end of it in Python), whatever it reads: a guid sending its
    thousands of campaign items reads eight times less often at 400 than at 50."""

    def __init__(self, cap: int, weight: Callable[[JobId], float | None] = lambda job: None,
                 counted: Callable[[int], None] = _uncounted, grows_to: int | None = None) -> None:
        self.cap = self.first_cap = cap
        self.grows_to = max(cap, grows_to or cap)
        self.lanes: GuidLanes[ItemCommand] = GuidLanes(weight, counted)
        self.ids: set[ItemId] = set()  # in the window or being executed: never held twice
        self.since: dict[ItemId, float] = {}  # item id → when it became ready (epoch s), for waits
        self.more = False
        self.urgent = False  # Postgres holds work that sorts ahead of the window: refill now
        self.whole = False  # that refill reads a whole window, not only the head (HEAD_READ)
        self.head_only = False  # the refill under way reads only the head
        # The items rung for since the last refill began; None once one rang unnamed (a sweep,
        # a scheduled item, an unreadable command) or more rang than a window holds.
        self.rung: set[ItemId] | None = set()
        self.expiring = 0  # batch commands held that have an expire_at (shedding checks only those)

    def ring(self, item_id: ItemId | None = None) -> None:
        """Postgres has work for this guid that the window does not hold (``item_id``, if
        the doorbell named it)."""
        self.more = True
        if self.rung is not None:
            if item_id is None or len(self.rung) >= self.cap:
                self.rung = None
            else:
                self.rung.add(item_id)

    def reorder(self, whole: bool = False) -> None:
        """Postgres holds work that may sort ahead of the batch lane (a better priority, a
        job the window holds nothing of, scheduled work come due): drop the batch lane (its
        items are still pending in Postgres) and refill at once, so the window stays a prefix
        of the guid's order. ``whole``: that refill reads a whole window, not only the head
        (the window was never read: nothing it holds came from Postgres' order)."""
        self.drop("batch")
        self.urgent = True
        self.whole = self.whole or whole
        self.ring()

    def offer(self, cmd: ItemCommand, room: bool = True, now: float = 0.0) -> bool:
        """Hold ``cmd`` if its lane has room (and ``room``: the sender's memory allows);
        otherwise ring. While Postgres holds more than the window, a batch command rings too
        (the guid's next batch items are chosen in Postgres, among all of its ready work, not
        by arrival), and one that sorts ahead of the window makes it refill at once. True if
        the window holds it now (or already did)."""
        if cmd.item_id in self.ids:
            return True
        lane = lane_of(cmd.priority)
        if (self.more and lane == "batch") or not room or len(self.lanes.lanes[lane]) >= self.cap:
            self.note(cmd.priority, cmd.job_id, cmd.item_id)
            return False
        self.put(cmd, now)
        return True

    def note(self, priority: int, job: JobId, item_id: ItemId | None = None) -> None:
        """A command of ``job`` at ``priority`` (item ``item_id``, if known) that the window
        does not hold: Postgres has it. If it sorts ahead of the batch lane — a better
        priority, or a job the lane holds nothing of at that priority (fair share owes it a
        turn) — refill at once; else ring."""
        batch = self.lanes.lanes["batch"]
        best = batch.best_priority()
        if lane_of(priority) == "batch" and best is not None and (priority < best or not batch.holds(priority, job)):
            self.reorder()
        else:
            self.ring(item_id)

    def put(self, cmd: ItemCommand, since: float = 0.0) -> None:
        """Hold ``cmd`` whatever the cap (an item put back after a failed attempt)."""
        self.ids.add(cmd.item_id)
        self.since.setdefault(cmd.item_id, since)
        self.lanes.push(cmd, cmd.priority, cmd.job_id)
        self.expiring += _expiring(cmd)

    def refill_size(self) -> int:
        """How many items to read from Postgres now: none unless it may hold more and the
        window has run down to half (or holds less than what Postgres would send first). A
        refill for what sorts ahead reads only the head of the order (``HEAD_READ``), what
        the next sends need: when a ticket, a new job or scheduled work reaches a hundred
        guids at once, a hundred full windows are not read at that instant."""
        if not self.more or (len(self.lanes) > self.cap // 2 and not self.urgent):
            return 0
        n = max(1, self.cap - len(self.lanes))
        return min(n, HEAD_READ) if self.urgent and not self.whole else n

    def refilling(self) -> None:
        """A refill starts: from now, remember what rings, for :meth:`refilled`."""
        self.head_only = self.urgent and not self.whole  # a read of the head: never a reason to grow
        self.urgent = False
        self.whole = False
        self.rung = set()

    def refilled(self, cmds: Iterable[ItemCommand], asked: int, since: dict[str, float] | None = None,
                 now: float = 0.0, share: int | None = None) -> int:
        """Take what a refill read (in the send order); returns how many were new. ``share``:
        the most this window may grow to now, its share of the sender's memory (a window grown
        past it would leave other guids to read only once empty, their sends waiting on the
        read); never below its first size. Postgres
        had no more ready work than that if it gave fewer than asked and nothing rang
        meanwhile but items the window now holds: a guid's doorbells often arrive while its
        first read runs (a sender starting, or taking a partition, reads every guid the sweep
        finds as their commands are consumed); had any ring counted as "maybe more", each
        would cost the guid a second read of its whole queue after its first send."""
        got = new = 0
        for cmd in cmds:
            got += 1
            if cmd.item_id not in self.ids:
                self.put(cmd, (since or {}).get(cmd.item_id, now))
                new += 1
        if got < asked and self.rung is not None and self.rung <= self.ids:
            self.more = False
        if got < asked:
            self.cap = self.first_cap  # Postgres had no more: the backlog fits the window
        elif not self.head_only and asked >= self.cap // 2:  # a whole refill, answered in full: a deeper backlog
            ceiling = self.grows_to if share is None else max(self.first_cap, min(self.grows_to, share))
            self.cap = min(ceiling, 2 * self.cap)
        return new

    def take(self, lane: Lane) -> ItemCommand | None:
        """The lane's next command; it stays in ``ids`` until :meth:`finished`."""
        cmd = self.lanes.lanes[lane].pop()
        if cmd is not None:
            self.expiring -= _expiring(cmd)
        return cmd

    def oldest(self, lane: Lane) -> float | None:
        """When the longest-waiting command held in ``lane`` became ready (epoch s)."""
        q = self.lanes.lanes[lane]
        if not q:
            return None
        return min(self.since.get(c.item_id, float("inf")) for c in q.values())

    def finished(self, cmd: ItemCommand) -> None:
        self.ids.discard(cmd.item_id)
        self.since.pop(cmd.item_id, None)

    def drop(self, lane: Lane) -> int:
        """Drop the commands held in ``lane`` (still pending in Postgres); how many."""
        dropped = self.lanes.lanes[lane].remove_if(lambda c: True)
        for cmd in dropped:
            self.finished(cmd)
            self.expiring -= _expiring(cmd)
        return len(dropped)

    def clear(self) -> int:
        """Drop every held command (the guid goes to another sender); returns how many."""
        return self.drop("online") + self.drop("batch")

    def __len__(self) -> int:
        return len(self.lanes)

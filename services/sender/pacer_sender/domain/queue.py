"""One guid's in-memory window: an online lane and a batch lane, each urgent-first and fair
across jobs, bounded; Postgres holds the rest of the guid's queue.

Within a lane, items go by priority; within a priority, jobs take turns (start-time fair
queuing: each job's items get increasing virtual times, and a job that arrives late starts
at the current virtual time, so one large broadcast cannot starve the others and a new one
cannot starve it either).

The window only ever holds ready commands, at most ``cap`` per lane. A command that does
not fit, a scheduled one, or a doorbell without a readable command *rings*: the window
notes that Postgres may hold more ready work than it does (``more``), and the guid's worker
reads the next items from Postgres when its window runs low.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pacer_common.domain.commands import ItemCommand

from pacer_sender.domain.pacing import Lane, lane_of

T = TypeVar("T")
_arrival = itertools.count()


@dataclass(order=True)
class _Entry(Generic[T]):
    key: tuple[int, float, int]
    job: str = field(compare=False)
    value: T = field(compare=False)


class GuidQueue(Generic[T]):
    def __init__(self) -> None:
        self._ready: list[_Entry[T]] = []
        self._vtime = 0.0
        self._job_v: dict[str, float] = {}

    def push(self, value: T, priority: int, job: str = "") -> None:
        v = max(self._job_v.get(job, 0.0), self._vtime) + 1.0
        self._job_v[job] = v
        heapq.heappush(self._ready, _Entry((priority, v, next(_arrival)), job, value))

    def pop(self) -> T | None:
        if not self._ready:
            return None
        e = heapq.heappop(self._ready)
        self._vtime = e.key[1]
        if not self._ready:
            self._job_v.clear()  # idle: nobody is owed anything any more
        return e.value

    def remove_if(self, pred: Callable[[T], bool]) -> list[T]:
        """Drop the entries for which ``pred(value)`` holds; return their values."""
        dropped = [e.value for e in self._ready if pred(e.value)]
        self._ready = [e for e in self._ready if not pred(e.value)]
        heapq.heapify(self._ready)
        return dropped

    def __len__(self) -> int:
        return len(self._ready)


class GuidLanes(Generic[T]):
    """The two lanes of one guid."""

    def __init__(self) -> None:
        self.lanes: dict[Lane, GuidQueue[T]] = {"online": GuidQueue(), "batch": GuidQueue()}

    def push(self, value: T, priority: int, job: str = "") -> None:
        self.lanes[lane_of(priority)].push(value, priority, job)

    def remove_if(self, pred: Callable[[T], bool]) -> list[T]:
        return [v for q in self.lanes.values() for v in q.remove_if(pred)]

    def __len__(self) -> int:
        return sum(len(q) for q in self.lanes.values())


class GuidWindow:
    """The ready commands of one guid held in memory (at most ``cap`` per lane), and
    whether Postgres may hold more ready work for it than the window does."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.lanes: GuidLanes[ItemCommand] = GuidLanes()
        self.ids: set[str] = set()  # in the window or being executed: never held twice
        self.more = False
        self.rings = 0  # doorbells not held since the start (a refill reads what they rang for)

    def ring(self) -> None:
        """Postgres has work for this guid that the window does not hold."""
        self.more = True
        self.rings += 1

    def offer(self, cmd: ItemCommand, room: bool = True) -> bool:
        """Hold ``cmd`` if its lane has room (and ``room``: the sender's memory allows);
        otherwise ring. While Postgres holds more than the window, a batch command rings too:
        the guid's next batch items are then chosen in Postgres, among all of its ready work,
        not by arrival. True if the window holds it now (or already did)."""
        if cmd.item_id in self.ids:
            return True
        lane = lane_of(cmd.priority)
        if not room or len(self.lanes.lanes[lane]) >= self.cap or (self.more and lane == "batch"):
            self.ring()
            return False
        self.put(cmd)
        return True

    def put(self, cmd: ItemCommand) -> None:
        """Hold ``cmd`` whatever the cap (an item put back after a failed attempt)."""
        self.ids.add(cmd.item_id)
        self.lanes.push(cmd, cmd.priority, cmd.job_id)

    def refill_size(self) -> int:
        """How many items to read from Postgres now: none unless it may hold more and the
        window has run down to half."""
        if not self.more or len(self.lanes) > self.cap // 2:
            return 0
        return self.cap - len(self.lanes)

    def refilled(self, cmds: Iterable[ItemCommand], asked: int, rings_before: int) -> int:
        """Take what a refill read; returns how many were new. Postgres had no more ready
        work than that if it gave fewer than asked and nothing rang meanwhile."""
        got = new = 0
        for cmd in cmds:
            got += 1
            if cmd.item_id not in self.ids:
                self.put(cmd)
                new += 1
        if got < asked and self.rings == rings_before:
            self.more = False
        return new

    def take(self, lane: Lane) -> ItemCommand | None:
        """The lane's next command; it stays in ``ids`` until :meth:`finished`."""
        return self.lanes.lanes[lane].pop()

    def finished(self, cmd: ItemCommand) -> None:
        self.ids.discard(cmd.item_id)

    def clear(self) -> int:
        """Drop every held command (the guid goes to another sender); returns how many."""
        dropped = self.lanes.remove_if(lambda c: True)
        for cmd in dropped:
            self.ids.discard(cmd.item_id)
        return len(dropped)

    def __len__(self) -> int:
        return len(self.lanes)

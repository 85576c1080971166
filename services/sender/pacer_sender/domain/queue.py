"""One guid's queues: an online lane and a batch lane, each urgent-first and fair across jobs.

Within a lane, items go by priority; within a priority, jobs take turns (start-time fair
queuing: each job's items get increasing virtual times, and a job that arrives late starts
at the current virtual time, so one large broadcast cannot starve the others and a new one
cannot starve it either). Scheduled items (``not_before``) wait aside until due.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pacer_sender.domain.pacing import Lane, lane_of

T = TypeVar("T")
_arrival = itertools.count()


@dataclass(order=True)
class _Entry(Generic[T]):
    key: tuple[float, float, int]
    priority: int = field(compare=False)
    job: str = field(compare=False)
    value: T = field(compare=False)


class GuidQueue(Generic[T]):
    def __init__(self) -> None:
        self._ready: list[_Entry[T]] = []
        self._deferred: list[_Entry[T]] = []
        self._vtime = 0.0
        self._job_v: dict[str, float] = {}

    def push(self, value: T, priority: int, due_at: float | None = None, job: str = "") -> None:
        if due_at is not None:
            heapq.heappush(self._deferred, _Entry((due_at, 0.0, next(_arrival)), priority, job, value))
            return
        v = max(self._job_v.get(job, 0.0), self._vtime) + 1.0
        self._job_v[job] = v
        heapq.heappush(self._ready, _Entry((priority, v, next(_arrival)), priority, job, value))

    def pop(self, now: float) -> T | None:
        while self._deferred and self._deferred[0].key[0] <= now:
            e = heapq.heappop(self._deferred)
            self.push(e.value, e.priority, None, e.job)
        if not self._ready:
            return None
        e = heapq.heappop(self._ready)
        self._vtime = e.key[1]
        if not self._ready and not self._deferred:
            self._job_v.clear()  # idle: nobody is owed anything any more
        return e.value

    def next_due(self) -> float | None:
        return self._deferred[0].key[0] if self._deferred else None

    def has_ready(self) -> bool:
        return bool(self._ready)

    def remove_if(self, pred: Callable[[T], bool]) -> list[T]:
        """Drop the entries for which ``pred(value)`` holds; return their values."""
        dropped: list[T] = []
        for heap in (self._ready, self._deferred):
            kept = []
            for e in heap:
                (dropped.append(e.value) if pred(e.value) else kept.append(e))  # type: ignore[func-returns-value]
            heap[:] = kept
            heapq.heapify(heap)
        return dropped

    def __len__(self) -> int:
        return len(self._ready) + len(self._deferred)


class GuidLanes(Generic[T]):
    """The two lanes of one guid."""

    def __init__(self) -> None:
        self.lanes: dict[Lane, GuidQueue[T]] = {"online": GuidQueue(), "batch": GuidQueue()}

    def push(self, value: T, priority: int, due_at: float | None = None, job: str = "") -> None:
        self.lanes[lane_of(priority)].push(value, priority, due_at, job)

    def remove_if(self, pred: Callable[[T], bool]) -> list[T]:
        return [v for q in self.lanes.values() for v in q.remove_if(pred)]

    def __len__(self) -> int:
        return sum(len(q) for q in self.lanes.values())

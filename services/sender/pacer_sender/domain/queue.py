"""One guid's queue: urgent items first, scheduled items held aside until they are due."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
_arrival = itertools.count()


@dataclass(order=True)
class _Entry(Generic[T]):
    key: tuple[float, int]
    priority: int = field(compare=False)
    value: T = field(compare=False)


class GuidQueue(Generic[T]):
    """Ready items by (priority, arrival); deferred items by due time (monotonic seconds)."""

    def __init__(self) -> None:
        self._ready: list[_Entry[T]] = []
        self._deferred: list[_Entry[T]] = []

    def push(self, value: T, priority: int, due_at: float | None = None) -> None:
        seq = next(_arrival)
        if due_at is None:
            heapq.heappush(self._ready, _Entry((priority, seq), priority, value))
        else:
            heapq.heappush(self._deferred, _Entry((due_at, seq), priority, value))

    def pop(self, now: float) -> T | None:
        while self._deferred and self._deferred[0].key[0] <= now:
            e = heapq.heappop(self._deferred)
            heapq.heappush(self._ready, _Entry((e.priority, e.key[1]), e.priority, e.value))
        return heapq.heappop(self._ready).value if self._ready else None

    def next_due(self) -> float | None:
        return self._deferred[0].key[0] if self._deferred else None

    def remove_if(self, pred: Callable[[T], bool]) -> list[T]:
        """Drop the entries for which ``pred(value)`` holds; return their values."""
        dropped: list[T] = []
        for heap in (self._ready, self._deferred):
            kept = [e for e in heap if not pred(e.value)]
            dropped.extend(e.value for e in heap if pred(e.value))
            heap[:] = kept
            heapq.heapify(heap)
        return dropped

    def __len__(self) -> int:
        return len(self._ready) + len(self._deferred)

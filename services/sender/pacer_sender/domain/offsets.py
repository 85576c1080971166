"""Which offset of a partition is safe to commit while items finish out of order."""

from __future__ import annotations

import heapq


class PartitionOffsets:
    """Tracks the offsets handed out and finished; the commit point is the lowest unfinished."""

    def __init__(self) -> None:
        self._outstanding: list[int] = []
        self._done: set[int] = set()
        self._next = -1  # one past the highest offset seen
        self.committed = -1

    def add(self, offset: int) -> None:
        heapq.heappush(self._outstanding, offset)
        self._next = max(self._next, offset + 1)

    def done(self, offset: int) -> None:
        self._done.add(offset)
        while self._outstanding and self._outstanding[0] in self._done:
            self._done.discard(heapq.heappop(self._outstanding))

    def commit_point(self) -> int | None:
        """The offset to commit (next to read), or None if nothing was seen."""
        if self._next < 0:
            return None
        return self._outstanding[0] if self._outstanding else self._next

    def __len__(self) -> int:
        return len(self._outstanding)

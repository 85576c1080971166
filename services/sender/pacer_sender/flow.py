"""Flow control of the doorbells: how many ready commands the guids' windows hold in memory.

Each guid's window holds at most ``guid_cap`` commands per lane; all windows together hold
at most ``max_buffered`` batch commands (online commands are always held, up to a window
each). Past either limit a command only rings its guid, and the guid reads its work from
Postgres when it gets to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.requests import lane_of
from pacer_sender.domain.queue import GuidWindow


class Buffer:
    """The count of commands held by every guid's window, against its limits."""

    def __init__(self, guid_cap: int, max_buffered: int) -> None:
        self.guid_cap = guid_cap
        self.max_buffered = max_buffered
        self.held = 0

    def admits(self, cmd: ItemCommand) -> bool:
        """Whether memory allows holding ``cmd`` (its window may still be full)."""
        return lane_of(cmd.priority) == "online" or self.held < self.max_buffered

    def full(self, window: GuidWindow) -> bool:
        """Whether a batch command for this window would not be held (its head is enough)."""
        return len(window.lanes.lanes["batch"]) >= self.guid_cap or self.held >= self.max_buffered

    def read_size(self, wanted: int) -> int:
        """How many items a refill may read: one while memory is full (enough to keep the
        guid going)."""
        return min(wanted, 1) if self.held >= self.max_buffered else wanted

    @contextmanager
    def tracking(self, window: GuidWindow) -> Iterator[None]:
        """Count whatever the window gains or loses inside the block."""
        before = len(window)
        try:
            yield
        finally:
            self.held += len(window) - before

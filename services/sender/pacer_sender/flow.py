"""Flow control of the doorbells: how many ready commands the guids' windows hold in memory.

Each guid's window holds at most ``guid_cap`` commands per lane (up to ``guid_cap_max`` while
its backlog is deep, within its share of ``max_buffered``); all windows together hold
about ``max_buffered`` batch commands (online commands are always held, up to a window
each). Past either limit a command only rings its guid, and the guid reads its work from
Postgres when it gets to it.

Refills under way count against the budget from the moment they are asked: the thousands of
guids a sender starts or takes over at once all ask before any read is answered, and counted
only once answered, each read its whole window (10,000 guids with deep queues: 400,000
commands held against a budget of 20,000, 1.3 GiB). Once memory is short, a window reads
only when it is empty, and then its share of the budget (``max_buffered`` over the guids with
windows, at least one item): read one at a time once memory was full, every send of a guid
with a deep queue cost a read of its own, twice the CPU per send.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.requests import lane_of
from pacer_sender.domain.queue import GuidWindow


class Buffer:
    """The count of commands held by every guid's window, against its limits."""

    def __init__(self, guid_cap: int, max_buffered: int, windows: Callable[[], int] = lambda: 1,
                 guid_cap_max: int | None = None) -> None:
        self.guid_cap = guid_cap
        self.guid_cap_max = max(guid_cap, guid_cap_max or guid_cap)  # a deep backlog's window (GuidWindow)
        self.max_buffered = max_buffered
        self.windows = windows  # how many guids have a window now
        self.held = 0
        self.reading = 0  # items asked of Postgres by refills not yet answered

    def admits(self, cmd: ItemCommand) -> bool:
        """Whether memory allows holding ``cmd`` (its window may still be full)."""
        return lane_of(cmd.priority) == "online" or self.held + self.reading < self.max_buffered

    def full(self, window: GuidWindow) -> bool:
        """Whether a batch command for this window would not be held (its head is enough)."""
        return len(window.lanes.lanes["batch"]) >= window.cap or self.held + self.reading >= self.max_buffered

    def read_size(self, wanted: int, holding: int) -> int:
        """How many of ``wanted`` items a refill of a window holding ``holding`` may read now
        (0: not yet): all while memory allows; once it is short, none while the window still
        holds work, and its share of the budget (the budget over the guids with windows, at
        least one item) once it holds none. So the windows hold at most about twice the
        budget: what came first, and a share each."""
        room = self.max_buffered - self.held - self.reading
        if wanted <= room:
            return wanted
        if holding:
            return 0
        return min(wanted, max(1, room, self.share()))

    def share(self) -> int:
        """A window's share of the budget: ``max_buffered`` over the guids with windows."""
        return self.max_buffered // max(1, self.windows())

    @contextmanager
    def reading_for(self, n: int) -> Iterator[None]:
        """A refill of ``n`` items under way: counted against the budget until answered."""
        self.reading += n
        try:
            yield
        finally:
            self.reading -= n

    def count(self, n: int) -> None:
        """A window gained (or, negative, lost) ``n`` commands: each window reports every change
        of what it holds (``GuidWindow(counted=…)``), whatever caused it. Counted around the
        callers' blocks instead, a batch lane dropped by a doorbell read only for its head was
        never counted out: ``held`` kept up to ``guid_cap`` phantom items each time, reached
        ``max_buffered`` and never came down, and then no window with work read again."""
        self.held += n

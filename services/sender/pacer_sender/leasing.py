"""The dispatcher's guid-lease bookkeeping: a guid's lease is taken before its first send
(its pacing resumes where the previous holder left off) and given back once the guid's
partition went and no item of it is in hand, or once the guid has had no worker for
``idle_s``: a lease held is a row renewed three times per TTL, and a sender holding every
guid it ever sent for would renew thousands of idle ones for nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pacer_common.db.errors import TransientError
from pacer_sender.domain.pacing import GuidPacer, Limits
from pacer_sender.leases import GuidLeases

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(self, leases: GuidLeases, clock: Callable[[], float], idle_s: float = 60.0) -> None:
        self.leases = leases
        self.clock = clock
        self.idle_s = idle_s
        self.idle_since: dict[str, float] = {}  # held guids whose worker ended → when
        self._releasing: set[asyncio.Future[None]] = set()
        leases.idle = self.idle
        leases.clock = clock

    def busy(self, guid: str) -> None:
        """A worker started for the guid."""
        self.idle_since.pop(guid, None)

    def rested(self, guid: str) -> None:
        """The guid's worker ended with nothing to do: its lease goes back after ``idle_s``."""
        if self.holds(guid):
            self.idle_since[guid] = self.clock()

    def idle(self) -> list[str]:
        """Held guids without a worker for ``idle_s`` (no longer counted as idle: given back)."""
        now = self.clock()
        due = [g for g, since in self.idle_since.items() if now - since >= self.idle_s]
        for g in due:
            del self.idle_since[g]
        return [g for g in due if self.holds(g)]

    def holds(self, guid: str) -> bool:
        return guid in self.leases.held

    async def take(self, guid: str, pacer: GuidPacer, limits: Limits) -> bool:
        """Hold the guid's lease (taking it if need be); False while another sender holds it
        or the database cannot be reached."""
        if self.holds(guid):
            return True
        try:
            lease = await self.leases.acquire(guid)
        except TransientError:
            log.exception("guid lease for %s not taken; trying again", guid)
            return False
        if lease is None:
            return False  # another sender still holds the guid (finishing, or not yet expired)
        if not self.leases.regained(guid, lease.epoch):
            since = None if lease.last_send_at is None else (lease.db_now - lease.last_send_at).total_seconds()
            pacer.resume_after(self.clock(), since, limits, lease.windows, lease.penalty, lease.quiet_s)
        else:  # its pacing here is the whole truth, its penalty worn by the time it was away
            pacer.rest(self.clock(), limits)
            if lease.quiet_s:  # but for a quiet another caller left on the row meanwhile (a lookup's)
                pacer.hush(self.clock() + lease.quiet_s)
        return True

    def penalized(self, guid: str, multiplier: float, rose: bool, quiet_until: float | None = None) -> None:
        """The guid's rate-limit penalty or the quiet its gateway asked for (until
        ``quiet_until``, by this keeper's clock) changed (``rose``: slowed it more): its lease
        row carries them to the next owner."""
        self.leases.penalized(guid, multiplier, rose, quiet_until)

    def lost(self, guid: str) -> None:
        """The database says the lease is gone (``guid_lost``)."""
        self.leases.forget(guid)

    def hand_back(self, guid: str) -> None:
        """Give the guid's lease back in the background (its worker ended after its partition
        went), and forget the guid as :meth:`release` does."""
        if not self.holds(guid):
            return
        task = asyncio.ensure_future(self._hand_back(guid))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def release(self, gone: Callable[[str], bool], in_hand: set[str]) -> None:
        """Give back every lease of a guid that went (idle guids keep theirs, so workers or
        not), except those with an item still in hand: their workers give them back when it
        is done. What this sender remembers of the guids that went is dropped: the next to
        take one, this sender included, resumes its pacing from the lease row."""
        await self.leases.release([guid for guid in list(self.leases.held) if gone(guid) and guid not in in_hand])
        self._forget(gone)

    async def _hand_back(self, guid: str) -> None:
        await self.leases.release([guid])
        self._forget(lambda g: g == guid)

    def _forget(self, gone: Callable[[str], bool]) -> None:
        for book in (self.idle_since, self.leases.released_at):
            for guid in [g for g in book if gone(g)]:
                del book[guid]

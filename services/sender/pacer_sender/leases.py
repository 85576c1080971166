"""This sender's guid leases: taken before a guid's first item, renewed, released on revoke.

Kafka's partition assignment decides who *should* run a guid; the lease in Postgres decides
who *may*. A sender that lost a lease (paused past its expiry, cut off from the database,
force-released by an admin) finds out at its next renewal — which keeps a lease only while
its owner and epoch are still ours — or, at the latest, when ``pacer_begin_send`` refuses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from pacer_common.db.batching import Batcher
from pacer_common.lifecycle import attempt
from pacer_sender.domain.pacing import quiet_left
from pacer_sender.ports import GuidLease, GuidLeaseStore, Slowdown

log = logging.getLogger(__name__)


class GuidLeases:
    def __init__(self, store: GuidLeaseStore, owner: str, ttl_s: float) -> None:
        self.store = store
        self.owner = owner
        self.ttl_s = ttl_s
        self.held: dict[str, int] = {}  # guid → lease epoch
        self.takeovers = 0
        self.on_takeover: Callable[[], None] = lambda: None  # a metric's hook
        self.lost = 0
        # Guids asking for their lease in the same instant are taken in one statement.
        self._batch: Batcher[str, GuidLease | None] = Batcher(self._acquire_many)
        # Likewise releases: a rebalance hands thousands of guids back at once, each from its
        # own worker; one statement each cost a sender at 10,000 guids 1.7 s of database time.
        self._releases: Batcher[str, None] = Batcher(self._release_many)
        self._giving_back: set[asyncio.Future[None]] = set()
        # Released guids: the epoch each was given back at, and the release under way. Taken
        # again at the next epoch, nobody held the guid meanwhile (epochs move only when the
        # owner changes), so this sender's own pacing of it is still the whole truth.
        self.released_at: dict[str, int] = {}
        self._releasing: dict[str, asyncio.Future[list[None]]] = {}
        # Guids held but idle long enough to give back at the next renewal (``keep_renewed``).
        self.idle: Callable[[], list[str]] = lambda: []
        # Rate-limit penalties and gateways' quiets changed since the last write: guid → (epoch
        # held, multiplier, when the quiet ends by ``clock``, if one was asked). One write at a
        # time: a release waits for the one under way (whose guids it may hold) and a failed
        # write's values never come back over a newer one's.
        self.penalties: dict[str, tuple[int, float, float | None]] = {}
        self.clock: Callable[[], float] = time.monotonic  # the clock of the quiets' ends (the dispatcher's)
        # A renewal found a quiet a gateway asked of a held guid (guid, seconds left): another
        # caller's, a reconciler's lookup say; the dispatcher holds the guid's pacer to it.
        self.quiet: Callable[[str, float], None] = lambda guid, seconds: None
        self._writing = asyncio.Lock()
        # A penalty that rose is written at once, in the background (``_write_rises``).
        self._rose = False
        self._rises: asyncio.Future[None] | None = None

    async def _acquire_many(self, guids: Sequence[str]) -> list[GuidLease | None]:
        got = {lease.guid: lease for lease in await self.store.acquire(list(dict.fromkeys(guids)), self.owner)}
        return [got.get(g) for g in guids]

    async def _release_many(self, guids: Sequence[str]) -> list[None]:
        await self.store.release(list(dict.fromkeys(guids)), self.owner)
        return [None] * len(guids)

    async def acquire(self, guid: str) -> GuidLease | None:
        """Take the guid's lease if it is free, expired or ours; None while another holds it."""
        releasing = self._releasing.get(guid)
        if releasing is not None:  # given back a moment ago: taken again after, never before
            await asyncio.wait([releasing])
        asked = asyncio.ensure_future(self._batch.submit(guid))
        try:
            lease = await asyncio.shield(asked)
        except asyncio.CancelledError:
            # The worker was stopped (its partition was revoked) while the statement ran: a
            # lease taken for it is given back at once, not left to block the next owner
            # until it expires.
            asked.add_done_callback(self._give_back)
            raise
        if lease is None:
            self.held.pop(guid, None)
            return None
        self.held[guid] = lease.epoch
        if lease.took_over:
            self.takeovers += 1
            self.on_takeover()
            log.info("took over the lease of guid %s", guid)
        return lease

    def _give_back(self, asked: asyncio.Future[GuidLease | None]) -> None:
        if asked.cancelled() or asked.exception() is not None:
            return
        lease = asked.result()
        if lease is None:
            return
        guid = lease.guid
        if guid not in self.held:
            task = asyncio.ensure_future(self._releases.submit(guid))
            self._giving_back.add(task)
            task.add_done_callback(self._giving_back.discard)

    def forget(self, guid: str) -> None:
        """The database says the lease is gone (``guid_lost``)."""
        if self.held.pop(guid, None) is not None:
            self.lost += 1

    async def renew(self) -> None:
        """Extend the leases still ours. One whose owner or epoch moved (force-released by an
        admin, taken over after expiry) is forgotten: this sender stops sending for it and
        may take it again only through ``acquire``, like any other sender. A quiet a gateway
        asked of a guid kept (written by another caller since the take) is passed on (``quiet``)."""
        if not self.held:
            return
        asked = dict(self.held)
        kept = await self.store.renew(asked, self.owner)
        for guid, left in kept.items():
            if left and self.held.get(guid) == asked.get(guid):
                self.quiet(guid, left)
        for guid, epoch in asked.items():
            # Only the lease we asked about: one re-taken meanwhile has a new epoch of its own.
            if guid not in kept and self.held.get(guid) == epoch:
                log.warning("lease of guid %s lost (epoch %s is no longer ours)", guid, epoch)
                self.forget(guid)

    def penalized(self, guid: str, multiplier: float, rose: bool = False, quiet_until: float | None = None) -> None:
        """The guid's rate-limit penalty is now ``multiplier`` (1: none) and the gateway asked
        it to keep quiet until ``quiet_until`` (by :attr:`clock`; None: never). The penalty is
        written under the epoch held now (a guid no longer held keeps what it had); the quiet
        whoever holds the guid, as it is the gateway's. One that ``rose`` (a quiet asked
        for is one) is written at once, in the background: a sender killed before its next
        renewal would otherwise take it along, and the next owner meet the gateway's limit
        afresh, or call it inside the quiet it asked for. One that fell waits for the renewal,
        so the row errs on the slow side."""
        epoch = self.held.get(guid)
        if epoch is None:
            if quiet_until is None:
                return
            epoch = -1  # no lease of ours (lost meanwhile): the quiet alone reaches the row, as it does whoever holds it
        self.penalties[guid] = (epoch, multiplier, quiet_until)
        if rose:
            self._rose = True
            if self._rises is None or self._rises.done():
                self._rises = asyncio.ensure_future(self._write_rises())

    async def _write_rises(self) -> None:
        """Write the changed penalties while any rose since the last write: a storm of rate
        limits is written a few statements at a time, not one per guid."""
        while self._rose:
            self._rose = False
            try:
                await self.write_penalties()
            except Exception:  # kept for the next write (a rise, or the next renewal)
                log.exception("rate-limit penalties not written at once; tried again with the next renewal")
                return

    async def close(self) -> None:
        """Wait for the prompt write of risen penalties under way, if any (at shutdown)."""
        if self._rises is not None:
            await self._rises

    async def write_penalties(self) -> None:
        """Write the penalties changed since the last write, after any write under way; those
        a failed write took are kept for the next, under any changed since."""
        async with self._writing:
            if not self.penalties:
                return
            changed, self.penalties = self.penalties, {}
            now = self.clock()
            try:
                await self.store.penalize({
                    guid: Slowdown(epoch, multiplier, quiet_left(quiet, now))
                    for guid, (epoch, multiplier, quiet) in changed.items()}, lambda: self.clock() - now)
            except BaseException:
                self.penalties = changed | self.penalties
                raise

    def regained(self, guid: str, epoch: int) -> bool:
        """Whether ``epoch``, just taken, follows this sender's own release of the guid with
        no other holder between (nor a forced release, which moves the epoch too)."""
        return self.released_at.pop(guid, None) == epoch - 1

    async def release(self, guids: Iterable[str]) -> None:
        """Give the leases back; releases asked for in the same instant go as one statement.
        They are no longer held from the call on: a worker asking for one meanwhile takes it
        again once the release is done."""
        mine = [g for g in guids if g in self.held]
        if not mine:
            return
        for g in mine:
            self.released_at[g] = self.held.pop(g)
        done = asyncio.ensure_future(self._release_many_penalized(mine))
        for g in mine:
            self._releasing[g] = done

        def finished(f: asyncio.Future[list[None]]) -> None:
            for g in mine:
                if self._releasing.get(g) is f:
                    del self._releasing[g]
            if not f.cancelled():
                f.exception()  # raised to the caller, if it still awaits; never "never retrieved"

        done.add_done_callback(finished)
        await asyncio.shield(done)

    async def _release_many_penalized(self, guids: list[str]) -> list[None]:
        """Release the guids, their changed penalties written first (or the write under way,
        which may hold them, finished): the next owner reads them. A penalty is advice to the
        next owner; a lease held on is a guid nobody sends for, so the release goes on whatever
        the write met."""
        if self._writing.locked() or any(g in self.penalties for g in guids):
            try:
                await self.write_penalties()
            except Exception:
                log.exception("rate-limit penalties not written; the leases are released all the same")
        return await asyncio.gather(*(self._releases.submit(g) for g in guids))

    async def keep_renewed(self, stop: asyncio.Event, on_error: Callable[[], None] | None = None) -> None:
        """Three times per TTL until ``stop``: give back the leases of guids idle long enough
        (``idle``), renew the rest, then write the penalties changed meanwhile (a slow write
        never holds a renewal up). A step that fails, whatever the error, is logged and
        counted (``on_error``) and the rounds go on, still three per TTL (a lease not renewed
        within its TTL lapses; begin_send tells the guid's worker): penalties not written are
        kept for the next round."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.ttl_s / 3)
            if stop.is_set():
                return
            await attempt(self._renewal, "renewing guid leases", on_error)
            await attempt(self.write_penalties, "writing rate-limit penalties", on_error)

    async def _renewal(self) -> None:
        await self.release(self.idle())
        await self.renew()

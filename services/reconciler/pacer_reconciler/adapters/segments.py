"""Segment leases: one lease row per segment in ``leader_leases`` (the leader lease,
generalised), plus one membership row per replica, all kept over one connection.

Each segment lease has the leader lease's rules (``pacer_common.db.leader``): renewed every
TTL/3, believed only until TTL after the start of its last renewal (monotonic clock), taken
by another replica only once the database clock says it expired, and a takeover bumps its
epoch, which fences the segment's cursor writes. Which segments to claim or release is the
pure rule in :mod:`pacer_reconciler.domain.segments`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid

import psycopg
from psycopg.rows import TupleRow

from pacer_common.db.leader import close_quietly, lease_connection
from pacer_common.db.sql import loader, query
from pacer_reconciler.domain.segments import balance, segment_names

log = logging.getLogger(__name__)
_sql = loader("pacer_reconciler.adapters.sql")


class SegmentLease:
    """One segment's lease as this replica sees it; ``name`` and ``epoch`` are what a fenced
    write names."""

    def __init__(self, segment: int, name: str) -> None:
        self.segment = segment
        self.name = name
        self.epoch: int | None = None
        self.valid_until = 0.0  # monotonic

    @property
    def held(self) -> bool:
        return self.epoch is not None and time.monotonic() < self.valid_until


class SegmentLeases:
    def __init__(self, url: str, prefix: str, n: int, *, ttl_s: float = 10.0, holder: str | None = None) -> None:
        if ttl_s <= 0 or n < 1:
            raise ValueError("ttl_s must be > 0 and n >= 1")
        self.url = url
        self.prefix = prefix
        self.n = n
        self.ttl_s = ttl_s
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.leases = {s: SegmentLease(s, name) for s, name in segment_names(prefix, n).items()}
        self.member = f"{prefix}/member/{self.holder}"
        # The membership row is a lease too, renewed at the epoch it was taken at: leader_take
        # renews a live row only for its holder at its epoch (with none, only once it expired,
        # and peers would count this replica out for the rest of that round).
        self.member_epoch: int | None = None
        self.replicas = 1  # live replicas seen in the last round, this one included
        self._conn: psycopg.AsyncConnection[TupleRow] | None = None

    def lease(self, segment: int) -> SegmentLease:
        return self.leases[segment]

    def owned(self) -> list[int]:
        """Segments held now (no I/O): a lease whose renewal is overdue is not."""
        return [s for s, lease in self.leases.items() if lease.held]

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew, claim and release on time until ``stop``; run it as a task of its own."""
        while not stop.is_set():
            ok = await self.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.ttl_s / 3 if ok else min(1.0, self.ttl_s / 3))

    async def step(self) -> bool:
        """One lease round: renew what is held, announce this replica, then claim or release
        by the balancing rule. False if the database could not be reached."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.ttl_s / 3):
                conn = await self._connection()
                for lease in self.leases.values():
                    if lease.epoch is not None:
                        await self._take(conn, lease, started)
                self.member_epoch = await self._take_row(conn, self.member, self.member_epoch)
                rows = await (await conn.execute(_sql("segment_view"), {"prefix": self.prefix})).fetchall()
                mine = set(self.owned())
                names = {lease.name: s for s, lease in self.leases.items()}
                taken = {names[name] for name, holder in rows if name in names and holder != self.holder}
                self.replicas = max(1, sum(1 for name, _ in rows if name.startswith(f"{self.prefix}/member/")))
                plan = balance(self.n, mine, taken, self.replicas)
                for s in plan.release:
                    await self._release(conn, self.leases[s])
                for s in plan.claim:
                    await self._take(conn, self.leases[s], started)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("segment leases: round failed (%s: %s); retrying", type(exc).__name__, exc)
            await self._drop_connection()
            return False
        return True

    async def _take_row(self, conn: psycopg.AsyncConnection[TupleRow], name: str, epoch: int | None) -> int | None:
        row = await (await conn.execute(query("leader_take"), {
            "name": name, "holder": self.holder, "ttl": self.ttl_s, "epoch": epoch})).fetchone()
        return int(row[0]) if row else None

    async def _take(self, conn: psycopg.AsyncConnection[TupleRow], lease: SegmentLease, started: float) -> None:
        epoch = await self._take_row(conn, lease.name, lease.epoch)
        if epoch is None:
            if lease.epoch is not None:
                log.warning("segment %s lost at epoch %s: taken over", lease.name, lease.epoch)
            lease.epoch = None
            return
        if epoch != lease.epoch:
            log.info("took segment %s at epoch %s", lease.name, epoch)
        lease.epoch = epoch
        lease.valid_until = started + self.ttl_s

    async def _release(self, conn: psycopg.AsyncConnection[TupleRow], lease: SegmentLease) -> None:
        epoch, lease.epoch = lease.epoch, None  # stop believing first, then free the row
        log.info("releasing segment %s (epoch %s) to a peer", lease.name, epoch)
        await conn.execute(query("leader_release"), {"name": lease.name, "holder": self.holder, "epoch": epoch})

    async def _connection(self) -> psycopg.AsyncConnection[TupleRow]:
        if self._conn is None or self._conn.closed:
            self._conn = await lease_connection(self.url, f"leases:{self.prefix}", self.ttl_s)
        return self._conn

    async def _drop_connection(self) -> None:
        await close_quietly(self._conn)
        self._conn = None

    async def release(self) -> None:
        """Give every segment and the membership up (a clean stop): peers take over at once."""
        with contextlib.suppress(psycopg.Error, OSError, TimeoutError):
            async with asyncio.timeout(2.0):
                conn = await self._connection()
                for lease in self.leases.values():
                    if lease.epoch is not None:
                        await self._release(conn, lease)
                await conn.execute(_sql("segment_leave"), {"name": self.member})
        for lease in self.leases.values():
            lease.epoch = None
        self.member_epoch = None
        await self._drop_connection()

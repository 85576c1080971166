"""Leadership for singleton duties: a lease row in Postgres with a TTL and a fencing epoch.

A session advisory lock cannot do this: a frozen (SIGSTOP) or half-dead leader keeps its TCP
connection, and Postgres keeps its lock for ever. A lease runs out instead. The holder renews
it every ``ttl/3``; it counts itself leader only until ``ttl`` after the start of its last
successful renewal (its own monotonic clock, which keeps running while it is stopped), and
the database lets a standby take the lease only once ``ttl`` has passed after that renewal
executed (the database clock). So the old leader always stops believing before the standby
starts, and writes only a leader may do are fenced with :func:`fence` on top of that.

Failover after a leader freezes or its host vanishes takes at most ``ttl`` (the lease runs
out) plus one standby poll (``ttl/3``) plus one round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from pacer_common.db.sql import query

log = logging.getLogger(__name__)


class LeadershipLost(Exception):
    """The lease is no longer held at the epoch a write names: the write must not happen."""


async def fence(conn: psycopg.AsyncConnection[Any], name: str, epoch: int | None) -> None:
    """Call first inside a leader-only transaction; raises :class:`LeadershipLost` unless the
    lease ``name`` is live at ``epoch``, and holds off any takeover until the transaction ends."""
    if epoch is None:
        raise LeadershipLost(f"not the leader of {name}")
    row = await (await conn.execute(query("leader_fence"), {"name": name, "epoch": epoch})).fetchone()
    if row is None:
        raise LeadershipLost(f"lease {name!r} at epoch {epoch} expired or taken over")


async def lease_connection(url: str, application_name: str, ttl_s: float) -> psycopg.AsyncConnection[TupleRow]:
    """A lease holder's own connection: every wait on it (connect, a statement, a dead peer
    seen by keepalives) is bounded by a third of the TTL, so a renewal never outlives it."""
    timeout = max(1, int(ttl_s / 3))
    return await psycopg.AsyncConnection.connect(
        url, autocommit=True, application_name=application_name, connect_timeout=timeout,
        keepalives=1, keepalives_idle=timeout, keepalives_interval=1, keepalives_count=3,
        options=f"-c statement_timeout={timeout * 1000}")


async def close_quietly(conn: psycopg.AsyncConnection[TupleRow] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error, OSError):
            await conn.close()


class LeaderLock:
    def __init__(self, url: str, name: str, *, ttl_s: float = 10.0, holder: str | None = None) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0")
        self.url = url
        self.name = name
        self.ttl_s = ttl_s
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.epoch: int | None = None  # the fencing token while leader
        self._valid_until = 0.0  # monotonic
        self._next_try = 0.0  # monotonic
        self._conn: psycopg.AsyncConnection[TupleRow] | None = None
        self._busy = asyncio.Lock()

    @property
    def is_leader(self) -> bool:
        """True while the last renewal is younger than the TTL; no I/O."""
        return self.epoch is not None and time.monotonic() < self._valid_until

    async def hold(self) -> bool:
        """True while this process holds the lease; renews it when due, or tries to take it."""
        if time.monotonic() >= self._next_try:
            await self._renew()
        if self.epoch is not None and not self.is_leader:
            log.warning("leadership of %s lapsed (epoch %s): not renewed within %gs", self.name, self.epoch, self.ttl_s)
            self.epoch = None
        return self.is_leader

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew (or try to take) the lease on time until ``stop``, whatever else the process
        is busy with: run it as a task of its own."""
        while not stop.is_set():
            await self.hold()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.05, self._next_try - time.monotonic()))

    async def _renew(self) -> None:
        async with self._busy:
            started = time.monotonic()
            if started < self._next_try:
                return  # renewed by another caller while this one waited
            budget = self.ttl_s / 3
            try:
                async with asyncio.timeout(budget):
                    conn = await self._connection()
                    row = await (await conn.execute(query("leader_take"), {
                        "name": self.name, "holder": self.holder, "ttl": self.ttl_s, "epoch": self.epoch})).fetchone()
            except (psycopg.Error, OSError, TimeoutError) as exc:
                log.warning("lease %s: renewal failed (%s: %s); retrying", self.name, type(exc).__name__, exc)
                await self._drop_connection()
                self._next_try = started + min(1.0, budget)
                return
            self._next_try = started + budget
            if row is None:
                if self.epoch is not None:
                    log.warning("leadership of %s lost at epoch %s: taken over", self.name, self.epoch)
                self.epoch = None
                return
            if row[0] != self.epoch:
                log.info("took leadership of %s at epoch %s", self.name, row[0])
            self.epoch = int(row[0])
            self._valid_until = started + self.ttl_s

    async def _connection(self) -> psycopg.AsyncConnection[TupleRow]:
        if self._conn is None or self._conn.closed:
            self._conn = await lease_connection(self.url, f"leader:{self.name}", self.ttl_s)
        return self._conn

    async def _drop_connection(self) -> None:
        await close_quietly(self._conn)
        self._conn = None

    async def release(self) -> None:
        """Give the lease up (a clean stop) so a standby takes over without waiting the TTL."""
        if self.epoch is not None and self._conn is not None:
            with contextlib.suppress(psycopg.Error, OSError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._conn.execute(query("leader_release"), {
                        "name": self.name, "holder": self.holder, "epoch": self.epoch})
        self.epoch = None
        await self._drop_connection()

"""Item writes for the sender, one statement (one transaction, one round trip) per step.

The steps are database functions (``pacer_common/db/schema/functions/``) built on the
guarded ``pacer_transition``: begin (claim + reserve key + submitted), confirm, settle.
Every write after the claim carries the lease epoch, so a worker whose lease was taken
over cannot record anything. Every write commits synchronously, whatever the server's
default (``pacer_common.db.durable``): the three steps' functions set it themselves and run
as single statements (``fetch_durable_call``).

A value the database refuses (``DataError``, an index row past its limit) is the item's
fault: it surfaces as :class:`UnstorableItem`, for that item alone — a batched statement
that fails for one item is run again item by item, so the others of the batch go on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import errors as pgerr
from psycopg.types.json import Jsonb

from pacer_common.db.batching import Batcher
from pacer_common.db.durable import fetch_durable_call, fetch_durably, synchronous_transaction
from pacer_common.db.errors import RefusedError, with_retry
from pacer_common.db.pool import Pool, one
from pacer_common.db.sql import loader
from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.limits import kept_window
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.status import ItemStatus as S
from pacer_sender.domain.decisions import Decision
from pacer_sender.domain.pacing import quiet_left
from pacer_sender.ports import Begun, GuidLease, Slowdown, UnstorableItem

# A value the database refuses, or that cannot even be encoded for it.
_ITEM_FAULTS = (psycopg.DataError, pgerr.ProgramLimitExceeded, RefusedError, UnicodeError)
RENEW_CHUNK = 500  # guid leases renewed per transaction


def storable(text: str | None, limit: int = 2000) -> str | None:
    """``text`` as a column can hold it: no NUL, bounded length."""
    if text is None:
        return None
    return text.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\0")[:limit]


def _windows(kept: Mapping[str, Any] | None) -> dict[str, tuple[int, float]]:
    """A lease's send windows as the database keeps them → name → (sends, end)."""
    found = {name: kept_window(name, value) for name, value in (kept or {}).items()}
    return {name: w for name, w in found.items() if w is not None}


def _unstorable(exc: BaseException) -> UnstorableItem:
    return UnstorableItem(storable(f"{type(exc).__name__}: {exc}".strip(), 500) or "")


async def move(pool: Pool, t: Transition, cmd: ItemCommand) -> bool:
    """Apply ``t`` to the item of ``cmd``; whether it moved."""

    async def work() -> bool:
        async with pool.connection() as conn, synchronous_transaction(conn):
            return bool(await apply(conn, t, [cmd.item_id]))

    try:
        return await with_retry(work)
    except _ITEM_FAULTS as exc:
        raise _unstorable(exc) from exc


def one_by_one(run_many: Callable[[Sequence[Any]], Awaitable[Sequence[Any]]]
               ) -> Callable[[Sequence[Any]], Awaitable[list[Any]]]:
    """``run_many``, but a batch the database refuses for an item's data runs again item by
    item: each request gets its result, or the :class:`UnstorableItem` of its own fault."""

    async def run(reqs: Sequence[Any]) -> list[Any]:
        try:
            return list(await run_many(reqs))
        except _ITEM_FAULTS as exc:  # the whole statement rolled back: nothing was written
            if len(reqs) == 1:
                return [_unstorable(exc)]
        return [r for req in reqs for r in await run([req])]

    return run


_sql = loader("pacer_sender.adapters.sql")


class PostgresItemRepository:
    def __init__(self, pool: Pool, lease_ttl: timedelta, max_batch: int = 500, linger_s: float = 0.0,
                 spare_linger_s: float = 0.0) -> None:
        self.pool = pool
        self.lease_ttl = lease_ttl
        self.linger_s = linger_s
        self.spare_linger_s = spare_linger_s  # most a step waits whose caller has time to spare
        # Steps asked for by different guid workers in the same instant, or within linger_s of
        # each other, go as one statement.
        self._begins: Batcher[tuple[ItemCommand, str], Begun | UnstorableItem] = Batcher(
            one_by_one(self._begin_many), max_batch, linger_s=linger_s)
        self._confirms: Batcher[tuple[ItemCommand, int, Receipt], bool | UnstorableItem] = Batcher(
            one_by_one(self._confirm_many), max_batch, linger_s=linger_s)

    async def _row(self, name: str, params: dict[str, Any]) -> Any:
        return (await self._rows(name, params))[0]

    async def expire(self, cmd: ItemCommand) -> bool:
        t = Transition("ItemExpired", S.EXPIRED, frozenset({S.PENDING}),
                       error_class="expired", error=f"expire_at {cmd.expire_at} passed before sending")
        return await self._move(t, cmd)

    async def _move(self, t: Transition, cmd: ItemCommand) -> bool:
        return await move(self.pool, t, cmd)

    async def begin_send(self, cmd: ItemCommand, owner: str) -> Begun:
        """Claim, reserve the idempotency key and write ``submitted``, durably, before sending."""
        got = await self._begins.submit((cmd, owner))
        if isinstance(got, UnstorableItem):
            raise got
        return got

    async def confirm(self, cmd: ItemCommand, epoch: int, receipt: Receipt, spare_s: float = 0.0) -> bool:
        """``submitted`` → ``confirmed``. ``spare_s``: how long the caller can wait for it without
        delaying anything (its guid's next send is no sooner); it waits for others' steps up to
        that long, within ``spare_linger_s``, to go with them as one statement."""
        linger = max(self.linger_s, min(spare_s, self.spare_linger_s))
        got = await self._confirms.submit((cmd, epoch, receipt), linger)
        if isinstance(got, UnstorableItem):
            raise got
        return got

    async def _begin_many(self, reqs: Sequence[tuple[ItemCommand, str]]) -> list[Begun]:
        out: list[Begun | None] = [None] * len(reqs)
        by_owner: dict[str, list[int]] = {}
        for i, (_, owner) in enumerate(reqs):
            by_owner.setdefault(owner, []).append(i)
        for owner, idx in by_owner.items():
            cmds = [reqs[i][0] for i in idx]
            sent_at, rows = await self._timed_rows("begin_send_many", {
                "items": [c.item_id for c in cmds], "owner": owner, "ttl": self.lease_ttl,
                "keys": [c.idem_key for c in cmds], "guids": [c.guid for c in cmds], "to_ids": [c.to_id for c in cmds],
            })
            for r in rows:
                out[idx[r["ord"] - 1]] = Begun(r["outcome"], r["epoch"], r["attempts"], r["holder"], sent_at,
                                               r["quiet_s"])
        begun = [b for b in out if b is not None]
        if len(begun) != len(out):
            raise RuntimeError("begin_send_many answered for fewer items than it was given")
        return begun

    async def _confirm_many(self, reqs: Sequence[tuple[ItemCommand, int, Receipt]]) -> list[bool]:
        rows = await self._rows("confirm_many", {
            "items": [c.item_id for c, _, _ in reqs], "epochs": [e for _, e, _ in reqs],
            "keys": [c.idem_key for c, _, _ in reqs], "receipts": [Jsonb(r.as_payload()) for _, _, r in reqs],
        })
        moved = [False] * len(reqs)
        for r in rows:
            moved[r["ord"] - 1] = bool(r["moved"])
        return moved

    async def _timed_rows(self, name: str, params: dict[str, Any]) -> tuple[float, list[Any]]:
        """The rows, and when the statement was sent: once a connection was in hand, so time
        spent waiting for the pool or a retry is not counted as time since the claim."""

        async def work() -> tuple[float, list[Any]]:
            async with self.pool.connection() as conn:
                sent_at = time.monotonic()
                return sent_at, await fetch_durable_call(conn, _sql(name), params)

        return await with_retry(work)

    async def _rows(self, name: str, params: dict[str, Any]) -> list[Any]:
        return (await self._timed_rows(name, params))[1]

    async def settle(self, cmd: ItemCommand, epoch: int, d: Decision, quiet_until: float | None = None) -> bool:
        params = {
            "item_id": cmd.item_id, "epoch": epoch, "idem_key": cmd.idem_key, "to": d.to.value, "type": d.event,
            "error_class": d.error_class, "error": storable(d.error), "next_attempt_at": d.next_attempt_at,
            "release": d.release_ledger, "hold_guid": d.guid_state and d.guid_state.value, "refund": d.refund,
        }
        if quiet_until is None or quiet_until <= time.monotonic():
            return bool((await self._row("settle", params))["moved"])

        async def work() -> bool:
            # One transaction: the rate limit on the item and the quiet on the guid's lease row
            # (settle_quiet.sql), committed synchronously; what is left of the quiet is taken
            # once a connection is in hand, so neither that wait nor a retry pushes its end later.
            async with self.pool.connection() as conn, synchronous_transaction(conn, pipeline=False):
                (row,) = await (await conn.execute(_sql("settle"), params)).fetchall()
                left = quiet_until - time.monotonic()
                if row["moved"] and left > 0:
                    await conn.execute(_sql("settle_quiet"), {"guid": cmd.guid, "seconds": left})
            return bool(row["moved"])

        return await with_retry(work)


async def check_time_zone(pool: Pool, name: str) -> None:
    """Refuse to start with a default time zone (``PACER_SENDER_TIMEZONE``, the session's
    ``pacer.timezone``) that the database does not know, or does not keep: its trigger counts
    the days of the guids without a zone of their own in it."""
    async with pool.connection() as conn:
        row = await one(conn, "SELECT current_setting('pacer.timezone', true) AS kept,"
                              " EXISTS (SELECT 1 FROM pg_timezone_names z"
                              "         WHERE z.name = current_setting('pacer.timezone', true)) AS known")
    if row["kept"] != name:
        raise ValueError(f"PACER_SENDER_TIMEZONE={name!r}: the database session did not keep it as pacer.timezone "
                         f"(it holds {row['kept']!r}); a connection pooler between the sender and Postgres must "
                         "pass startup options through")
    if not row["known"]:
        raise ValueError(f"PACER_SENDER_TIMEZONE={name!r}: the database does not know this time zone "
                         "(use an IANA name such as Asia/Shanghai)")


async def publish_limits(pool: Pool, owner: str, limits: Mapping[str, Any]) -> None:
    """This sender's own pacing defaults, for the readers of a guid's limits (``sender_limits``)."""
    async def work() -> None:
        async with pool.connection() as conn:
            await conn.execute(_sql("publish_limits"), {"owner": owner, "limits": Jsonb(dict(limits))})

    await with_retry(work)


class PostgresGuidLeases:
    """Guid leases (``pacer_acquire_guids``, ``pacer_release_guids``): take, keep and release.
    ``in_flight``: how long after its claim a send may still reach the gateway; a guid whose
    last send has no recorded answer is paced from its claim plus that."""

    def __init__(self, pool: Pool, ttl: timedelta, in_flight: timedelta = timedelta(0)) -> None:
        self.pool = pool
        self.ttl = ttl
        self.in_flight = in_flight

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        async def work() -> list[GuidLease]:
            async with self.pool.connection() as conn:
                rows = await fetch_durably(conn, _sql("acquire_guids"), {
                    "guids": list(guids), "owner": owner, "ttl": self.ttl, "in_flight": self.in_flight})
            return [GuidLease(r["guid"], r["epoch"], r["last_send_at"], r["took_over"], r["db_now"],
                              _windows(r["windows"]), r["penalty"], r["quiet_s"] or None) for r in rows]

        return await with_retry(work)

    async def renew(self, held: Mapping[str, int], owner: str) -> dict[str, float | None]:
        """Extend the leases still ours (owner and epoch); the guids kept. In chunks of
        ``RENEW_CHUNK`` guids, each its own short transaction: one statement over 10,000
        leases held all their row locks at once, stalling every claim and confirm of those
        guids while it ran."""
        guids = sorted(held)
        kept: dict[str, float | None] = {}
        for at in range(0, len(guids), RENEW_CHUNK):
            chunk = guids[at:at + RENEW_CHUNK]

            async def work(chunk: list[str] = chunk) -> dict[str, float | None]:
                async with self.pool.connection() as conn:
                    rows = await (await conn.execute(_sql("renew_guids"), {
                        "guids": chunk, "epochs": [held[g] for g in chunk], "owner": owner, "ttl": self.ttl})
                                  ).fetchall()
                return {r["guid"]: r["quiet_s"] or None for r in rows}

            kept |= await with_retry(work)
        return kept

    async def release(self, guids: Sequence[str], owner: str) -> int:
        async def work() -> int:
            async with self.pool.connection() as conn:
                (row,) = await fetch_durably(conn, _sql("release_guids"), {
                    "guids": list(guids), "owner": owner})
            return int(row["released"])

        return await with_retry(work)

    async def penalize(self, penalties: Mapping[str, Slowdown], since: Callable[[], float] = lambda: 0.0) -> None:
        """In chunks of ``RENEW_CHUNK`` guids, as the renewal: a gateway rate-limiting a whole
        fleet changes thousands of penalties at once. Each quiet is what was left of it when
        it was reckoned, less ``since()`` read once the statement has its connection."""
        guids = sorted(penalties)
        for at in range(0, len(guids), RENEW_CHUNK):
            chunk = guids[at:at + RENEW_CHUNK]

            async def work(chunk: list[str] = chunk) -> None:
                async with self.pool.connection() as conn:
                    lag = since()
                    await conn.execute(_sql("penalize_guids"), {
                        "guids": chunk, "epochs": [penalties[g].epoch for g in chunk],
                        "penalties": [penalties[g].penalty for g in chunk],
                        "quiet_s": [quiet_left(penalties[g].quiet_s, lag) for g in chunk]})

            await with_retry(work)


class PostgresLimitsSource:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def changed_since(self, after: int | None) -> list[tuple[str, dict[str, Any], int]]:
        """Rows changed by transactions committed after cursor ``after``, in commit order."""
        async def work() -> list[tuple[str, dict[str, Any], int]]:
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(_sql("changed_limits"), {
                    "after": str(after or 0)})).fetchall()
            return [(r["guid"], r["limits"], int(r["cursor"])) for r in rows]

        return await with_retry(work)

"""The event log reader, the projection writer and the sweeps, on Postgres."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from pacer_common.db.commands import pending_commands
from pacer_common.db.durable import synchronous_transaction
from pacer_common.db.errors import with_retry
from pacer_common.db.leader import fence
from pacer_common.db.plans import GENERIC_PLAN, fetch_prepared
from pacer_common.db.pool import Pool, one
from pacer_common.db.sql import loader, query
from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.events import ItemEvent
from pacer_common.domain.guid_health import StatusEvent
from pacer_common.domain.limits import Pacings
from pacer_common.domain.status import ItemStatus as S
from pacer_reconciler.adapters.job_labels import JobLabels
from pacer_reconciler.adapters.layout import segment_sql
from pacer_reconciler.domain.projection import count_deltas
from pacer_reconciler.domain.segments import SINGLETON_SEGMENT
from pacer_reconciler.domain.stalls import Quiet, stalled
from pacer_reconciler.domain.verification import verdict
from pacer_reconciler.ports import (
    LAST_SEQ,
    Applied,
    CursorGone,
    CursorMoved,
    InDoubt,
    Lease,
    Position,
    SweepKind,
    Unreadable,
)
from pacer_reconciler.verifier import QUIET_HOLD

_sql = loader("pacer_reconciler.adapters.sql")
log = logging.getLogger(__name__)
QUIET_FETCH = 2_000  # guids with shards that have not moved, fetched at a time for the stall count
# The leader's numbers are read in a tail's round: a transient failure is tried again only this
# long (a pool connection broken by a server restart), never the 60 s of other units of work;
# the next sweep reads them anyway.
STATS_RETRY_S = 2.0
# Why the expire_due sweep expired an item (its last error, and its ItemExpired's).
EXPIRED_QUEUED = "expire_at passed while the item waited to be sent"
# Why the submit_expired sweep put an item in doubt (its last error, and its ItemInDoubt's).
SUBMIT_EXPIRED = "lease expired after submit with no outcome"


_SWEEPS: dict[SweepKind, Transition] = {
    "retry_due": Transition("ItemRequeued", S.PENDING, frozenset({S.WAITING_RETRY})),
    # Claimed but never submitted: nothing was sent, so it may simply run again.
    "claim_expired": Transition("ItemLeaseExpired", S.PENDING, frozenset({S.CLAIMED}),
                                only_expired=True, clear_lease=True,
                                payload={"reason": "lease expired before submit; nothing was sent"}),
    # Submitted with no outcome: it may have been delivered, so it is verified, not resent. Its
    # event carries the error class as the sender's ItemInDoubt does, for consumers to read from
    # the outcome; its source tells the breakers it is our own sender's fault, counted neither
    # way (domain/breakers.py, LEASE_EXPIRED).
    "submit_expired": Transition("ItemInDoubt", S.RECOVERY_PENDING, frozenset({S.SUBMITTED}),
                                 only_expired=True, clear_lease=True, error_class="in_doubt",
                                 error=SUBMIT_EXPIRED,
                                 payload={"reason": "lease expired after submit", "source": "lease_expired",
                                          "error_class": "in_doubt", "error": SUBMIT_EXPIRED}),
    # Queued past its expire_at where no worker reaches it (its guid not online or paused, its
    # job paused or awaiting approval, its shard paused): expired as the sender expires one at
    # its turn (ItemExpired, error class ``expired``), never sent.
    "expire_due": Transition("ItemExpired", S.EXPIRED, frozenset({S.PENDING, S.WAITING_RETRY}),
                             error_class="expired", error=EXPIRED_QUEUED,
                             payload={"error_class": "expired", "error": EXPIRED_QUEUED}),
}


def _event(row: Any) -> ItemEvent | Unreadable:
    try:
        return ItemEvent.model_validate(row)
    except ValueError as exc:
        return Unreadable(int(row["seq"]), str(row.get("item_id")), str(exc).replace("\n", "; ")[:500])


class PostgresLog:
    """The event log of one segment (``segment`` of ``segments``, under the cursor
    ``cursor_name``) and the sweeps of the segments ``owned()`` returns; by default the one
    segment of a one-segment layout, i.e. everything."""

    def __init__(self, pool: Pool, cursor_name: str, verify_deadline: timedelta,
                 verify_after: timedelta = timedelta(seconds=15), *, leader: Lease | None = None,
                 segments: int = 1, segment: int = 0, owned: Callable[[], Sequence[int]] | None = None,
                 labels: JobLabels | None = None, own_cursor: bool = True) -> None:
        self.pool = pool
        self.labels = labels or JobLabels()  # shared by the segments of a process
        # A tail that owns its cursor makes it at its first commit; a segment's is made with its
        # layout (adopt_layout), and a missing one means another segment count took over.
        self.own_cursor = own_cursor
        self.leader = leader  # when set, the cursor moves only under its live lease epoch
        self.segments = segments
        self.segment = segment
        self.owned = owned or (lambda: [segment])
        self.cursor_name = cursor_name
        self.verify_deadline = verify_deadline
        self.verify_after = verify_after

    async def position(self) -> Position:
        async def work() -> Position:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(_sql("load_cursor"), {"name": self.cursor_name})).fetchone()
            if row is not None:
                return Position(row["xid"], row["last_seq"])
            if not self.own_cursor:
                raise CursorGone(f"cursor {self.cursor_name!r} does not exist: reconcilers of another segment count "
                                 "took over the event log. This replica applies nothing; restart it with their "
                                 "PACER_RECONCILER_SEGMENTS (docs/reliability.md, \"Changing the segment count\")")
            return Position("0", 0)

        return await with_retry(work)

    async def read(self, after: Position, limit: int) -> list[tuple[Position, ItemEvent | Unreadable]]:
        async def work() -> list[tuple[Position, ItemEvent | Unreadable]]:
            async with self.pool.connection() as conn:
                # Its generic plan: the range scan of the segment's index, whatever the
                # statistics say of the tail (pacer_common.db.plans).
                rows = await fetch_prepared(conn, GENERIC_PLAN, segment_sql("read_events", self.segments), {
                    "segment": self.segment, "xid": after.xid, "seq": after.seq, "limit": limit})
                await self.labels.label(conn, rows)
            return [(Position(r["xid"], r["seq"]), _event(r)) for r in rows]

        return await with_retry(work)

    async def quiet_position(self, after: Position) -> Position | None:
        """Where the segment's cursor may move with nothing read (``quiet_cursor.sql``):
        just before the oldest transaction still running, if no event of the segment lies
        between; None when it may not move."""
        async def work() -> Position | None:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(segment_sql("quiet_cursor", self.segments), {
                    "segment": self.segment, "xid": after.xid, "seq": after.seq})).fetchone()
            return None if row is None else Position(row["xid"], LAST_SEQ)

        return await with_retry(work)

    async def commit_batch(self, events: Sequence[ItemEvent], start: Position, to: Position) -> None:
        """Apply the batch's projection and advance the cursor, in one transaction.

        Raises :class:`CursorMoved` (and applies nothing) unless the cursor is still at
        ``start``: a batch is applied once, whatever retries or second readers happen.
        """
        deltas = count_deltas(events)

        async def work() -> None:
            async with self.pool.connection() as conn, conn.transaction():
                if self.leader is not None:  # a frozen-then-resumed old leader stops here
                    await fence(conn, self.leader.name, self.leader.epoch)
                if deltas:
                    keys = list(deltas)  # in key order: the rows' lock order (count_deltas)
                    await conn.execute(_sql("apply_counts"), {
                        "shards": [k[0] for k in keys], "statuses": [k[1].value for k in keys],
                        "deltas": [deltas[k] for k in keys],
                    })
                shards = sorted({ev.shard_id for ev in events})
                if shards:
                    rows = await (await conn.execute(_sql("refresh_shards"), {"shards": shards})).fetchall()
                    jobs = sorted({str(r["job_id"]) for r in rows if r["moves_job"]})
                    if jobs:
                        await conn.execute(_sql("lock_jobs"), {"jobs": jobs})
                        await conn.execute(_sql("refresh_jobs"), {"jobs": jobs})
                moved = await (await conn.execute(_sql("save_cursor"), {
                    "name": self.cursor_name, "xid": to.xid, "seq": to.seq,
                    "from_xid": start.xid, "from_seq": start.seq, "create": self.own_cursor})).fetchone()
                if moved is None:
                    raise CursorMoved(f"cursor {self.cursor_name!r} is no longer at {start}")

        await with_retry(work)

    async def items_for_dispatch(self, item_ids: Sequence[str]) -> list[ItemCommand]:
        if not item_ids:  # most batches re-queue nothing: no round trip for them
            return []
        return await pending_commands(self.pool, item_ids)

    # -- sweeps ---------------------------------------------------------------------------
    async def sweep(self, kind: SweepKind, limit: int) -> int:
        owned = list(self.owned())
        if kind == "release_held":  # not per guid: the owner of the singleton segment runs it
            return await self._release_held(limit) if SINGLETON_SEGMENT in owned else 0
        t = _SWEEPS[kind]

        async def work() -> int:
            async with self.pool.connection() as conn, conn.transaction():
                rows = await (await conn.execute(segment_sql(f"due_{kind}", self.segments),
                                                 {"limit": limit, "segments": owned})).fetchall()
                if not rows:
                    return 0
                return len(await apply(conn, t, [r["item_id"] for r in rows]))

        return await with_retry(work)

    async def _release_held(self, limit: int) -> int:
        """Held items whose holds are all lifted: pending → pending, so they are published again."""

        async def work() -> int:
            async with self.pool.connection() as conn:
                row = await one(conn, _sql("release_held"), {"limit": limit})
            return int(row["n"])

        return await with_retry(work)

    async def in_doubt(self, limit: int) -> list[InDoubt]:
        async def work() -> list[InDoubt]:
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(segment_sql("due_in_doubt", self.segments), {
                    "limit": limit, "settle": self.verify_after, "segments": list(self.owned()),
                    "quiet_hold": QUIET_HOLD})).fetchall()
            return [InDoubt(r["item_id"], r["guid"], r["idem_key"], r["updated_at"], r["tenant"], r["quiet_s"] or None)
                    for r in rows]

        return await with_retry(work)

    async def resolve(self, item: InDoubt, found: bool | None, now: datetime) -> str | None:
        v = verdict(found, item.since, now, self.verify_deadline, hushed=item.quiet_s is not None)
        if v is None:
            return None
        error_class = None if v.to is S.CONFIRMED else "in_doubt"
        # The event says what the item's row says: an unverified send (or one proved not sent)
        # carries its error class in the payload too.
        payload = {"reason": v.reason} | ({"error_class": error_class, "error": v.reason} if error_class else {})
        t = Transition(v.event, v.to, frozenset({S.RECOVERY_PENDING}), payload=payload,
                       error_class=error_class, error=v.reason)
        ledger = {S.CONFIRMED: _sql("ledger_confirmed"), S.PENDING: _sql("ledger_released")}.get(v.to)

        async def work() -> str | None:
            async with self.pool.connection() as conn, conn.transaction():
                # The lookup answered for the episode read at item.since; once the item has
                # moved on (sent again, in doubt again) its answer decides nothing.
                episode = await (await conn.execute(_sql("lock_in_doubt_episode"), {
                    "i": item.item_id, "since": item.since})).fetchone()
                if episode is None:
                    return None
                moved = await apply(conn, t, [item.item_id])
                if moved and ledger:
                    await conn.execute(ledger, {"k": item.idem_key, "i": item.item_id})
                return v.to.value if moved else None

        return await with_retry(work)

    async def lock_stats(self) -> dict[str, int]:
        async def work() -> dict[str, int]:
            async with self.pool.connection() as conn:
                row = await one(conn, query("lock_counts"))
            return {k: int(v) for k, v in row.items()}

        return await with_retry(work, deadline_s=STATS_RETRY_S)

    async def keep_quiet(self, guid: str, seconds: float) -> None:
        async def work() -> None:
            async with self.pool.connection() as conn:
                await conn.execute(_sql("keep_quiet"), {"guid": guid, "seconds": seconds})

        await with_retry(work)

    # -- governance -----------------------------------------------------------------------
    async def hold(self, scope: str, key: str, reason: str, actor: str) -> bool:
        async def work() -> bool:
            async with self.pool.connection() as conn:
                row = await one(conn, _sql("hold"), {"scope": scope, "key": key, "reason": reason, "actor": actor})
            return bool(row["held"])

        return await with_retry(work)

    async def governance_stats(self, stall_after: timedelta | None) -> dict[str, int]:
        async def work() -> dict[str, int]:
            async with self.pool.connection() as conn:
                row = await one(conn, _sql("governance_counts"), {})
                items = await (await conn.execute(_sql("job_items"))).fetchall()
                quotas = await (await conn.execute(_sql("tenant_quotas"))).fetchall()
                stalls = {} if stall_after is None else {"stalled_shards": await self._stalled(conn, stall_after),
                                                          **await one(conn, _sql("in_doubt_quiet"), {})}
            row = dict(row) | stalls
            return ({k: int(v) for k, v in row.items()} | {f"items:{r['status']}": int(r["n"]) for r in items}
                    | {f"tenant_sends:{r['tenant']}": int(r["sends"]) for r in quotas}
                    | {f"tenant_quota:{r['tenant']}": int(r["sends_per_day"]) for r in quotas})

        return await with_retry(work, deadline_s=STATS_RETRY_S)

    async def guid_stats(self) -> dict[str, int]:
        async def work() -> dict[str, int]:
            async with self.pool.connection() as conn:
                states = await (await conn.execute(_sql("guid_state_counts"))).fetchall()
            return ({f"guids:{r['state']}": int(r["n"]) for r in states}
                    | {f"guids_with_work:{r['state']}": int(r["with_work"]) for r in states if r["with_work"] is not None})

        return await with_retry(work, deadline_s=STATS_RETRY_S)

    @staticmethod
    async def _stalled(conn: AsyncConnection[DictRow], stall_after: timedelta) -> int:
        """Open shards stalled rather than waiting for their guid's limits (domain/stalls.py):
        every quiet guid, a page at a time through a server-side cursor (one read of the open
        shards, never all of a fleet's rows in memory at once)."""
        every = await one(conn, _sql("every_guid_limits"), {})
        pacings, n = Pacings(every["limits"]), 0
        async with conn.transaction(), conn.cursor(name="quiet_shards") as cur:
            await cur.execute(_sql("quiet_shards"), {"stall": stall_after})
            while quiet := await cur.fetchmany(QUIET_FETCH):
                n += stalled((Quiet(r["guid"], r["since"], r["limits"], r["windows"], r["job_gaps"], r["sender_limits"],
                                    r["penalty"])
                              for r in quiet), pacings, every["now"], stall_after.total_seconds())
        return n


class PostgresGuidStates:
    """What callbacks change: guid lifecycle events (``pacer_set_guid_state``, applied in the
    order of their ts) and media readiness. Each in a transaction of its own that commits
    synchronously (its callback's offset is committed next), and only for a guid of the
    callback's tenant, or one no job has named yet (``tenant_guids``)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def _apply(self, guid: str, tenant: str, sql: LiteralString, params: dict[str, Any]) -> Applied:
        async def work() -> Applied:
            async with self.pool.connection() as conn, synchronous_transaction(conn, pipeline=False):
                owner = await (await conn.execute(_sql("guid_tenant"), {"guid": guid})).fetchone()
                if owner is not None and owner["tenant"] != tenant:
                    return "foreign"
                row = await (await conn.execute(sql, params)).fetchone()
            return "applied" if row is not None and row["changed"] else "stale"

        return await with_retry(work)

    async def set_state(self, guid: str, event: StatusEvent, tenant: str) -> Applied:
        return await self._apply(guid, tenant, _sql("set_guid_state"), {
            "guid": guid, "state": event.state.value, "source": event.source, "reason": event.reason, "ts": event.ts})

    async def media_ready(self, guid: str, media_id: str, ok: bool, reason: str | None, tenant: str) -> Applied:
        return await self._apply(guid, tenant, _sql("media_ready"), {
            "guid": guid, "media_id": media_id, "ok": ok, "reason": reason})

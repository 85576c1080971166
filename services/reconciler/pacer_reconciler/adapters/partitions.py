"""Time partitions on Postgres (``pacer_partitions_missing``, ``pacer_create_partition``,
``pacer_grant_partitions``, ``pacer_partitions_due``, ``pacer_prune_partition``), the job rows whose items' partitions have gone
(``pacer_prune_jobs``), and the days of tenant send counts past retention."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC
from typing import Any, LiteralString

import psycopg
from psycopg import AsyncConnection, errors
from psycopg import sql as psql
from psycopg.types.json import Jsonb

from pacer_common.db.errors import TransientError, with_retry
from pacer_common.db.pool import Pool
from pacer_common.db.sql import loader
from pacer_reconciler.domain.retention import Analyzed, PartitionChange

_sql = loader("pacer_reconciler.adapters.sql")
JOBS_BATCH = 1000  # jobs deleted per transaction
JOBS_BATCHES = 50  # at most this many per run; the rest go in the next run


class PostgresPartitions:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def set_period(self, tables: Sequence[str], period_days: int) -> list[tuple[str, int]]:
        async def work() -> list[tuple[str, int]]:
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(_sql("set_period"), {"tables": list(tables),
                                                                      "period_days": period_days})).fetchall()
            return [(r["parent"], int(r["was"])) for r in rows]

        return await with_retry(work)

    async def ensure(self, ahead_days: int) -> list[PartitionChange]:
        """The partitions from yesterday to ``ahead_days`` ahead, each made in a transaction of
        its own (or skipped, with why, or ``failed`` with the error, the others made all the
        same), then the parents' grants given to them. A creation
        holds its table's default partition ACCESS EXCLUSIVE to the end of its transaction:
        several in one would hold every reader of the table by guid through the later tables'
        lock waits, up to the lock timeout each."""
        async def missing() -> list[dict[str, Any]]:
            async with self.pool.connection() as conn:
                return await (await conn.execute(_sql("partitions_missing"), {"ahead_days": ahead_days})).fetchall()

        changes: list[PartitionChange] = []
        for m in await with_retry(missing):
            name = f"{m['parent']}_p{m['starts'].astimezone(UTC):%Y%m%d}"
            changes += await self._each(name, "create_partition", dict(m), "could not be created")
        return changes + await self._changes("grant_partitions", {})

    async def prune(self, retain_days: Mapping[str, int]) -> list[PartitionChange]:
        """Each partition past retention dropped in a transaction of its own (or kept, with
        why, or skipped), in the order listed. A DROP holds its table's ACCESS EXCLUSIVE lock
        to the end of its transaction: several in one would hold the items' readers through
        every later guard and lock wait, up to the lock timeout each.

        A partition whose guard or DROP raises (a statement timeout, an object that depends on
        it, a DROP this user may not do) is ``failed``, with the error, and the others go on:
        one partition must not keep every later one, and the jobs' and usage rows' pruning
        after them, from ever running. A database that cannot be reached at all (its retries
        spent) still fails the run."""
        retain = {"retain_days": Jsonb(dict(retain_days))}
        changes: list[PartitionChange] = []
        for c in await self._changes("prune_partitions", retain):
            if c.action != "due":
                changes.append(c)
                continue
            changes += await self._each(c.partition, "prune_partition", {"partition": c.partition, **retain},
                                        "is past retention and could not be dropped")
        return changes

    async def _each(self, partition: str, name: str, params: dict[str, Any], failure: str) -> list[PartitionChange]:
        """One partition's statement: its changes, or ``failed`` with ``failure`` and the error
        if it raised (the database out of reach, its retries spent, still raises)."""
        try:
            return await self._changes(name, params)
        except TransientError as exc:  # retried for 60 s already
            if _unreachable(exc):
                raise
            return [PartitionChange(partition, "failed", f"{failure}: {_error(exc.__cause__ or exc)}")]
        except Exception as exc:
            return [PartitionChange(partition, "failed", f"{failure}: {_error(exc)}")]

    async def prune_jobs(self, retain_days: int) -> int:
        """Finished jobs past ``retain_days`` whose items are all gone: deleted, in batches."""
        async def batch() -> int:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(_sql("prune_jobs"), {
                    "retain_days": retain_days, "limit": JOBS_BATCH})).fetchone()
            return int(row["pruned"]) if row else 0

        pruned = 0
        for _ in range(JOBS_BATCHES):
            n = await with_retry(batch)
            pruned += n
            if n < JOBS_BATCH:
                break
        return pruned

    async def prune_usage(self, retain_days: int) -> int:
        """Days of per-tenant send counts older than ``retain_days``, and the flush records of
        senders that added none for as long (``tenant_usage_flushes``): deleted; how many days."""
        return await self._pruned("prune_usage", {"retain_days": retain_days})

    async def prune_senders(self) -> int:
        """The pacing defaults of senders not seen for a day: deleted; how many rows."""
        return await self._pruned("prune_senders", {})

    async def _pruned(self, name: LiteralString, params: dict[str, Any]) -> int:
        async def work() -> int:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(_sql(name), params)).fetchone()
            return int(row["pruned"]) if row else 0

        return await with_retry(work)

    async def analyze_new(self, min_bytes: int, skip: Collection[str] = ()) -> list[Analyzed] | None:
        """ANALYZE each time partition never analyzed that holds at least ``min_bytes``, largest
        first; each one with whether it has statistics now (those in ``skip`` are not tried:
        no). A partition another session has locked past the lock timeout (autovacuum, DDL)
        or dropped meanwhile is left out, for the next round. None if another replica is at
        it (one at a time)."""
        async def work() -> list[Analyzed] | None:
            done: list[Analyzed] = []
            async with self.pool.connection() as conn, conn.transaction():
                lock = await (await conn.execute(_sql("stats_lock"))).fetchone()
                if lock is None or not lock["locked"]:
                    return None
                sized = []
                for r in await (await conn.execute(_sql("stats_candidates"))).fetchall():
                    row = await _unless_busy(conn, _sql("stats_size"), {"partition": r["partition"]})
                    if row is not None and row["bytes"] is not None and row["bytes"] >= min_bytes:
                        sized.append(Analyzed(r["parent"], r["partition"], int(row["bytes"]), False))
                for a in sorted(sized, key=lambda a: (-a.bytes, a.partition)):
                    if a.partition in skip:
                        done.append(a)
                        continue
                    analyze = psql.SQL("ANALYZE {}").format(psql.Identifier(a.partition))
                    if await _unless_busy(conn, analyze) is None:
                        continue
                    # A user that may not analyze the table gets a warning, not an error.
                    after = await (await conn.execute(_sql("stats_done"), {"partition": a.partition})).fetchone()
                    done.append(Analyzed(a.table, a.partition, a.bytes, bool(after and after["done"])))
            return done

        return await with_retry(work)

    async def _changes(self, name: str, params: dict[str, Any]) -> list[PartitionChange]:
        async def work() -> list[PartitionChange]:
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(_sql(name), params)).fetchall()
            return [PartitionChange(r["partition"], r["action"], r["detail"]) for r in rows]

        return await with_retry(work)


def _unreachable(exc: TransientError) -> bool:
    """The database out of reach (no connection, a server shutting down), rather than a
    statement of one partition's that kept failing (a statement or lock timeout)."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(("08", "57P"))


def _error(exc: BaseException) -> str:
    """One line: the error's type, its message and, from Postgres, its detail (which object
    depends on the partition, say)."""
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        detail = exc.diag.message_detail
        return f"{type(exc).__name__}: {exc.diag.message_primary}" + (f" ({detail})" if detail else "")
    return f"{type(exc).__name__}: {exc}".strip()


async def _unless_busy(conn: AsyncConnection[Any], statement: LiteralString | psql.Composed, params: dict[str, Any] | None = None,
                       ) -> dict[str, Any] | None:
    """Run ``statement`` in a savepoint: its first row (``{}`` if it returns none), or None if
    its table is locked past the lock timeout or has been dropped."""
    try:
        async with conn.transaction():
            cur = await conn.execute(statement, params)
            row = await cur.fetchone() if cur.description else None
    except (errors.LockNotAvailable, errors.UndefinedTable):
        return None
    return dict(row) if row is not None else {}

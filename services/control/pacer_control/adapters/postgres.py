"""The Control API on Postgres: reads, and writes that commit together with their audit records."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import psycopg
from psycopg import AsyncConnection
from psycopg.errors import QueryCanceled
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import PoolTimeout

from pacer_common.db import operations
from pacer_common.db.errors import ConflictError, RefusedError, TransientError, with_retry
from pacer_common.db.pool import Pool
from pacer_common.db.sql import loader, query
from pacer_common.domain.tokens import Role, token_hash
from pacer_control.domain.errors import Conflict, Invalid, Unavailable
from pacer_control.domain.filters import (
    CANCELLABLE,
    EVERY_SHARD,
    FAILURE_CATEGORY,
    AuditFilter,
    ItemFilter,
    JobFilter,
    RetryFilter,
    ShardPage,
)
from pacer_control.domain.outcomes import ActionResult, ItemRetry
from pacer_control.domain.permissions import Principal
from pacer_control.domain.reuse import Totals
from pacer_control.domain.views import failure_categories, sum_counts
from pacer_control.ports import AuditEntry, ExpectedHolder, ItemSpan, NewToken, Row

T = TypeVar("T")
_dumps = functools.partial(json.dumps, default=str)


_sql = loader("pacer_control.adapters.sql")


async def _rows(conn: AsyncConnection[Any], name: str, params: dict[str, Any],
                prepare: bool | None = None) -> list[Row]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_sql(name), params, prepare=prepare)
        return await cur.fetchall()


async def _row(conn: AsyncConnection[Any], name: str, params: dict[str, Any]) -> Row | None:
    rows = await _rows(conn, name, params)
    return rows[0] if rows else None


def _result(row: Row | None, missing: str) -> ActionResult:
    if row is None:
        return ActionResult("not_found", missing)
    return ActionResult(row["outcome"], row["message"], row.get("status"))


def _expected(holder: ExpectedHolder | None) -> dict[str, Any]:
    return {"expected_owner": holder.owner if holder else None, "expected_epoch": holder.epoch if holder else None}


TENANT_FIELDS = ("base_url", "credential", "callback_secret", "sends_per_day", "max_guids", "timezone")


def _tenant_params(fields: dict[str, Any]) -> dict[str, Any]:
    """Statement parameters of a tenant's fields (secrets revealed here, for the database only)."""
    out = dict.fromkeys(TENANT_FIELDS)
    for k, v in fields.items():
        out[k] = v.get_secret_value() if hasattr(v, "get_secret_value") else v
    return out


class _Tx:
    """The writes of one transaction (see ``ports.ControlTx``)."""

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.conn = conn

    async def job_action(self, job_id: str, action: str, actor: str, reason: str | None) -> ActionResult:
        row = await _row(self.conn, "job_action", {"job": job_id, "action": action, "actor": actor, "reason": reason})
        return _result(row, f"no job {job_id}")

    async def shard_action(self, job_id: str, shard_id: int, action: str, actor: str,
                           reason: str | None) -> ActionResult:
        row = await _row(self.conn, "shard_action", {"job": job_id, "shard": shard_id, "action": action,
                                                     "actor": actor, "reason": reason})
        return _result(row, f"job {job_id} has no shard {shard_id}")

    async def confirm_budget(self, job_id: str, max_sends: int, actor: str) -> ActionResult:
        row = await _row(self.conn, "confirm_budget", {"job": job_id, "max_sends": max_sends, "actor": actor})
        return _result(row, f"no job {job_id}")

    async def lock_job(self, job_id: str) -> bool:
        return await _row(self.conn, "lock_job", {"job": job_id}) is not None

    async def items_of_job(self, job_id: str, item_ids: Sequence[str]) -> set[str]:
        rows = await _rows(self.conn, "items_of_job", {"job": job_id, "ids": list(item_ids)})
        return {r["item_id"] for r in rows}

    async def select_for_retry(self, job_id: str, span: ItemSpan, f: RetryFilter, limit: int,
                               after: str | None = None) -> list[str]:
        rows = await _rows(self.conn, "select_for_retry", {"job": job_id, "status": f.status.value,
                                                          "error_class": f.error_class, "guid": f.guid,
                                                          "first": span.first, "last": span.last,
                                                          "limit": limit, "after": after}, prepare=False)
        return [r["item_id"] for r in rows]

    async def retry_items(self, item_ids: Sequence[str], actor: str, priority: int | None = None) -> list[ItemRetry]:
        if not item_ids:
            return []
        rows = await _rows(self.conn, "retry_items", {"ids": list(item_ids), "actor": actor, "priority": priority})
        return [ItemRetry(r["item_id"], r["outcome"], r["new_item"], r["message"]) for r in rows]

    async def item_state(self, item_id: str) -> Row | None:
        return await _row(self.conn, "item_state", {"item": item_id})

    async def cancel_item(self, item_id: str, actor: str) -> tuple[str, str]:
        r = await operations.cancel_item(self.conn, item_id, actor)
        return r.outcome, r.message

    async def cancel_items(self, item_ids: Sequence[str], actor: str) -> list[tuple[str, str, str]]:
        if not item_ids:
            return []
        rows = await _rows(self.conn, "cancel_items", {"ids": list(item_ids), "actor": actor})
        return [(r["item_id"], r["outcome"], r["message"]) for r in rows]

    async def decide_approval(self, job_id: str, approve: bool, actor: str, reason: str | None) -> ActionResult:
        row = await _row(self.conn, "decide_approval", {"job": job_id, "approve": approve, "actor": actor,
                                                       "reason": reason})
        return _result(row, f"no job {job_id}")

    async def select_for_cancel(self, job_id: str, span: ItemSpan, guid: str | None, limit: int,
                                after: str | None = None) -> list[str]:
        rows = await _rows(self.conn, "select_for_cancel", {"job": job_id, "guid": guid, "limit": limit, "after": after,
                                                           "first": span.first, "last": span.last,
                                                           "statuses": [s.value for s in CANCELLABLE]}, prepare=False)
        return [r["item_id"] for r in rows]

    async def test_send_made(self, job_id: str) -> Row | None:
        return await _row(self.conn, "test_send_made", {"job": job_id})

    async def test_send(self, job_id: str, guid: str, to_id: str, content: str, actor: str) -> Row:
        row = await _row(self.conn, "test_send", {"job": job_id, "guid": guid, "to_id": to_id,
                                                  "content": content, "actor": actor})
        assert row is not None  # pacer_test_send always answers
        return row

    async def resolve_unverified(self, item_id: str, delivered: bool, actor: str, reason: str) -> ActionResult:
        row = await _row(self.conn, "resolve_unverified", {"item": item_id, "delivered": delivered, "actor": actor,
                                                          "reason": reason})
        return _result(row, f"no item {item_id}")

    async def hold_guid(self, guid: str, reason: str, actor: str) -> bool:
        row = await _row(self.conn, "hold_guid", {"guid": guid, "reason": reason, "actor": actor})
        return bool(row and row["held"])

    async def guid_health(self, guid: str) -> Row | None:
        return await _row(self.conn, "guid_health", {"guid": guid})

    async def resume_guid(self, guid: str, actor: str, reason: str | None) -> ActionResult:
        row = await _row(self.conn, "resume_guid", {"guid": guid, "actor": actor, "reason": reason})
        return _result(row, f"no guid {guid}")

    async def force_release_guid(self, guid: str, actor: str, reason: str | None,
                                 expected: ExpectedHolder | None = None) -> Row:
        row = await _row(self.conn, "force_release_guid", {"guid": guid, "actor": actor, "reason": reason,
                                                           **_expected(expected)})
        assert row is not None  # pacer_force_release_guid always answers
        return row

    async def force_release_item(self, item_id: str, actor: str, reason: str | None,
                                 expected: ExpectedHolder | None = None) -> Row:
        row = await _row(self.conn, "force_release_item", {"item": item_id, "actor": actor, "reason": reason,
                                                           **_expected(expected)})
        assert row is not None  # pacer_force_release_item always answers
        return row

    async def guid_limits(self, guid: str) -> dict[str, Any] | None:
        row = await _row(self.conn, "guid_limits", {"guid": guid})
        return cast(dict[str, Any], row["limits"]) if row else None

    async def lock_guid_limits(self, guid: str, actor: str) -> dict[str, Any] | None:
        row = await _row(self.conn, "lock_guid_limits", {"guid": guid})
        if row is None and await _row(self.conn, "claim_guid_limits", {"guid": guid, "actor": actor}) is None:
            row = await _row(self.conn, "lock_guid_limits", {"guid": guid})  # made by another meanwhile
        return cast(dict[str, Any], row["limits"]) if row else None

    async def set_guid_limits(self, guid: str, limits: dict[str, Any], actor: str) -> dict[str, Any]:
        # The same statement as `pacer limits GUID --set …`.
        async with self.conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query("set_guid_limits"),
                              {"guid": guid, "limits": Jsonb(limits), "actor": actor})
            row = await cur.fetchone()
        assert row is not None
        return cast(dict[str, Any], row["limits"])

    async def create_token(self, name: str, role: Role, actor: str, tenants: list[str] | None,
                           secret: str) -> NewToken | None:
        try:
            made = await operations.create_token(self.conn, name, role, actor, tenants=tenants, token=secret)
        except psycopg.errors.UniqueViolation:
            # Its savepoint is rolled back; this transaction goes on. Ours, if its hash is
            # ``secret``'s: this unit ran before and committed, and the answer was lost.
            row = await _row(self.conn, "token_made", {"name": name, "hash": token_hash(secret)})
            if row is None:
                return None
            return NewToken(row["name"], Role(row["role"]), secret, row["created_at"], row["tenants"])
        except operations.UnknownTenants as exc:
            raise Invalid(str(exc)) from None
        return NewToken(made.name, made.role, made.token, made.created_at, tenants)

    async def create_tenant(self, name: str, fields: dict[str, Any]) -> bool:
        return await _row(self.conn, "create_tenant", {**_tenant_params(fields), "name": name}) is not None

    async def update_tenant(self, name: str, fields: dict[str, Any]) -> bool:
        return await _row(self.conn, "update_tenant", {**_tenant_params(fields), "name": name,
                                                      "fields": sorted(fields)}) is not None

    async def delete_tenant(self, name: str) -> Row | None:
        return await _row(self.conn, "delete_tenant", {"name": name})

    async def tenant(self, name: str) -> Row | None:
        return await _row(self.conn, "tenants", {"name": name})

    async def lock_tenant(self, name: str) -> bool:
        return await _row(self.conn, "lock_tenant", {"name": name}) is not None

    async def revoke_token(self, name: str) -> Row | None:
        return await _row(self.conn, "revoke_token", {"name": name})

    async def audit(self, entry: AuditEntry) -> None:
        await self.conn.execute(_sql("audit"), {
            "actor": entry.actor, "action": entry.action, "type": entry.target_type, "id": entry.target_id,
            "reason": entry.reason,
            "before": None if entry.before is None else Jsonb(entry.before, dumps=_dumps),
            "after": None if entry.after is None else Jsonb(entry.after, dumps=_dumps),
        })


def _unavailable(cause: BaseException | None, deadline_s: float) -> str:
    """Why the database could not serve a request, for its caller."""
    if isinstance(cause, PoolTimeout):
        return (f"every database connection of this control instance stayed in use for {deadline_s:g} s "
                f"(PACER_CONTROL_DB_POOL_MAX, PACER_CONTROL_DB_DEADLINE_S); try again shortly")
    if isinstance(cause, QueryCanceled):
        return (f"the database stopped this request's statement ({cause.diag.message_primary or cause}): "
                f"PACER_CONTROL_STATEMENT_TIMEOUT_S bounds how long one may run; narrow the request (a filter, "
                f"a smaller page) or try again when the database is less busy")
    return "the database cannot be reached right now; try again shortly"


class PostgresControl:
    """``ControlStore`` on a psycopg pool of autocommit connections."""

    def __init__(self, pool: Pool, deadline_s: float = 5.0) -> None:
        self.pool = pool
        # An API caller waits this long at most while the database is away, then gets a 503.
        self.deadline_s = deadline_s

    async def _call(self, unit: Callable[[], Awaitable[T]]) -> T:
        """Run a unit of work (retried whole on transient errors) and translate what is left."""
        try:
            return await with_retry(unit, deadline_s=self.deadline_s)
        except TransientError as exc:
            raise Unavailable(_unavailable(exc.__cause__, self.deadline_s)) from exc
        except psycopg.DataError as exc:
            raise Invalid(f"the database refused a value: {exc.diag.message_primary or exc}") from exc
        except RefusedError as exc:
            raise Invalid(f"the database refused it as too large: {exc}") from exc
        except (ConflictError, psycopg.IntegrityError) as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, psycopg.Error) else exc
            why = cause.diag.message_primary if isinstance(cause, psycopg.Error) else None
            raise Conflict(f"it conflicts with what is stored now ({why or exc}); read it again and retry") from exc

    async def atomically(self, work: Callable[[_Tx], Awaitable[T]]) -> T:
        async def unit() -> T:
            async with self.pool.connection() as conn, conn.transaction():
                # An operator's action runs to its end, past the pool's statement timeout: a
                # cancel of a job of a million items takes tens of seconds, and stopped it
                # would roll back whole, every time it was tried.
                await conn.execute("SELECT set_config('statement_timeout', '0', true)")
                return await work(_Tx(conn))

        return await self._call(unit)

    async def _read(self, name: str, params: dict[str, Any], prepare: bool | None = None) -> list[Row]:
        async def unit() -> list[Row]:
            async with self.pool.connection() as conn:
                return await _rows(conn, name, params, prepare)

        return await self._call(unit)

    async def principal(self, token_hash: str) -> Principal | None:
        rows = await self._read("principal", {"hash": token_hash})
        if not rows:
            return None
        scoped = rows[0]["tenants"]
        return Principal(rows[0]["name"], Role(rows[0]["role"]), None if scoped is None else frozenset(scoped))

    async def tenants(self) -> list[Row]:
        return await self._read("tenants", {"name": None})

    async def tenant_exists(self, name: str) -> bool:
        return bool(await self._read("tenants", {"name": name}))

    async def tenant_of(self, kind: str, target_id: str) -> str | None:
        rows = await self._read(f"tenant_of_{'job' if kind == 'job' else 'item'}", {"id": target_id})
        return rows[0]["tenant"] if rows else None

    async def jobs(self, f: JobFilter) -> list[Row]:
        return await self._read("jobs", {"status": f.status, "kind": f.kind.value if f.kind else None,
                                         "created_by": f.created_by, "before": f.before, "limit": f.limit,
                                         "since": f.since, "ids": None if f.ids is None else list(f.ids),
                                         "request_id": f.request_id,
                                         "tenants": None if f.tenants is None else sorted(f.tenants)},
                          # planned for its values: a generic plan could not use the request id's index
                          prepare=False if f.request_id is not None else None)

    async def awaiting_approval(self, limit: int) -> tuple[list[str], int]:
        rows = await self._read("awaiting_approval", {"limit": limit})
        return [r["job_id"] for r in rows], rows[0]["waiting"] if rows else 0

    async def job_head(self, job_id: str) -> Row | None:
        rows = await self._read("job_head", {"job": job_id})
        return rows[0] if rows else None

    async def job(self, job_id: str, shards: ShardPage = EVERY_SHARD, failures: bool = True,
                  totals: Totals | None = None) -> Row | None:
        async def unit() -> Row | None:
            async with self.pool.connection() as conn:
                job = await _row(conn, "job", {"job": job_id})
                if job is None:
                    return None
                if shards.after is not None and not await _rows(conn, "shard_of_job",
                                                                {"job": job_id, "shard": shards.after}):
                    raise Invalid(f"shards_after: {shards.after} is not a shard of job {job_id}")
                started = time.perf_counter()
                read = None if totals is not None else await _row(conn, "job_counts", {"job": job_id})
                took_s = time.perf_counter() - started
                # Planned for its values: an unranked page folds the ranking away (job_shards.sql).
                page = [] if shards.limit == 0 else await _rows(conn, "job_shards", {
                    "job": job_id, "limit": shards.limit, "after": shards.after, "attention": shards.attention},
                    prepare=False)
                rows = await _rows(conn, "job_failures", {"job": job_id, "statuses": [
                    s.value for s in FAILURE_CATEGORY]}) if failures else []
            job["budget"] = {"max_sends": job.pop("budget_max_sends"), "used": job.pop("budget_used")}
            if totals is None:
                assert read is not None  # aggregates: one row
                job["counts"] = sum_counts([read["counts"]])
                job["shard_statuses"] = dict(sorted(read["shard_statuses"].items()))
                job["totals_took_s"] = took_s
            else:
                job["counts"], job["shard_statuses"] = dict(totals.counts), dict(totals.shard_statuses)
            job["shards_total"] = sum(job["shard_statuses"].values())
            job["shards"] = page
            job["failures"] = failure_categories(rows)
            job["shed"] = sum(f["total"] for f in job["failures"] if f["error_class"] == "shed")
            return job

        return await self._call(unit)

    async def items(self, job_id: str, span: ItemSpan, f: ItemFilter) -> list[Row]:
        # Planned for its values, never a prepared statement's generic plan (items.sql).
        return await self._read("items", {
            "job": job_id, "statuses": [s.value for s in f.statuses] if f.statuses else None, "guid": f.guid,
            "error_class": f.error_class, "with_error": f.only_with_error, "after": f.after, "limit": f.limit,
            "first": span.first, "last": span.last}, prepare=False)

    async def item_span(self, job_id: str) -> ItemSpan | None:
        rows = await self._read("item_span", {"job": job_id})
        return ItemSpan(rows[0]["first"], rows[0]["last"]) if rows else None

    async def report_page(self, job_id: str, span: ItemSpan, after: str | None,
                          limit: int) -> list[tuple[Any, ...]]:
        params = {"job": job_id, "first": span.first, "last": span.last, "after": after, "limit": limit}

        async def unit() -> list[tuple[Any, ...]]:
            # The connection goes back to the pool when the page is read, before it is
            # written to the client. Planned for each page's values, never as a prepared
            # statement's generic plan (a download runs it hundreds of times, and psycopg
            # prepares from the fifth): which index serves depends on the job's share of
            # its range (report_page.sql).
            async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(_sql("report_page"), params, prepare=False)
                return await cur.fetchall()

        return await self._call(unit)

    async def guids(self, paused_only: bool, limit: int, after: str | None, state: str | None = None,
                    start: str | None = None) -> list[Row]:
        params = {"paused_only": paused_only, "limit": limit, "after": after, "state": state, "start": start}

        async def unit() -> list[Row]:
            async with self.pool.connection() as conn, conn.transaction():
                # Planned for its parameters: which indexes serve depends on them (guids.sql).
                await conn.execute("SELECT set_config('plan_cache_mode', 'force_custom_plan', true)")
                return await _rows(conn, "guids", params)

        return await self._call(unit)

    async def guid_history(self, guid: str, limit: int, before: int | None) -> list[Row]:
        return await self._read("guid_history", {"guid": guid, "limit": limit, "before": before})

    async def guid(self, guid: str) -> Row | None:
        """The guid's health, lease and limits, with its backlog; a guid known only by its
        queued items has a row too."""
        async def unit() -> Row | None:
            async with self.pool.connection() as conn:
                rows = await _rows(conn, "guid", {"guid": guid})
                backlog = (await _rows(conn, "guid_backlog", {"guid": guid}))[0]
            if not rows and not backlog["by_lane"]:
                return None
            row = rows[0] if rows else {"guid": guid, "paused": False, "paused_reason": None, "paused_by": None,
                                        "paused_at": None, "state": "online", "held": False}
            return {**row, "backlog": backlog}

        return await self._call(unit)

    async def guid_limits(self, guid: str) -> dict[str, Any] | None:
        """The limits overrides of ``guid`` (``*``: every guid's), or None."""
        rows = await self._read("guid_limits", {"guid": guid})
        return cast(dict[str, Any], rows[0]["limits"]) if rows else None

    async def backlogs(self, sort: str, limit: int) -> list[Row]:
        """Guids by backlog or by wait (``db/queries/guid_backlogs.sql``)."""
        async def unit() -> list[Row]:
            async with self.pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("guid_backlogs"), {"sort": sort, "limit": limit})
                return await cur.fetchall()

        return await self._call(unit)

    async def locks(self, limit: int, find: str | None = None) -> Row:
        async def unit() -> Row:
            async with self.pool.connection() as conn:
                return cast(Row, await operations.lock_view(conn, limit, find))

        return await self._call(unit)

    async def audit_log(self, f: AuditFilter) -> list[Row]:
        params = {"target_type": f.target_type, "target_id": f.target_id, "actor": f.actor, "limit": f.limit,
                  "before": f.before, "xid": None if f.after is None or f.after.xid is None else str(f.after.xid),
                  "after": None if f.after is None else f.after.id}
        if f.after is None:
            return await self._read("audit_newest", params)
        rows = await self._read("audit_after", params)
        if not rows and f.after.xid is not None and (await self._read("audit_ahead", params))[0]["ahead"]:
            raise Invalid(f"audit position {f.after} is ahead of this database's transactions (a position "
                          "from before a restore?): start the tail again from an entry id")
        return rows

    async def tokens(self) -> list[Row]:
        return await self._read("tokens", {})

    async def in_doubt(self, limit: int) -> list[Row]:
        return await self._read("in_doubt", {"limit": limit})

    async def approval_preview(self, job_id: str, samples: int) -> Row:
        async def unit() -> Row:
            async with self.pool.connection() as conn:
                return {"samples": await _rows(conn, "approval_samples", {"job": job_id, "limit": samples}),
                        "guids": await _rows(conn, "approval_guids", {"job": job_id})}

        return await self._call(unit)

"""Operator actions on single items — manual retry and cancel —, the lock view, API tokens.

The decisions live in database functions (``pacer_retry_item``, ``pacer_cancel_item`` in
``db/schema/functions/``) so they are taken under the row locks and guarded
transitions that make concurrent clicks, claims and sweeps safe. This module only calls
them and shapes their answers. Nothing here calls the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict, cast

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from pacer_common.db.sql import query
from pacer_common.domain.tokens import Role, new_token, token_hash

# refused: the retry could never be sent (job cancelled or terminated, notification superseded)
RetryOutcome = Literal["created", "conflict", "already_queued", "already_delivered", "refused", "not_found"]
CancelOutcome = Literal["cancelled", "too_late", "already_final", "not_found"]


@dataclass(frozen=True)
class RetryResult:
    """What a manual retry did. ``new_item`` is the compensation created, or on a conflict
    with an open retry, the compensation already in progress."""

    outcome: RetryOutcome
    new_item: str | None
    message: str

    @property
    def ok(self) -> bool:
        return self.outcome == "created"


@dataclass(frozen=True)
class CancelResult:
    """What a cancel did."""

    outcome: CancelOutcome
    message: str

    @property
    def ok(self) -> bool:
        return self.outcome == "cancelled"


class GuidLease(TypedDict):
    guid: str
    owner: str | None
    epoch: int
    since: datetime | None
    lease_until: datetime | None
    renew_count: int
    takeovers: int
    last_send_at: datetime | None
    expired: bool
    forced_releases: int
    released_by: str | None
    released_at: datetime | None
    evicted_owner: str | None  # the holder a forced release evicted; it may not take the guid
    evicted_until: datetime | None  # back before this (its released lease's end)


class ItemLease(TypedDict):
    item_id: str
    guid: str
    status: str
    lease_owner: str | None
    lease_epoch: int
    lease_until: datetime | None
    expired: bool


class LockCounts(TypedDict):
    guid_leases: int
    guid_leases_held: int
    running_items: int
    expired_leases: int
    takeovers: int
    duplicate_intercepts: int
    retry_conflicts: int
    forced_releases: int
    forced_item_releases: int


class LockView(TypedDict):
    guid_leases: list[GuidLease]
    item_leases: list[ItemLease]
    counts: LockCounts


async def retry_item(conn: AsyncConnection[Any], item_id: str, actor: str,
                     priority: int | None = None) -> RetryResult:
    """Create a compensation item for ``item_id`` if, and only if, a retry is safe now.

    Commits on its own unless the caller already has a transaction open, in which case it
    joins it (and the caller's commit makes the compensation real).
    """
    params = {"item": item_id, "actor": actor, "priority": priority}
    row = await _one(conn, "retry_item", params)
    return RetryResult(outcome=row["outcome"], new_item=row["new_item"], message=row["message"])


async def cancel_item(conn: AsyncConnection[Any], item_id: str, actor: str) -> CancelResult:
    """Abandon ``item_id`` if it has not been taken yet (pending or waiting_retry)."""
    row = await _one(conn, "cancel_item", {"item": item_id, "actor": actor})
    return CancelResult(outcome=row["outcome"], message=row["message"])


async def lock_view(conn: AsyncConnection[Any], limit: int = 1000, find: str | None = None) -> LockView:
    """Guid leases and item leases as lock records (at most ``limit`` of each; the guid leases
    expired first, or from the guid ``find`` on, in guid order), with the dashboard counts:
    guid leases in all and held, running items, expired leases, takeovers, duplicate
    intercepts and refused manual retries."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query("lock_guid_leases"), {"limit": limit, "find": find})
        guids = await cur.fetchall()
        await cur.execute(query("lock_item_leases"), {"limit": limit})
        items = await cur.fetchall()
        await cur.execute(query("lock_counts"))
        counts = await cur.fetchone()
    return LockView(guid_leases=cast(list[GuidLease], guids), item_leases=cast(list[ItemLease], items),
                    counts=cast(LockCounts, counts))


@dataclass(frozen=True)
class CreatedToken:
    """A token just made. ``token`` is the secret: shown this once, never stored."""

    name: str
    role: Role
    token: str
    created_at: datetime


class UnknownTenants(ValueError):
    """A token scoped to a tenant that does not exist."""


async def create_token(conn: AsyncConnection[Any], name: str, role: Role, actor: str,
                       reason: str | None = None, tenants: list[str] | None = None,
                       token: str | None = None) -> CreatedToken:
    """Make an API token and its audit record in one transaction; with ``tenants``, the token
    sees and changes only those tenants' jobs. ``token``: its secret, drawn by the caller (one
    that retries a lost commit keeps it, and can tell its own token from another's); default
    a new one.

    Raises ``psycopg.errors.UniqueViolation`` if a token (even a revoked one) has that name,
    :class:`UnknownTenants` if a tenant named is none.
    """
    if tenants:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query("unknown_tenants"), {"names": tenants})
            unknown = [r["name"] for r in await cur.fetchall()]
        if unknown:
            raise UnknownTenants(f"no tenant named {', '.join(map(repr, unknown))}; create it first (POST /tenants)")
    token = token or new_token()
    row = await _one(conn, "create_token", {"hash": token_hash(token), "name": name, "role": role.value,
                                            "actor": actor, "reason": reason, "tenants": tenants})
    return CreatedToken(row["name"], Role(row["role"]), token, row["created_at"])


async def _one(conn: AsyncConnection[Any], name: str, params: dict[str, Any]) -> dict[str, Any]:
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query(name), params)
        row = await cur.fetchone()
    if row is None:
        raise RuntimeError(f"{name} returned no row")
    return row

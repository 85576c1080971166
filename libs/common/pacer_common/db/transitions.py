"""Apply a transition from the table in ``domain/status.py`` with the guarded SQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from pacer_common.db.sql import query
from pacer_common.domain.events import EventType
from pacer_common.domain.status import ItemStatus, check_transition


@dataclass(frozen=True)
class Transition:
    """One kind of status change for a set of items, and the event it records."""

    type: EventType
    to: ItemStatus
    sources: frozenset[ItemStatus]
    epoch: int | None = None
    only_expired: bool = False
    lease_owner: str | None = None
    lease_ttl: timedelta | None = None
    clear_lease: bool = False
    attempt_bump: int = 0
    next_attempt_at: datetime | None = None
    error_class: str | None = None
    error: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for src in self.sources:
            check_transition(src, self.to)
        if self.lease_owner is not None and self.lease_ttl is None:
            raise ValueError("a new lease needs a ttl")


@dataclass(frozen=True)
class Moved:
    item_id: str
    version: int
    lease_epoch: int
    attempts: int
    from_status: ItemStatus


async def apply(conn: AsyncConnection[Any], t: Transition, ids: Sequence[str]) -> list[Moved]:
    """Move the items in ``ids`` that satisfy the guards; return those that moved.

    Runs in the caller's transaction: the status change and its event commit together.
    """
    params = {
        "ids": list(ids),
        "from": [s.value for s in t.sources],
        "to": t.to.value,
        "epoch": t.epoch,
        "only_expired": t.only_expired,
        "lease_owner": t.lease_owner,
        "lease_ttl": t.lease_ttl,
        "clear_lease": t.clear_lease,
        "attempt_bump": t.attempt_bump,
        "next_attempt_at": t.next_attempt_at,
        "error_class": t.error_class,
        "error": t.error,
        "type": t.type,
        "payload": json.dumps(t.payload, default=str),
    }
    cur = await conn.execute(query("transition"), params)
    rows = await cur.fetchall()
    return [
        Moved(
            item_id=_get(r, "item_id", 0),
            version=_get(r, "version", 1),
            lease_epoch=_get(r, "lease_epoch", 2),
            attempts=_get(r, "attempts", 3),
            from_status=ItemStatus(_get(r, "from_status", 4)),
        )
        for r in rows
    ]


def _get(row: Any, key: str, idx: int) -> Any:
    return row[key] if isinstance(row, dict) else row[idx]

"""What the reconciler needs from the outside world."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.events import ItemEvent
from pacer_common.domain.failures import Hushed
from pacer_common.domain.guid_health import StatusEvent
from pacer_reconciler.domain.retention import Analyzed, PartitionChange

SweepKind = Literal["retry_due", "claim_expired", "submit_expired", "expire_due", "release_held"]


class CursorMoved(Exception):
    """The log cursor moved under us (another leader wrote it): reload it and read again."""


class CursorGone(Exception):
    """A segment's cursor does not exist: a layout of another segment count replaced it. The
    replica must not apply anything (it would repeat what the new layout's tails apply)."""


@dataclass(frozen=True)
class Position:
    xid: str
    seq: int


LAST_SEQ = 2**63 - 1  # a position's largest seq: (xid, LAST_SEQ) is past every event of xid


@dataclass(frozen=True)
class InDoubt:
    item_id: str
    guid: str
    idem_key: str
    since: datetime
    tenant: str = "default"
    # What is left of a quiet a gateway asked of the guid, at the read (guid_leases): only on an
    # item read past QUIET_HOLD, which is then decided without a lookup (or, a quiet about to
    # end, looked up once it is over: verifier.QUIET_GRACE_S).
    quiet_s: float | None = None


@dataclass(frozen=True)
class Unreadable:
    """An event row that cannot be read back as an event (a bad value, an unknown type)."""

    seq: int
    item_id: str
    reason: str


@dataclass(frozen=True)
class Rejected:
    """A message that cannot be published (too large for Kafka): skipped, with the reason."""

    item_id: str
    reason: str


class EventLog(Protocol):
    async def position(self) -> Position: ...
    async def read(self, after: Position, limit: int) -> list[tuple[Position, ItemEvent | Unreadable]]: ...
    # Applies nothing and raises CursorMoved unless the stored cursor is still at ``start``.
    async def commit_batch(self, events: Sequence[ItemEvent], start: Position, to: Position) -> None: ...
    async def items_for_dispatch(self, item_ids: Sequence[str]) -> list[ItemCommand]: ...
    # Where the cursor may move with nothing left to read (past every finished transaction),
    # or None; the caller moves it with ``commit_batch([], start, to)``.
    async def quiet_position(self, after: Position) -> Position | None: ...


class Sweeps(Protocol):
    async def sweep(self, kind: SweepKind, limit: int) -> int: ...
    async def in_doubt(self, limit: int) -> list[InDoubt]:
        """In-doubt items to verify, oldest first; not those whose guid keeps a quiet a gateway
        asked of it, within QUIET_HOLD of their episode's start (``InDoubt.quiet_s``)."""
        ...
    async def resolve(self, item: InDoubt, found: bool | None, now: datetime) -> str | None: ...


class Holds(Protocol):
    async def hold(self, scope: str, key: str, reason: str, actor: str) -> bool: ...


class Publisher(Protocol):
    async def publish(self, events: Sequence[ItemEvent], commands: Sequence[ItemCommand]) -> list[Rejected]:
        """Deliver outcomes and commands, or raise; what can never be delivered is returned.
        Waiting for the broker (up to a minute while it is away) must leave the event loop
        free: it renews the segment leases meanwhile."""
        ...


class DeliveryLookup(Protocol):
    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | Hushed | None:
        """Asked of the item's tenant's gateway."""
        ...


class Quiets(Protocol):
    async def keep_quiet(self, guid: str, seconds: float) -> None:
        """The gateway asked for no call of ``guid`` for ``seconds`` from now: kept on the
        guid's lease row, never shortening a quiet already there, so its senders hold it too."""
        ...


class Lease(Protocol):
    """A lease a fenced write names: held while its epoch is live in ``leader_leases``."""

    name: str
    epoch: int | None


class Leases(Protocol):
    """This replica's segment leases (renewed, claimed and released by ``keep``)."""

    n: int
    replicas: int  # live replicas seen last round, this one included

    def owned(self) -> list[int]: ...
    def lease(self, segment: int) -> Lease: ...
    async def keep(self, stop: asyncio.Event) -> None: ...
    async def release(self) -> None: ...


class LeaderStats(Protocol):
    """Database-wide numbers the owner of segment 0 exports (locks held, stalled shards, …)."""

    async def lock_stats(self) -> dict[str, int]: ...
    async def governance_stats(self, stall_after: timedelta | None) -> dict[str, int]:
        """Jobs, paused guids and items by state, and ``stalled_shards`` and ``in_doubt_quiet``
        only when ``stall_after`` is given: those counts read every open shard that has not
        moved and every in-doubt item, so they run less often."""
        ...

    async def guid_stats(self) -> dict[str, int]:
        """Guids by lifecycle state (``guids:<state>``) and, for each state but online, those
        of them with queued items (``guids_with_work:<state>``): it reads the whole guid table,
        so it runs at the stall count's pace."""
        ...


class Backlogs(Protocol):
    """The bounded top-N reads behind the dashboards' tables (leader only, every so often)."""

    async def top(self, sort: str, limit: int) -> list[dict[str, Any]]:
        """Guids by ``sort`` (``backlog``: most queued; ``wait``: oldest ready item): ``guid``,
        ``queued``, ``oldest_wait_s``."""
        ...

    async def jobs(self, limit: int) -> list[dict[str, Any]]:
        """Open jobs by items not yet final: ``job_id``, ``kind``, ``tenant``, ``status``,
        ``done`` (items in a final status) and ``items`` (all, so far)."""
        ...

    async def held_back_s(self) -> float:
        """How long the first committed event no tail can read yet has waited."""
        ...


@dataclass(frozen=True)
class RawCallback:
    """One record of the callbacks topic: its body as the intake appended it, and the tenant
    whose signature the intake checked (its ``pacer-tenant`` header; None without one)."""

    value: bytes | None
    position: tuple[str, int, int]  # topic, partition, offset
    tenant: str | None = None


class CallbackSource(Protocol):
    async def fetch(self, n: int, timeout_s: float) -> list[RawCallback]: ...
    async def commit(self, done: Sequence[RawCallback]) -> None: ...


Applied = Literal["applied", "stale", "foreign"]


class GuidStates(Protocol):
    """What a tenant's callbacks change, durably before the callback's offset is committed. A
    guid that a job of another tenant named is not theirs to change (``foreign``)."""

    async def set_state(self, guid: str, event: StatusEvent, tenant: str) -> Applied: ...
    async def media_ready(self, guid: str, media_id: str, ok: bool, reason: str | None, tenant: str) -> Applied:
        """A pending media becomes ready (``ok``) or failed; ``stale`` if it was settled already or unknown."""
        ...


class Partitions(Protocol):
    async def set_period(self, tables: Sequence[str], period_days: int) -> Sequence[tuple[str, int]]:
        """Cut the partitions of ``tables`` made from now on by ``period_days``; the tables whose
        period changed, each with the period it had."""
        ...
    async def ensure(self, ahead_days: int) -> Sequence[PartitionChange]: ...
    async def prune(self, retain_days: Mapping[str, int]) -> Sequence[PartitionChange]: ...
    async def prune_jobs(self, retain_days: int) -> int: ...
    async def prune_usage(self, retain_days: int) -> int: ...
    async def prune_senders(self) -> int: ...
    async def analyze_new(self, min_bytes: int, skip: Collection[str] = ()) -> Sequence[Analyzed] | None: ...

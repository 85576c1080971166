"""What the sender needs from the outside world."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.receipts import Receipt
from pacer_sender.domain.decisions import Decision


@dataclass(frozen=True)
class Begun:
    """Result of claiming an item and writing ``submitted``, in one durable step.

    ``submitted``: the item is ours (lease ``epoch``) and may be sent; ``duplicate``: another
    item holds its idempotency key, so it was abandoned unsent; ``not_pending``: someone
    else has it, or it is finished or cancelled; ``held``: its job, shard or guid is on hold
    (the reason is in ``holder``) and the item stays pending; ``guid_lost``: this sender no
    longer holds the guid's lease.
    """

    outcome: Literal["submitted", "duplicate", "not_pending", "guid_lost", "held"]
    epoch: int | None
    attempts: int | None  # attempts before this one
    holder: str | None
    sent_at: float | None = None  # monotonic time the claiming statement was sent, if known


class ItemRepository(Protocol):
    async def pending_commands(self, item_ids: Sequence[str]) -> list[ItemCommand]: ...
    async def expire(self, cmd: ItemCommand) -> bool: ...
    async def begin_send(self, cmd: ItemCommand, owner: str) -> Begun: ...
    async def confirm(self, cmd: ItemCommand, epoch: int, receipt: Receipt) -> bool: ...
    async def settle(self, cmd: ItemCommand, epoch: int, decision: Decision) -> bool: ...


@dataclass(frozen=True)
class GuidLease:
    guid: str
    epoch: int
    last_send_at: datetime | None
    took_over: bool
    db_now: datetime
    # sends so far per window: name → (window index, count); see migration 0011
    windows: dict[str, tuple[int, int]] = field(default_factory=dict)


class GuidLeaseStore(Protocol):
    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]: ...
    async def renew(self, held: Mapping[str, int], owner: str) -> set[str]:
        """Extend the leases (guid → epoch) whose owner and epoch are still these; the guids kept."""
        ...
    async def release(self, guids: Sequence[str], owner: str) -> int: ...


class Gateway(Protocol):
    async def send_text(self, guid: str, to_id: str, content: str, idem_key: str,
                        deadline: float | None = None) -> Receipt: ...

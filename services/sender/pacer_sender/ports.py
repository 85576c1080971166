"""What the sender needs from the outside world."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, NamedTuple, Protocol

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.customers import Customer
from pacer_common.domain.failures import SendError
from pacer_common.domain.guid_health import GuidState
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.requests import AnyMessage, MediaMessage
from pacer_common.gateway import MediaAnswer
from pacer_sender.domain.decisions import Decision
from pacer_sender.domain.media import MediaRow
from pacer_sender.domain.pacing import Drain


@dataclass(frozen=True)
class Begun:
    """Result of claiming an item and writing ``submitted``, in one durable step.

    ``submitted``: the item is ours (lease ``epoch``) and may be sent; ``duplicate``: another
    item holds its idempotency key, so it was abandoned unsent; ``not_pending``: someone
    else has it, or it is finished, cancelled or superseded by a newer status version of its
    business id (abandoned, unsent); ``expired``: it was within the expiry margin of its
    ``expire_at`` at the claim, so it was expired, unsent; ``held``: its job, shard or guid is
    on hold (the reason is in ``holder``) and the item stays pending; ``guid_lost``: this
    sender no longer holds the guid's lease. A submitted item comes with what is left of a
    quiet a gateway asked of its guid (``quiet_s``), as the lease row held it at the claim:
    one another caller was answered with (a reconciler's lookup) is learned here at once.
    """

    outcome: Literal["submitted", "duplicate", "not_pending", "guid_lost", "held", "expired"]
    epoch: int | None
    attempts: int | None  # attempts before this one
    holder: str | None
    sent_at: float | None = None  # monotonic time the claiming statement was sent, if known
    quiet_s: float | None = None  # what is left of the guid's quiet at the claim, seconds (None: none)


class UnstorableItem(Exception):
    """The database refuses a value the item's command holds (a NUL character, a key past an
    index's row limit, …): the item's own fault, not the environment's. Never retried."""


class ItemRepository(Protocol):
    async def expire(self, cmd: ItemCommand) -> bool: ...
    async def begin_send(self, cmd: ItemCommand, owner: str) -> Begun: ...
    async def confirm(self, cmd: ItemCommand, epoch: int, receipt: Receipt, spare_s: float = 0.0) -> bool: ...
    async def settle(self, cmd: ItemCommand, epoch: int, decision: Decision,
                     quiet_until: float | None = None) -> bool:
        """Record a failed send as ``decision`` says (fenced by ``epoch``); with ``quiet_until``
        (``time.monotonic()``), the quiet the gateway asked of the guid goes to its lease row in
        the same transaction, what is left of it when the statement goes. False if the item is
        no longer this send's."""
        ...


@dataclass(frozen=True)
class Ready:
    """A guid's next ready items from Postgres, and when its next scheduled one is due."""

    commands: list[ItemCommand]
    due_in_s: float | None  # seconds until its earliest scheduled (``not_before``) pending item
    ready_since: dict[str, float] = field(default_factory=dict)  # item id → when it became ready (epoch s)


@dataclass(frozen=True)
class Waiting:
    """A guid with claimable pending work, found by the sweep."""

    guid: str
    overdue: bool  # its first item has been ready for longer than the sweep's grace
    item_id: str | None = None  # that item


class GuidQueueStore(Protocol):
    """Postgres as the record of every guid's queue."""

    async def next_ready(self, guid: str, exclude: Sequence[str], limit: int) -> Ready: ...
    async def waiting_guids(self, horizon_s: float, grace_s: float,
                            owned: Sequence[tuple[int, int]] | None = None) -> list[Waiting]:
        """Guids with claimable work due within ``horizon_s``. ``owned``: (partition count,
        partition) pairs; only guids of those partitions, where the store can tell (it may
        return others: the caller keeps its own). None: every guid."""
        ...
    async def shed(self, guid: str, drain: Drain) -> int:
        """Expire early (reason ``shed``) the guid's ready batch items that cannot go out
        before their expire_at at the guid's pace (``drain``); how many."""
        ...
    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool:
        """pending → failed with a reason; False if the item is not pending (a submitted item
        is left to the reconciler's verification)."""
        ...


@dataclass(frozen=True)
class GuidLease:
    guid: str
    epoch: int
    last_send_at: datetime | None
    took_over: bool
    db_now: datetime
    # sends per window, as the row keeps them: name → (count, the epoch second the window ends)
    windows: dict[str, tuple[int, float]] = field(default_factory=dict)
    penalty: float | None = None  # the guid's rate-limit penalty (a multiplier of its interval), if any
    quiet_s: float | None = None  # what is left at ``db_now`` of a quiet a gateway asked of the guid, seconds


class Slowdown(NamedTuple):
    """How a gateway slowed a guid, as its lease row keeps it for the next owner."""

    epoch: int  # the lease epoch held when it changed
    penalty: float  # the rate-limit penalty, a multiplier of the guid's interval (1: none)
    quiet_s: float | None = None  # what is left of the quiet its ``Retry-After`` asked for, seconds from now


class GuidLeaseStore(Protocol):
    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]: ...
    async def renew(self, held: Mapping[str, int], owner: str) -> Mapping[str, float | None]:
        """Extend the leases (guid → epoch) whose owner and epoch are still these; the guids
        kept, each with what is left of a quiet a gateway asked of it, seconds (None: none)."""
        ...
    async def release(self, guids: Sequence[str], owner: str) -> int: ...
    async def penalize(self, penalties: Mapping[str, Slowdown], since: Callable[[], float] = lambda: 0.0) -> None:
        """Record how gateways slowed these guids, each only while its lease is still at the
        epoch held when that changed. ``since``: how long ago their ``quiet_s`` were reckoned,
        seconds, read when each statement goes (a wait for a connection, a retry): that
        much less of each quiet is left, so none ends later on the row than it was asked."""
        ...


class Gateway(Protocol):
    """The item's tenant's gateway (``tenant`` picks it)."""

    async def send_text(self, guid: str, to_id: str, content: str, idem_key: str,
                        deadline: float | None = None, tenant: str = "default") -> Receipt: ...


class Deferrals(Protocol):
    """Pacer's own reasons not to call a tenant's gateway now (its breaker open, its daily
    quota used up, the tenant not known here yet), asked before an item is claimed."""

    def deferral(self, tenant: str, counted: bool = True) -> SendError | None: ...


class ActionGateway(Protocol):
    async def send_media(self, kind: str, guid: str, to_id: str, media_id: str, idem_key: str,
                         deadline: float | None = None, tenant: str = "default") -> Receipt: ...
    async def upload_media(self, guid: str, url: str, kind: str, file_name: str | None,
                           idem_key: str, tenant: str = "default") -> MediaAnswer: ...
    async def media_status(self, guid: str, media_id: str, tenant: str = "default") -> MediaAnswer: ...
    async def customer_tags(self, op: str, guid: str, customer_id: str, tag_ids: Sequence[str], idem_key: str,
                            deadline: float | None = None, tenant: str = "default") -> Receipt: ...
    async def customer_detail(self, guid: str, customer_id: str, idem_key: str,
                              deadline: float | None = None, tenant: str = "default") -> tuple[Receipt, Customer]: ...


class ActionStore(Protocol):
    """Jobs' messages, the guids' uploaded media and the items waiting for them, customers."""

    async def message_of(self, job_id: str) -> AnyMessage: ...
    async def media(self, guid: str, url_hash: str) -> MediaRow | None: ...
    async def uploaded(self, guid: str, url_hash: str, msg: MediaMessage, answer: MediaAnswer,
                       generation: int) -> MediaRow:
        """Record an upload's answer under ``url_hash``; a record of the guid holding the same
        mediaId under another hash is superseded (a mediaId is the guid's once)."""
        ...
    async def checked(self, guid: str, url_hash: str, media_id: str, status: str,
                      reason: str | None) -> MediaRow | None: ...
    async def media_refused(self, guid: str, url_hash: str, media_id: str, reason: str) -> bool:
        """A send of ``media_id`` was refused and a status poll says the gateway no longer knows
        it: its record goes ``stale``, unless it was uploaded again meanwhile (False)."""
        ...
    async def sent_back_for_media(self, item_id: str) -> bool:
        """Whether the item was sent back once already to upload its media again."""
        ...
    async def hold(self, cmd: ItemCommand) -> Begun | None:
        """What ``begin_send`` would answer now for a media item about to take a step for its
        media, if it would not claim it: ``held`` (its job, shard or guid holds it; the item
        is marked held, as ``begin_send`` marks it) or ``not_pending`` (no longer pending, or
        of a cancelled job, then abandoned as ``begin_send`` abandons it). None: nothing
        stops it. Nothing is claimed."""
        ...
    async def wait(self, cmd: ItemCommand, until: datetime, reason: str) -> bool:
        """Keep a pending item waiting (not_before ``until``, the reason on the item)."""
        ...
    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool: ...
    async def guid_state(self, guid: str, state: GuidState, reason: str, at: datetime) -> None:
        """The gateway refused a call outside a send (an upload), begun ``at``, because the account is out."""
        ...
    async def save_customer(self, customer: Customer, item_id: str) -> int | None:
        """Write Pacer's copy if ``customer`` is newer than it; None if written, else the version kept."""
        ...

"""In-memory stand-ins for the sender's ports, with the same guards as the Postgres adapter
(the contract suites in ``tests/integration/test_*_contract.py`` run against both).

``InMemoryItemRepository`` keeps one record per item and a dict ledger of idempotency keys:

* ``begin_send`` claims only from ``pending`` (bumps the lease epoch), then reserves the
  key — or, when another item holds it, abandons this item (``"duplicate"``) — and moves
  to ``submitted``, all at once, as the database function does; an item within a second of
  its ``expire_at`` is expired instead (``"expired"``), never sent;
* ``confirm`` / ``settle`` only from ``submitted`` with the claim's epoch; ``settle`` frees
  the key when the decision says the send provably did not happen, and gives the attempt
  back when it says the send was a deferral (``refund``).

Every status change is checked against the transition table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.customers import Customer
from pacer_common.domain.failures import FailureClass, SendError
from pacer_common.domain.guid_health import GuidState
from pacer_common.domain.ids import Guid
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.requests import AnyMessage, MediaMessage, TextMessage
from pacer_common.domain.status import ItemStatus, check_transition
from pacer_common.gateway import MediaAnswer
from pacer_sender.core import EXPIRE_MARGIN_S
from pacer_sender.domain.decisions import Decision
from pacer_sender.domain.media import MEDIA_REFUSED, MediaRow
from pacer_sender.domain.order import Queued, fair_order, sheds
from pacer_sender.domain.pacing import Drain, quiet_left
from pacer_sender.domain.partitions import partition_of
from pacer_sender.ports import Begun, GuidLease, Ready, Slowdown, Waiting

S = ItemStatus


@dataclass
class ItemRecord:
    status: ItemStatus = S.PENDING
    epoch: int = 0
    attempts: int = 0
    owner: str | None = None
    next_attempt_at: datetime | None = None
    error_class: str | None = None
    error: str | None = None  # the last settle's reason
    receipt: Receipt | None = None
    held: bool = False
    expire_at: datetime | None = None  # the item's, as its row holds it (the command's may lag)
    history: list[ItemStatus] = field(default_factory=list)
    # Each settle's event: (type, error_class), as item_events records them.
    events: list[tuple[str, str | None]] = field(default_factory=list)


@dataclass
class LedgerEntry:
    item_id: str
    state: str  # "reserved" | "sent"


class InMemoryItemRepository:
    def __init__(self) -> None:
        self.items: dict[str, ItemRecord] = {}
        self.ledger: dict[str, LedgerEntry] = {}
        self.calls: list[str] = []
        self.spares: list[float] = []  # each confirmation's spare_s
        self.paused_guids: dict[str, str] = {}  # guid → reason (the guid_leases hold)
        self.held_jobs: dict[str, str] = {}  # job id → why its items may not be claimed ("job paused: …")
        self.quiets: dict[str, float] = {}  # guid → what is left of a quiet a gateway asked of it, seconds
        self.settled_quiets: list[tuple[str, float]] = []  # (guid, seconds) written with a settle

    # -- test set-up and outside actors ----------------------------------------------------
    def add(self, item_id: str, status: ItemStatus = S.PENDING, attempts: int = 0) -> ItemRecord:
        rec = ItemRecord(status=status, attempts=attempts, history=[status])
        self.items[item_id] = rec
        return rec

    def _move(self, item_id: str, dst: ItemStatus) -> None:
        rec = self.items[item_id]
        check_transition(rec.status, dst)
        rec.status = dst
        rec.history.append(dst)

    def lease_expired(self, item_id: str) -> None:
        """The reconciler gives a claimed item whose lease ran out back to pending."""
        self._move(item_id, S.PENDING)
        self.items[item_id].owner = None

    def submit_lease_expired(self, item_id: str) -> None:
        """The reconciler finds a submitted item whose lease ran out: the outcome is in doubt."""
        self._move(item_id, S.RECOVERY_PENDING)
        self.items[item_id].owner = None

    def requeue(self, item_id: str) -> None:
        """The reconciler puts a waiting item back to pending once its retry time came."""
        self._move(item_id, S.PENDING)

    def hold_of(self, cmd: ItemCommand) -> str | None:
        """Why the item may not be claimed now (pacer_hold_reason: its job's hold, then its guid's)."""
        if cmd.job_id in self.held_jobs:
            return self.held_jobs[cmd.job_id]
        if cmd.guid in self.paused_guids:
            return f"guid paused: {self.paused_guids[cmd.guid]}"
        return None

    # -- ItemRepository ------------------------------------------------------------------
    async def expire(self, cmd: ItemCommand) -> bool:
        self.calls.append("expire")
        if self.items[cmd.item_id].status is not S.PENDING:
            return False
        self._move(cmd.item_id, S.EXPIRED)
        return True

    def claim(self, item_id: str, owner: str) -> int:
        """Another sender takes the item (test set-up): pending → claimed, new epoch."""
        rec = self.items[item_id]
        self._move(item_id, S.CLAIMED)
        rec.epoch += 1
        rec.owner = owner
        return rec.epoch

    def _holds_lease(self, cmd: ItemCommand, epoch: int, status: ItemStatus) -> bool:
        rec = self.items[cmd.item_id]
        return rec.status is status and rec.epoch == epoch

    async def begin_send(self, cmd: ItemCommand, owner: str) -> Begun:
        self.calls.append("begin_send")
        rec = self.items[cmd.item_id]
        if rec.status is not S.PENDING:
            return Begun("not_pending", None, None, None)
        if rec.expire_at is not None and rec.expire_at <= datetime.now(UTC) + timedelta(seconds=EXPIRE_MARGIN_S):
            self._move(cmd.item_id, S.EXPIRED)
            rec.error_class = "expired"
            return Begun("expired", None, None, None)
        hold = self.hold_of(cmd)
        if hold is not None:
            rec.held = True
            return Begun("held", None, None, hold)
        epoch = self.claim(cmd.item_id, owner)
        attempts = rec.attempts
        entry = self.ledger.setdefault(cmd.idem_key, LedgerEntry(cmd.item_id, "reserved"))
        if entry.item_id != cmd.item_id:
            self._move(cmd.item_id, S.ABANDONED)
            rec.error_class = "duplicate"
            return Begun("duplicate", epoch, attempts, entry.item_id)
        self._move(cmd.item_id, S.SUBMITTED)
        rec.attempts += 1
        return Begun("submitted", epoch, attempts, cmd.item_id, quiet_s=self.quiets.get(cmd.guid))

    async def confirm(self, cmd: ItemCommand, epoch: int, receipt: Receipt, spare_s: float = 0.0) -> bool:
        self.calls.append("confirm")
        self.spares.append(spare_s)
        if not self._holds_lease(cmd, epoch, S.SUBMITTED):
            return False
        self._move(cmd.item_id, S.CONFIRMED)
        self.items[cmd.item_id].receipt = receipt
        entry = self.ledger.get(cmd.idem_key)
        if entry is not None and entry.item_id == cmd.item_id:
            entry.state = "sent"
        return True

    async def settle(self, cmd: ItemCommand, epoch: int, decision: Decision,
                     quiet_until: float | None = None) -> bool:
        self.calls.append("settle")
        if not self._holds_lease(cmd, epoch, S.SUBMITTED):
            return False
        if quiet_until is not None:
            self.settled_quiets.append((cmd.guid, quiet_until - time.monotonic()))
        self._move(cmd.item_id, decision.to)
        rec = self.items[cmd.item_id]
        rec.next_attempt_at = decision.next_attempt_at
        rec.error_class = decision.error_class
        rec.events.append((decision.event, decision.error_class))
        rec.error = decision.error
        entry = self.ledger.get(cmd.idem_key)
        if (decision.release_ledger and entry is not None and entry.item_id == cmd.item_id
                and entry.state == "reserved"):
            del self.ledger[cmd.idem_key]
        if decision.guid_state is not None:
            self.paused_guids.setdefault(cmd.guid, f"{decision.guid_state.value}: {decision.error}")
        if decision.refund:
            rec.attempts -= 1  # a deferral: the attempt counted by begin_send is given back
        return True


@dataclass
class SentText:
    guid: str
    to_id: str
    content: str
    idem_key: str


class FakeGateway:
    """Records every send; answers with a receipt, or raises the next scripted ``SendError``.

    ``during_send`` runs inside the call, before it answers: a way to let another actor act
    while the request is in flight (e.g. take the item's lease).
    """

    def __init__(self, errors: list[SendError] | None = None,
                 during_send: Callable[[SentText], None] | None = None) -> None:
        self.sent: list[SentText] = []
        self.errors = list(errors or [])
        self.during_send = during_send

    async def send_text(self, guid: str, to_id: str, content: str, idem_key: str,
                        deadline: float | None = None, tenant: str = "default") -> Receipt:
        call = SentText(guid, to_id, content, idem_key)
        self.sent.append(call)
        if self.during_send is not None:
            self.during_send(call)
        if self.errors:
            raise self.errors.pop(0)
        return Receipt(0, "ok", f"msg-{len(self.sent)}", 1.0)


@dataclass
class LeaseRow:
    owner: str | None = None
    epoch: int = 0
    until: float = 0.0
    evicted_owner: str | None = None
    evicted_until: float = 0.0
    penalty: float | None = None
    quiet_until: float | None = None  # the gateway's quiet, by the store's ``now``


class InMemoryGuidLeases:
    """The guid lease rules of ``pacer_acquire_guids``, ``renew_guids.sql`` and
    ``pacer_force_release_guid`` (migration 0017), on a clock the test moves.

    ``in_flight`` holds (guid, owner) pairs with a send still on the wire: a force-released
    guid is not given to another owner while its evicted holder has one.
    """

    def __init__(self, ttl: float = 30.0) -> None:
        self.ttl = ttl
        self.now = 0.0
        self.rows: dict[str, LeaseRow] = {}
        self.in_flight: set[tuple[str, str]] = set()

    def _free_for(self, row: LeaseRow, guid: str, owner: str) -> bool:
        if not (row.owner is None or row.owner == owner or row.until < self.now):
            return False
        if row.evicted_owner == owner and row.evicted_until > self.now:
            return False
        return not (row.evicted_owner not in (None, owner) and (guid, row.evicted_owner) in self.in_flight)

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        got = []
        for guid in guids:
            row = self.rows.setdefault(guid, LeaseRow())
            if not self._free_for(row, guid, owner):
                continue
            prev = row.owner
            if prev != owner:
                row.epoch += 1
            row.owner, row.until, row.evicted_owner, row.evicted_until = owner, self.now + self.ttl, None, 0.0
            got.append(GuidLease(guid, row.epoch, None, prev not in (None, owner), datetime.now(UTC),
                                 penalty=row.penalty, quiet_s=quiet_left(row.quiet_until, self.now)))
        return got

    async def renew(self, held: Mapping[str, int], owner: str) -> dict[str, float | None]:
        kept: dict[str, float | None] = {}
        for guid, epoch in held.items():
            row = self.rows.get(guid)
            if row is not None and row.owner == owner and row.epoch == epoch:
                row.until = self.now + self.ttl
                kept[guid] = quiet_left(row.quiet_until, self.now)
        return kept

    async def release(self, guids: Sequence[str], owner: str) -> int:
        n = 0
        for guid in guids:
            row = self.rows.get(guid)
            if row is not None and row.owner == owner:
                row.owner, n = None, n + 1
        return n

    async def penalize(self, penalties: Mapping[str, Slowdown], since: Callable[[], float] = lambda: 0.0) -> None:
        for guid, (epoch, penalty, quiet_s) in penalties.items():
            row = self.rows.get(guid)
            if row is None:
                continue
            if row.epoch == epoch:
                row.penalty = penalty if penalty > 1 else None
            left = quiet_left(quiet_s, since())  # as reckoned, less the time since
            if left is not None:  # whatever the epoch; one that ends later is kept
                row.quiet_until = max(row.quiet_until or self.now, self.now + left)

    def force_release(self, guid: str) -> bool:
        row = self.rows.get(guid)
        if row is None or row.owner is None:
            return False
        row.evicted_owner, row.evicted_until = row.owner, max(row.until, self.now)
        row.owner, row.epoch = None, row.epoch + 1
        return True


class GrantAll:
    """A lease store that grants every guid except those listed as held elsewhere."""

    def __init__(self, held_elsewhere: set[str] | None = None) -> None:
        self.held_elsewhere = held_elsewhere or set()
        self.asked = 0
        self.released: list[str] = []
        self.penalized: dict[str, Slowdown] = {}

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        self.asked += 1
        now = datetime.now(UTC)
        return [GuidLease(g, 1, None, False, now) for g in guids if g not in self.held_elsewhere]

    async def renew(self, held: Mapping[str, int], owner: str) -> dict[str, float | None]:
        return dict.fromkeys(held)

    async def release(self, guids: Sequence[str], owner: str) -> int:
        self.released.extend(guids)
        return len(guids)

    async def penalize(self, penalties: Mapping[str, Slowdown], since: Callable[[], float] = lambda: 0.0) -> None:
        self.penalized.update(penalties)


class InMemoryGuidQueue:
    """Postgres as the dispatcher sees it (``GuidQueueStore``): the pending items of every guid,
    in the send order of ``domain/order.py``, as ``next_ready.sql`` reads them."""

    def __init__(self) -> None:
        self.pending: dict[str, ItemCommand] = {}
        self.created: dict[str, float] = {}
        self.failed: dict[str, tuple[str, str]] = {}
        self.shed_by: dict[str, Drain] = {}  # item id → the pace it was shed at
        self.reads: list[tuple[str, int]] = []
        # What waiting_guids says of a guid's first waiting item: ready for longer than the
        # grace (the real statement's answer for work whose doorbell should long have come),
        # or not (work planned just now, as on a partition assigned mid-campaign).
        self.overdue = True
        self.sweeps_owned: list[list[tuple[int, int]] | None] = []  # what each sweep asked for
        self.held_guids: set[str] = set()  # not online: next_ready.sql reads none of their items

    def add(self, *cmds: ItemCommand) -> None:
        for c in cmds:
            self.pending[c.item_id] = c
            self.created.setdefault(c.item_id, time.time() + len(self.created) * 1e-6)

    def _ready(self, guid: str, exclude: Sequence[str] = ()) -> list[ItemCommand]:
        """The guid's ready items in the send order of domain/order.py, as next_ready.sql reads them."""
        now = datetime.now(UTC)
        ready = {c.item_id: c for c in self.pending.values() if c.guid == guid and c.item_id not in exclude
                 and (c.not_before is None or c.not_before <= now)}
        return [ready[q.item_id] for q in fair_order(
            Queued(c.item_id, c.job_id, c.priority, (c.not_before.timestamp() if c.not_before else self.created[i]))
            for i, c in ready.items())]

    async def next_ready(self, guid: str, exclude: Sequence[str], limit: int) -> Ready:
        self.reads.append((guid, limit))
        now = datetime.now(UTC)
        if guid in self.held_guids:
            return Ready([], None)
        mine = [c for c in self.pending.values() if c.guid == guid]
        due = [c.not_before for c in mine if c.not_before is not None and c.not_before > now]
        return Ready(self._ready(guid, exclude)[:limit], (min(due) - now).total_seconds() if due else None)

    async def shed(self, guid: str, drain: Drain) -> int:
        batch = [c for c in self._ready(guid) if c.priority > 1]
        gone = [c for p, c in enumerate(batch, 1)
                if sheds(p, c.expire_at.timestamp() if c.expire_at else None, time.time(), drain)]
        for c in gone:
            del self.pending[c.item_id]
            self.shed_by[c.item_id] = drain
        return len(gone)

    async def waiting_guids(self, horizon_s: float, grace_s: float,
                            owned: Sequence[tuple[int, int]] | None = None) -> list[Waiting]:
        self.sweeps_owned.append(None if owned is None else list(owned))
        soon = datetime.now(UTC) + timedelta(seconds=horizon_s)
        first: dict[str, str] = {}
        for c in self.pending.values():
            if owned is not None and not any(partition_of(Guid(c.guid), n) == p for n, p in owned):
                continue
            if c.not_before is None or c.not_before <= soon:
                first.setdefault(c.guid, c.item_id)
        return [Waiting(g, self.overdue, first[g]) for g in sorted(first)]

    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool:
        if self.pending.pop(cmd.item_id, None) is None:
            return False
        self.failed[cmd.item_id] = (error_class, reason)
        return True


class InMemoryLimitsSource:
    """``guid_limits`` as the sender reads it (``LimitsSource``): one row per guid, ``*`` or
    ``job:<id>``; each write moves the row past every earlier one in the change order."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[dict[str, Any], int]] = {}
        self.changes = 0

    def set(self, key: str, limits: dict[str, Any]) -> None:
        self.changes += 1
        self.rows[key] = (limits, self.changes)

    async def changed_since(self, after: int | None) -> list[tuple[str, dict[str, Any], int]]:
        return sorted(((key, limits, cursor) for key, (limits, cursor) in self.rows.items()
                       if after is None or cursor > after), key=lambda row: row[2])


class InMemoryActions:
    """The sender's ``ActionStore`` for media items, with the guards of its SQL: a media record
    per (guid, hash); a poll's answer or a send's refusal touches only the mediaId it names
    (a record uploaded again meanwhile is left as it is); whether an item was sent back for its
    media is read from its settles in ``repo``, as Postgres reads item_events."""

    def __init__(self, repo: InMemoryItemRepository, messages: Mapping[str, AnyMessage] | None = None) -> None:
        self.repo = repo
        self.messages = dict(messages or {})  # job id → its message
        self.records: dict[tuple[str, str], MediaRow] = {}
        self.waits: dict[str, tuple[datetime, str]] = {}  # item id → (until, reason)
        self.failed: dict[str, tuple[str, str]] = {}  # item id → (error class, reason)

    async def message_of(self, job_id: str) -> AnyMessage:
        return self.messages.get(job_id, TextMessage(content="-"))

    async def media(self, guid: str, url_hash: str) -> MediaRow | None:
        return self.records.get((guid, url_hash))

    async def uploaded(self, guid: str, url_hash: str, msg: MediaMessage, answer: MediaAnswer,
                       generation: int) -> MediaRow:
        row = MediaRow(answer.media_id, answer.status, answer.reason,  # type: ignore[arg-type]  # the gateway's word
                       datetime.now(UTC), None, generation)
        # A mediaId is the guid's once (media_by_id): a record holding it under another hash is superseded.
        self.records = {k: r for k, r in self.records.items() if k[0] != guid or r.media_id != answer.media_id}
        self.records[(guid, url_hash)] = row
        return row

    async def checked(self, guid: str, url_hash: str, media_id: str, status: str,
                      reason: str | None) -> MediaRow | None:
        row = self.records.get((guid, url_hash))
        if row is None or row.media_id != media_id:
            return None
        now = datetime.now(UTC)
        row = (replace(row, status=status, reason=reason, checked_at=now)  # type: ignore[arg-type]  # as above
               if row.status == "pending" else replace(row, checked_at=now))
        self.records[(guid, url_hash)] = row
        return row

    async def media_refused(self, guid: str, url_hash: str, media_id: str, reason: str) -> bool:
        row = self.records.get((guid, url_hash))
        if row is None or row.media_id != media_id:
            return False
        self.records[(guid, url_hash)] = replace(row, status="stale", reason=reason)
        return True

    async def sent_back_for_media(self, item_id: str) -> bool:
        return ("ItemRetryScheduled", MEDIA_REFUSED) in self.repo.items[item_id].events

    async def hold(self, cmd: ItemCommand) -> Begun | None:
        rec = self.repo.items[cmd.item_id]
        if rec.status is not S.PENDING:
            return Begun("not_pending", None, None, None)
        hold = self.repo.hold_of(cmd)
        if hold is None:
            return None
        rec.held = True
        return Begun("held", None, None, hold)

    async def wait(self, cmd: ItemCommand, until: datetime, reason: str) -> bool:
        if self.repo.items[cmd.item_id].status is not S.PENDING:
            return False
        self.waits[cmd.item_id] = (until, reason)
        return True

    async def fail_unsent(self, cmd: ItemCommand, error_class: str, reason: str) -> bool:
        rec = self.repo.items[cmd.item_id]
        if rec.status is not S.PENDING:
            return False
        self.repo._move(cmd.item_id, S.FAILED)
        rec.error_class = error_class
        self.failed[cmd.item_id] = (error_class, reason)
        return True

    async def guid_state(self, guid: str, state: GuidState, reason: str, at: datetime) -> None:
        raise AssertionError(f"guid {guid} taken out ({state}): not expected here")

    async def save_customer(self, customer: Customer, item_id: str) -> int | None:
        raise AssertionError("customer syncs are not sent through this fake")


@dataclass
class SentMedia:
    kind: str
    to_id: str
    media_id: str
    idem_key: str
    url: str  # what the gateway holds under the mediaId: the upload's url, kind and name
    file_name: str | None


class FakeActionGateway:
    """Uploads and media sends, answered as the fake gateway (``pacer_dev.fakegateway``) does:
    an upload repeated under its idempotency key gets that upload's media, whatever its url,
    kind or name; every upload is ready at once. A send into a media it does not know
    (``forget``: it restarted, or the media expired) or of another kind, or to a target in
    ``bad_targets`` (a bad toId, a dissolved room), is refused with bad_params code 40001, and
    delivers nothing. A status poll of a media it does not know is refused with 40001 too;
    ``poll_errors``: raised by the next polls instead (a transport failure, a 5xx)."""

    def __init__(self) -> None:
        self.media: dict[str, tuple[str, str, str | None]] = {}  # mediaId → (url, kind, fileName)
        self.by_key: dict[str, str] = {}  # upload idempotency key → mediaId
        self.upload_keys: list[str] = []  # every upload call's key
        self.refused: list[str] = []  # every refused send's mediaId
        self.sent: list[SentMedia] = []
        self.loses_uploads = False  # a gateway that forgets each media as soon as it is uploaded
        self.bad_targets: set[str] = set()  # toIds the gateway refuses (40001), whatever the media
        self.polls: list[str] = []  # every status poll's mediaId
        self.poll_errors: list[SendError] = []

    def forget(self, media_id: str) -> None:
        del self.media[media_id]
        self.by_key = {k: v for k, v in self.by_key.items() if v != media_id}

    async def upload_media(self, guid: str, url: str, kind: str, file_name: str | None,
                           idem_key: str, tenant: str = "default") -> MediaAnswer:
        self.upload_keys.append(idem_key)
        media_id = self.by_key.get(idem_key)
        if media_id is None:
            media_id = self.by_key[idem_key] = f"media-{len(self.upload_keys)}"
            if not self.loses_uploads:
                self.media[media_id] = (url, kind, file_name)
        return MediaAnswer(media_id, "ready", None, 1.0)

    async def media_status(self, guid: str, media_id: str, tenant: str = "default") -> MediaAnswer:
        self.polls.append(media_id)
        if self.poll_errors:
            raise self.poll_errors.pop(0)
        if media_id not in self.media:
            raise SendError(FailureClass.BAD_PARAMS, 40001, f"no media {media_id}")
        return MediaAnswer(media_id, "ready", None, 1.0)

    async def send_media(self, kind: str, guid: str, to_id: str, media_id: str, idem_key: str,
                         deadline: float | None = None, tenant: str = "default") -> Receipt:
        if to_id in self.bad_targets:
            raise SendError(FailureClass.BAD_PARAMS, 40001, f"invalid toId {to_id}")
        held = self.media.get(media_id)
        if held is None or held[1] != kind:
            self.refused.append(media_id)
            raise SendError(FailureClass.BAD_PARAMS, 40001, f"no {kind} media {media_id}")
        self.sent.append(SentMedia(kind, to_id, media_id, idem_key, held[0], held[2]))
        return Receipt(0, "ok", f"msg-{len(self.sent)}", 1.0)

    async def customer_tags(self, op: str, guid: str, customer_id: str, tag_ids: Sequence[str], idem_key: str,
                            deadline: float | None = None, tenant: str = "default") -> Receipt:
        raise AssertionError("tags are not sent through this fake")

    async def customer_detail(self, guid: str, customer_id: str, idem_key: str,
                              deadline: float | None = None, tenant: str = "default") -> tuple[Receipt, Customer]:
        raise AssertionError("customer syncs are not sent through this fake")

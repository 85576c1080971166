"""Item events: immutable, past-tense facts appended to the event log.

The event log (table ``item_events``) is an outbox: ``items`` is written by the same guarded
stored functions that append the events, in the same transaction, and the reconciler tails
the log to publish outcomes, re-dispatch and keep the shard counts. Each event records the
transition it made, so an item's status can be checked against its events by ``fold``.

Each event type has its own frozen payload model; ``ItemEvent.payload`` is their union,
discriminated by the event's ``type``. Payload models allow extra keys, so a key a stored
function adds later is kept (and published) before a model names it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, assert_never

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_serializer, model_validator

from pacer_common.domain.ids import Guid, IdemKey, ItemId, JobId, ToId
from pacer_common.domain.status import IllegalTransition, ItemStatus, check_transition

EventType = Literal[
    "ItemClaimed",
    "ItemSubmitted",
    "ItemConfirmed",
    "ItemFailed",
    "ItemRetryScheduled",
    "ItemRequeued",
    "ItemInDoubt",
    "ItemLeaseExpired",
    "ItemVerifiedDelivered",
    "ItemVerifiedNotDelivered",
    "ItemUnverified",
    # A person resolved an unverified send (the console or POST /items/{id}/resolve).
    "ItemResolvedDelivered",
    "ItemResolvedNotDelivered",
    "ItemDuplicateIntercepted",
    "ItemExpired",
    "ItemCancelled",
    "ItemCompensationCreated",
    "ItemTestSendCreated",
    "ItemReleased",
    "ItemSuperseded",
]

SCHEMA_VERSION = 1
# Events that create an item rather than move it (from_status = to_status = pending).
CREATION_EVENTS = frozenset({"ItemCompensationCreated", "ItemTestSendCreated"})
# The only event that moves an item to the status it is in: a lifted hold (pending → pending)
# that makes the reconciler publish its command again.
SELF_EVENTS = frozenset({"ItemReleased"})


class _Payload(BaseModel):
    """What an event says beyond its transition. ``type`` is its event's, never stored in it."""

    model_config = ConfigDict(frozen=True, extra="allow")


class _Failure(_Payload):
    error_class: str | None = None
    error: str | None = None


class _ByPerson(_Payload):
    actor: str | None = None
    reason: str | None = None


class _Released(_Failure):
    """A send whose outcome is (or was) unknown: why, and whether a person forced it."""

    reason: str | None = None
    forced: bool | None = None
    actor: str | None = None


class ItemClaimed(_Payload):
    type: Literal["ItemClaimed"] = Field(default="ItemClaimed", exclude=True)
    owner: str | None = None


class ItemSubmitted(_Payload):
    type: Literal["ItemSubmitted"] = Field(default="ItemSubmitted", exclude=True)
    attempt: int | None = None
    budgeted: bool | None = None


class ItemConfirmed(_Payload):
    type: Literal["ItemConfirmed"] = Field(default="ItemConfirmed", exclude=True)
    receipt: dict[str, Any] | None = None


class ItemFailed(_Failure):
    type: Literal["ItemFailed"] = Field(default="ItemFailed", exclude=True)


class ItemRetryScheduled(_Failure):
    type: Literal["ItemRetryScheduled"] = Field(default="ItemRetryScheduled", exclude=True)


class ItemRequeued(_Failure):
    type: Literal["ItemRequeued"] = Field(default="ItemRequeued", exclude=True)


class ItemExpired(_Failure):
    type: Literal["ItemExpired"] = Field(default="ItemExpired", exclude=True)


class ItemInDoubt(_Released):
    """A send that may have been delivered, to be verified with the gateway. ``source`` says
    what put it in doubt when no answer of the gateway did: ``lease_expired`` (the lease sweep:
    its sender's lease ran out after submit), ``after_restore`` (``pacer after-restore``),
    ``forced_release`` (an admin released its lease), ``compensated`` (a retry of an item from
    before a restore) or ``resolved`` (an unverified send from before a restore resolved as not
    delivered). The sender's own in-doubt answers (the gateway's timeout, a dropped connection,
    a 5xx) have none, and neither have events written before their function set one."""

    type: Literal["ItemInDoubt"] = Field(default="ItemInDoubt", exclude=True)
    source: str | None = None


class ItemLeaseExpired(_Released):
    type: Literal["ItemLeaseExpired"] = Field(default="ItemLeaseExpired", exclude=True)


class ItemVerifiedDelivered(_Released):
    type: Literal["ItemVerifiedDelivered"] = Field(default="ItemVerifiedDelivered", exclude=True)


class ItemVerifiedNotDelivered(_Released):
    type: Literal["ItemVerifiedNotDelivered"] = Field(default="ItemVerifiedNotDelivered", exclude=True)


class ItemUnverified(_Released):
    type: Literal["ItemUnverified"] = Field(default="ItemUnverified", exclude=True)


class ItemResolvedDelivered(_ByPerson):
    type: Literal["ItemResolvedDelivered"] = Field(default="ItemResolvedDelivered", exclude=True)


class ItemResolvedNotDelivered(_ByPerson):
    type: Literal["ItemResolvedNotDelivered"] = Field(default="ItemResolvedNotDelivered", exclude=True)


class ItemDuplicateIntercepted(_Payload):
    type: Literal["ItemDuplicateIntercepted"] = Field(default="ItemDuplicateIntercepted", exclude=True)
    idem_key: IdemKey | None = None
    holder: ItemId | None = None  # the item that holds the key


class ItemCancelled(_Failure):
    type: Literal["ItemCancelled"] = Field(default="ItemCancelled", exclude=True)
    actor: str | None = None
    scope: str | None = None  # "job" when the whole job was cancelled


class ItemCompensationCreated(_Payload):
    type: Literal["ItemCompensationCreated"] = Field(default="ItemCompensationCreated", exclude=True)
    compensates: ItemId | None = None  # the item it stands in for
    actor: str | None = None


class ItemTestSendCreated(_Payload):
    type: Literal["ItemTestSendCreated"] = Field(default="ItemTestSendCreated", exclude=True)
    actor: str | None = None
    to_id: ToId | None = None


class ItemReleased(_Payload):
    type: Literal["ItemReleased"] = Field(default="ItemReleased", exclude=True)


class ItemSuperseded(_Failure):
    type: Literal["ItemSuperseded"] = Field(default="ItemSuperseded", exclude=True)
    business_id: str | None = None
    by_version: int | None = None


Payload = Annotated[
    ItemClaimed | ItemSubmitted | ItemConfirmed | ItemFailed | ItemRetryScheduled | ItemRequeued
    | ItemInDoubt | ItemLeaseExpired | ItemVerifiedDelivered | ItemVerifiedNotDelivered | ItemUnverified
    | ItemResolvedDelivered | ItemResolvedNotDelivered | ItemDuplicateIntercepted | ItemExpired
    | ItemCancelled | ItemCompensationCreated | ItemTestSendCreated | ItemReleased | ItemSuperseded,
    Field(discriminator="type"),
]


def error_class_of(p: Payload) -> str | None:
    """The failure class an event records (``None`` for events that record none)."""
    match p:
        case (ItemFailed() | ItemRetryScheduled() | ItemRequeued() | ItemExpired() | ItemCancelled()
              | ItemSuperseded() | ItemInDoubt() | ItemLeaseExpired() | ItemVerifiedDelivered()
              | ItemVerifiedNotDelivered() | ItemUnverified()):
            return p.error_class
        case (ItemClaimed() | ItemSubmitted() | ItemConfirmed() | ItemResolvedDelivered() | ItemResolvedNotDelivered()
              | ItemDuplicateIntercepted() | ItemCompensationCreated() | ItemTestSendCreated() | ItemReleased()):
            return None
        case _:
            assert_never(p)


class ItemEvent(BaseModel):
    """One row of the event log, as read back by the reconciler and published as an outcome."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    seq: int
    type: EventType
    item_id: ItemId
    job_id: JobId
    shard_id: int
    guid: Guid
    version: int
    from_status: ItemStatus
    to_status: ItemStatus
    occurred_at: AwareDatetime
    payload: Payload
    # The W3C trace context of the item's job request (jobs.traceparent): a Kafka header of the
    # outcome, not its body.
    traceparent: str | None = Field(default=None, exclude=True)
    # The item's job's tenant: the outcome's header ``pacer-tenant``, not its body.
    tenant: str | None = Field(default=None, exclude=True)
    # 0, or the epoch of the `pacer after-restore` after which the event was written
    # (item_events.restore_epoch): part of the outcome's dedupe key, not its body.
    restore_epoch: int = Field(default=0, exclude=True)

    @property
    def dedupe_key(self) -> str:
        """The outcome's ``pacer-dedupe-key``: ``item_id:version``, the same each time this event
        is published. After a restore from a backup, versions count again from the backup, so
        an event written after ``pacer after-restore`` adds its epoch (``item_id:version:epoch``):
        it can never be taken for one written, and published, before the restore."""
        base = f"{self.item_id}:{self.version}"
        return f"{base}:{self.restore_epoch}" if self.restore_epoch else base

    @model_validator(mode="before")
    @classmethod
    def _payload_of_its_type(cls, data: Any) -> Any:
        """The stored payload has no ``type``: it is the event's, so the union can pick its model."""
        if isinstance(data, dict) and not isinstance(data.get("payload"), BaseModel):
            return {**data, "payload": {**(data.get("payload") or {}), "type": data.get("type")}}
        return data

    @field_serializer("payload")
    def _payload_as_stored(self, p: _Payload) -> dict[str, Any]:
        # Only what was recorded: no defaults filled in, no ``type`` (the envelope has it).
        return p.model_dump(mode="json", exclude_unset=True, exclude={"type"})


def fold(initial: ItemStatus, events: list[ItemEvent]) -> ItemStatus:
    """Rebuild an item's status from its events, checking every step against the table."""
    status = initial
    expected_version = None
    for ev in sorted(events, key=lambda e: e.version):
        if ev.type in CREATION_EVENTS and ev.version == 0:
            status, expected_version = ev.to_status, 1  # the item begins here
            continue
        if ev.from_status is not status:
            raise ValueError(
                f"event v{ev.version} of item {ev.item_id} starts at {ev.from_status}, item is {status}"
            )
        if expected_version is not None and ev.version != expected_version:
            raise ValueError(f"gap in item {ev.item_id} versions before v{ev.version}")
        check_transition(status, ev.to_status)
        if ev.to_status is status and ev.type not in SELF_EVENTS:
            raise IllegalTransition(f"{ev.type} cannot leave item {ev.item_id} in {status.value!r}")
        status = ev.to_status
        expected_version = ev.version + 1
    return status


def occurred(ts: datetime) -> datetime:
    if ts.tzinfo is None:
        raise ValueError("event timestamps must be timezone-aware")
    return ts

"""Item events: immutable, past-tense facts appended to the event log.

The event log (table ``item_events``) is the source of truth; ``items`` is its projection.
Each event records the transition it made, so any state can be rebuilt by a fold.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

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
    "ItemDuplicateIntercepted",
    "ItemExpired",
    "ItemCancelled",
    "ItemCompensationCreated",
    "ItemReleased",
    "ItemSuperseded",
]

SCHEMA_VERSION = 1
# Events that create an item rather than move it (from_status = to_status = pending).
CREATION_EVENTS = frozenset({"ItemCompensationCreated"})
# The only event that moves an item to the status it is in: a lifted hold (pending → pending)
# that makes the reconciler publish its command again.
SELF_EVENTS = frozenset({"ItemReleased"})


class ItemEvent(BaseModel):
    """One row of the event log, as read back by the reconciler and published as an outcome."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    seq: int
    type: EventType
    item_id: str
    job_id: str
    shard_id: int
    guid: str
    version: int
    from_status: ItemStatus
    to_status: ItemStatus
    occurred_at: AwareDatetime
    payload: dict[str, Any] = {}
    # The item's W3C trace context (from its row): a Kafka header of the outcome, not its body.
    traceparent: str | None = Field(default=None, exclude=True)


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

"""Deciding an in-doubt send: delivered, provably not delivered, or a question for a human."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pacer_common.domain.events import EventType
from pacer_common.domain.status import ItemStatus


@dataclass(frozen=True)
class Verdict:
    to: ItemStatus
    event: EventType
    reason: str


def verdict(found: bool | None, in_doubt_since: datetime, now: datetime, deadline: timedelta) -> Verdict | None:
    """``None`` means "ask again later". Only proof of non-delivery sends the item again."""
    if found is True:
        return Verdict(ItemStatus.CONFIRMED, "ItemVerifiedDelivered", "gateway lookup found the send")
    if found is False:
        return Verdict(ItemStatus.PENDING, "ItemVerifiedNotDelivered", "gateway lookup proved no send")
    if now - in_doubt_since >= deadline:
        return Verdict(ItemStatus.UNVERIFIED, "ItemUnverified",
                       f"delivery could not be verified within {deadline.total_seconds():.0f}s")
    return None

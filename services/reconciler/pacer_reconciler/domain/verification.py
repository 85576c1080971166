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


def verdict(found: bool | None, in_doubt_since: datetime, now: datetime, deadline: timedelta,
            hushed: bool = False) -> Verdict | None:
    """``None`` means "ask again later". Only proof of non-delivery sends the item again.
    ``hushed``: no lookup could be made, the gateway keeping the item's guid quiet (decided
    once that has held it off as long as a quiet may); the reason says so."""
    if found is True:
        return Verdict(ItemStatus.CONFIRMED, "ItemVerifiedDelivered", "gateway lookup found the send")
    if found is False:
        return Verdict(ItemStatus.PENDING, "ItemVerifiedNotDelivered", "gateway lookup proved no send")
    if now - in_doubt_since >= deadline:
        reason = f"delivery could not be verified within {deadline.total_seconds():.0f}s"
        if hushed:
            reason = (f"delivery could not be verified: in {(now - in_doubt_since).total_seconds():.0f}s in doubt no "
                      "lookup could be made, the gateway keeping the guid quiet (Retry-After)")
        return Verdict(ItemStatus.UNVERIFIED, "ItemUnverified", reason)
    return None

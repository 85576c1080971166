"""A tenant's daily send quota as one sender sees it: the day's total across senders (as last
read) plus what this sender sent since it last added its own sends to that total. Each
tenant's day is its own calendar day (``Tenant.timezone``, else the sender's zone): the
totals read carry the day they count."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date


@dataclass
class DailyUsage:
    totals: dict[str, tuple[date, int]] = field(default_factory=dict)  # per tenant: a day and its sends, all senders, as last read
    unflushed: Counter[str] = field(default_factory=Counter)  # this sender's sends not yet added to the totals

    def used(self, tenant: str, today: date) -> int:
        day, total = self.totals.get(tenant, (None, 0))
        return (total if day == today else 0) + self.unflushed[tenant]  # a total of another day is not today's

    def allows(self, tenant: str, limit: int | None, today: date) -> bool:
        return limit is None or self.used(tenant, today) < limit

    def count(self, tenant: str) -> None:
        self.unflushed[tenant] += 1

    def take(self) -> dict[str, int]:
        """This sender's sends to add to the totals (cleared here; given back with ``restore``
        if adding them fails)."""
        out, self.unflushed = dict(self.unflushed), Counter()
        return out

    def restore(self, sent: dict[str, int]) -> None:
        self.unflushed.update(sent)

    def absorb(self, totals: dict[str, tuple[date, int]]) -> None:
        self.totals = totals

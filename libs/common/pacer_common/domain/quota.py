"""A tenant's daily send quota as one sender sees it: the day's total across senders (as last
read) plus what this sender sent since it last added its own sends to that total."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date


@dataclass
class DailyUsage:
    day: date | None = None
    totals: dict[str, int] = field(default_factory=dict)  # the day's sends per tenant, all senders, as last read
    unflushed: Counter[str] = field(default_factory=Counter)  # this sender's sends not yet added to the totals

    def used(self, tenant: str, today: date) -> int:
        if self.day != today:
            return self.unflushed[tenant]  # a new day: the totals read belong to yesterday
        return self.totals.get(tenant, 0) + self.unflushed[tenant]

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

    def absorb(self, day: date, totals: dict[str, int]) -> None:
        self.day, self.totals = day, totals

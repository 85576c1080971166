"""A tenant's daily send quota as one sender sees it: the day's total across senders (as last
read) plus what this sender sent since it last added its own sends to that total. The
database decides each tenant's day (its calendar day in its time zone, else the sender's:
``pacer_tenant_day``); the totals read carry the instant that day ends, and a total whose day
has ended counts no more."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class DailyUsage:
    # per tenant: the epoch second its day ends, and that day's sends from all senders, as last read
    totals: dict[str, tuple[float, int]] = field(default_factory=dict)
    unflushed: Counter[str] = field(default_factory=Counter)  # this sender's sends not yet added to the totals

    def used(self, tenant: str, wall: float) -> int:
        ends, total = self.totals.get(tenant, (0.0, 0))
        return (total if wall < ends else 0) + self.unflushed[tenant]  # a day ended counts no more

    def allows(self, tenant: str, limit: int | None, wall: float) -> bool:
        return limit is None or self.used(tenant, wall) < limit

    def day_ends(self, tenant: str) -> float:
        """When the tenant's day, as last read, ends (epoch seconds; 0 if never read)."""
        return self.totals.get(tenant, (0.0, 0))[0]

    def count(self, tenant: str) -> None:
        self.unflushed[tenant] += 1

    def take(self) -> dict[str, int]:
        """This sender's sends to add to the totals (cleared here; given back with ``restore``
        if adding them fails)."""
        out, self.unflushed = dict(self.unflushed), Counter()
        return out

    def restore(self, sent: dict[str, int]) -> None:
        self.unflushed.update(sent)

    def absorb(self, totals: dict[str, tuple[float, int]]) -> None:
        self.totals = totals

"""A tenant's daily send quota as one sender sees it: the day's total across senders (as last
read) plus what this sender sent since it last added its own sends to that total. The
database decides each tenant's day (its calendar day in its time zone, else the sender's:
``pacer_tenant_day``); the totals read carry the instant that day ends, and a total whose day
has ended counts no more.

A sender adds its sends in flushes numbered per ``DailyUsage`` (``sender``, ``seq``), and the
database applies a flush only if its seq is past the last one it applied for that sender. A
flush whose outcome is unknown (its statement failed, perhaps after committing) is resent
verbatim, same seq and same counts, before any newer sends, which go in the next seq: so a
retried flush is added once, never twice and never not at all."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Flush:
    """One sender's sends per tenant, added to the totals once: by ``(sender, seq)``."""

    sender: str
    seq: int
    sends: Mapping[str, int]


def _own_name() -> str:
    return f"usage:{uuid.uuid4().hex[:12]}"


@dataclass
class DailyUsage:
    # per tenant: the epoch second its day ends, and that day's sends from all senders, as last read
    totals: dict[str, tuple[float, int]] = field(default_factory=dict)
    unflushed: Counter[str] = field(default_factory=Counter)  # this sender's sends in no flush yet
    # Names this count's flushes in the database: unique per DailyUsage, since the seqs are (the
    # sender's owner, `<name>:<12 hex>`). Two counts under one name would drop each other's flushes.
    sender: str = field(default_factory=_own_name)
    seq: int = 0  # the last flush's number
    pending: Flush | None = None  # sent, not known to be applied: resent verbatim until it is

    def used(self, tenant: str, wall: float) -> int:
        ends, total = self.totals.get(tenant, (0.0, 0))
        # A pending flush is not in the totals as last read: the totals are read back with the
        # flush that adds it, and absorbed only once it is known applied.
        flushing = self.pending.sends.get(tenant, 0) if self.pending else 0
        return (total if wall < ends else 0) + flushing + self.unflushed[tenant]  # a day ended counts no more

    def allows(self, tenant: str, limit: int | None, wall: float) -> bool:
        return limit is None or self.used(tenant, wall) < limit

    def day_ends(self, tenant: str) -> float:
        """When the tenant's day, as last read, ends (epoch seconds; 0 if never read)."""
        return self.totals.get(tenant, (0.0, 0))[0]

    def count(self, tenant: str) -> None:
        self.unflushed[tenant] += 1

    def flush(self) -> Flush:
        """The flush to send next: the pending one, verbatim, if any (it may have been applied
        already: its seq lets the database tell); else this sender's sends since, under the next
        seq. With nothing to add, an empty flush that takes no seq (it only reads the totals)."""
        if self.pending is None:
            sends = self.take()
            if not sends:
                return Flush(self.sender, self.seq, {})
            self.seq += 1
            self.pending = Flush(self.sender, self.seq, sends)
        return self.pending

    @property
    def resending(self) -> bool:
        """Whether the next flush is a pending one resent (newer sends wait for the one after)."""
        return self.pending is not None

    def flushed(self, flush: Flush, totals: dict[str, tuple[float, int]]) -> None:
        """``flush`` is applied (by this attempt or an earlier one): ``totals``, read with it, hold it."""
        if flush == self.pending:
            self.pending = None
        self.absorb(totals)

    def take(self) -> dict[str, int]:
        """This sender's sends in no flush yet, cleared here (``flush`` puts them in one). Sends
        taken must go in a flush, never be added to the totals apart: a retried addition that
        had committed would count them twice."""
        out, self.unflushed = dict(self.unflushed), Counter()
        return out

    def absorb(self, totals: dict[str, tuple[float, int]]) -> None:
        self.totals = totals

"""How long each time-partitioned table keeps its rows, and what a maintenance run did.

Rows leave only with their whole partition (``pacer_prune_partition``), and only past the
table's retention; the database's guards keep a partition that still holds unfinished work
or a key still needed, whatever the retention says. The rules here are the ones a setting
can break: a ledger key must outlive the items that may still be sent under it, and the
audit log is kept longest."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

ACTIONS = ("created", "dropped", "kept", "skipped", "failed", "default")


# The tables PACER_RECONCILER_PARTITION_PERIOD_DAYS cuts. send_ledger keeps 7 days: every key
# reservation looks the key up in each of its partitions, and it is kept five times as long.
PERIOD_SET = ("items", "item_events")


@dataclass(frozen=True)
class Retention:
    items_days: int
    ledger_days: int
    audit_days: int
    conflicts_days: int
    state_history_days: int
    usage_days: int  # tenant_usage: per-tenant send counts by day (not partitioned)

    def __post_init__(self) -> None:
        if self.ledger_days < self.items_days:
            raise ValueError(
                f"the send ledger's retention ({self.ledger_days} days) is shorter than the items' "
                f"({self.items_days} days): a key must be kept as long as an item may still be sent under it")
        longest = max(self.items_days, self.ledger_days, self.conflicts_days, self.state_history_days)
        if self.audit_days < longest:
            raise ValueError(f"the audit log's retention ({self.audit_days} days) must be the longest of all "
                             f"(another table keeps {longest} days)")

    def by_table(self) -> dict[str, int]:
        """Days per partitioned table, as ``pacer_partitions_due`` and ``pacer_prune_partition`` take them."""
        return {"items": self.items_days, "item_events": self.items_days, "send_ledger": self.ledger_days,
                "audit_log": self.audit_days, "operator_conflicts": self.conflicts_days,
                "guid_state_history": self.state_history_days}


@dataclass(frozen=True)
class Analyzed:
    """A time partition ANALYZE was run on, for its first statistics: its table, its name, its
    size then, and whether it has statistics now (``False``: the database user may not
    analyze it, and Postgres skipped it with a warning)."""

    table: str
    partition: str
    bytes: int
    done: bool = True


@dataclass(frozen=True)
class PartitionChange:
    """One line of a maintenance run: a partition created, dropped, kept past retention (with
    the reason), skipped (its table was locked), failed (its CREATE, guard or DROP raised: the error),
    or a default partition that holds rows."""

    partition: str
    action: str
    detail: str | None

    @property
    def table(self) -> str:
        """The partitioned table: ``items`` of ``items_p20261130`` or ``items_default``."""
        base, _, _ = self.partition.rpartition("_")
        return base


def tally(changes: Iterable[PartitionChange]) -> Counter[tuple[str, str]]:
    """(table, action) → how many."""
    return Counter((c.table, c.action) for c in changes)

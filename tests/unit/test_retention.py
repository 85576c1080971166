"""Retention settings: the rules a setting can break, and what a maintenance run reports."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pacer_reconciler.domain.retention import Analyzed, PartitionChange, Retention, tally
from pacer_reconciler.settings import ReconcilerSettings


def retention(**days: int) -> Retention:
    return Retention(**{"items_days": 7, "ledger_days": 35, "audit_days": 400, "conflicts_days": 90,
                        "state_history_days": 90, "usage_days": 400, **days})


def test_every_partitioned_table_gets_a_retention_and_events_follow_their_items() -> None:
    assert retention(items_days=9).by_table() == {
        "items": 9, "item_events": 9, "send_ledger": 35, "audit_log": 400, "operator_conflicts": 90,
        "guid_state_history": 90}


def test_a_ledger_kept_shorter_than_its_items_is_refused() -> None:
    with pytest.raises(ValueError, match="a key must be kept as long as an item may still be sent under it"):
        retention(items_days=10, ledger_days=9)
    assert retention(items_days=10, ledger_days=10).ledger_days == 10


def test_the_audit_log_is_kept_longest() -> None:
    with pytest.raises(ValueError, match="must be the longest of all"):
        retention(audit_days=60)


def test_the_reconciler_refuses_to_start_with_inconsistent_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACER_RECONCILER_RETAIN_LEDGER_DAYS", "3")
    with pytest.raises(ValidationError, match="send ledger"):
        ReconcilerSettings()
    monkeypatch.delenv("PACER_RECONCILER_RETAIN_LEDGER_DAYS")
    assert ReconcilerSettings().retention().by_table()["send_ledger"] == 35


def test_changes_are_counted_per_table_and_action() -> None:
    changes = [PartitionChange("items_p20261130", "created", None),
               PartitionChange("item_events_p20261130", "created", None),
               PartitionChange("items_p20261101", "kept", "holds unfinished items"),
               PartitionChange("send_ledger_default", "default", "holds rows")]
    assert tally(changes) == {("items", "created"): 1, ("item_events", "created"): 1, ("items", "kept"): 1,
                              ("send_ledger", "default"): 1}


def test_a_maintenance_run_creates_then_prunes_and_exports_what_it_did() -> None:
    import asyncio
    from collections.abc import Collection, Mapping, Sequence

    from prometheus_client import CollectorRegistry

    from pacer_reconciler.metrics import ReconcilerMetrics
    from pacer_reconciler.retention import PartitionKeeper

    calls: list[tuple[str, object]] = []

    class Partitions:
        async def set_period(self, tables: Sequence[str], period_days: int) -> list[tuple[str, int]]:
            calls.append(("set_period", (tuple(tables), period_days)))
            return [("items", 7)]

        async def ensure(self, ahead_days: int) -> list[PartitionChange]:
            calls.append(("ensure", ahead_days))
            return [PartitionChange("items_p20261203", "created", None),
                    PartitionChange("items_p20261126", "granted", "MAINTAIN to pacer_reconciler, as on items")]

        async def prune(self, retain_days: Mapping[str, int]) -> list[PartitionChange]:
            calls.append(("prune", dict(retain_days)))
            return [PartitionChange("items_p20261101", "dropped", None),
                    PartitionChange("items_p20261102", "kept", "holds unfinished items"),
                    PartitionChange("items_default", "default", "holds rows")]

        async def prune_jobs(self, retain_days: int) -> int:
            calls.append(("prune_jobs", retain_days))
            return 4

        async def prune_usage(self, retain_days: int) -> int:
            calls.append(("prune_usage", retain_days))
            return 3

        async def prune_senders(self) -> int:
            calls.append(("prune_senders", None))
            return 1

        async def analyze_new(self, min_bytes: int, skip: Collection[str] = ()) -> list[Analyzed] | None:
            raise AssertionError("statistics are not part of a maintenance run: they run on their own")

    registry = CollectorRegistry()
    keeper = PartitionKeeper(Partitions(), retention(), 3, ReconcilerMetrics(registry, lambda: True), period_days=1)
    assert asyncio.run(keeper.round()) == 2
    assert calls == [("set_period", (("items", "item_events"), 1)), ("ensure", 3),
                     ("prune", retention().by_table()), ("prune_jobs", retention().items_days), ("prune_usage", 400),
                     ("prune_senders", None)]
    value = registry.get_sample_value
    assert value("pacer_reconciler_partitions_total", {"table": "items", "action": "created"}) == 1
    assert value("pacer_reconciler_partitions_total", {"table": "items", "action": "dropped"}) == 1
    assert value("pacer_reconciler_partitions_total", {"table": "items", "action": "granted"}) == 1
    assert value("pacer_reconciler_partitions_kept", {"table": "items"}) == 1
    assert value("pacer_reconciler_default_partition_rows", {"table": "items"}) == 1
    assert value("pacer_reconciler_default_partition_rows", {"table": "send_ledger"}) == 0
    assert value("pacer_reconciler_jobs_pruned_total") == 4
    assert value("pacer_reconciler_usage_rows_pruned_total") == 3
    # What this replica keeps by, for an alert to compare across replicas.
    for table, days in {**retention().by_table(), "tenant_usage": 400}.items():
        assert value("pacer_reconciler_maintenance_days", {"table": table, "setting": "retain"}) == days, table
    assert value("pacer_reconciler_maintenance_days", {"table": "items", "setting": "period"}) == 1
    assert value("pacer_reconciler_maintenance_days", {"table": "item_events", "setting": "period"}) == 1
    assert value("pacer_reconciler_maintenance_days", {"table": "send_ledger", "setting": "period"}) is None


def test_the_tenant_usage_retention_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ReconcilerSettings().retention().usage_days == 400
    monkeypatch.setenv("PACER_RECONCILER_RETAIN_USAGE_DAYS", "60")
    assert ReconcilerSettings().retention().usage_days == 60
    monkeypatch.setenv("PACER_RECONCILER_RETAIN_USAGE_DAYS", "0")
    with pytest.raises(ValidationError, match="retain_usage_days"):
        ReconcilerSettings()


def test_the_partition_period_is_a_setting_of_one_to_seven_days(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ReconcilerSettings().partition_period_days == 7
    monkeypatch.setenv("PACER_RECONCILER_PARTITION_PERIOD_DAYS", "1")
    assert ReconcilerSettings().partition_period_days == 1
    for refused in ("0", "8"):
        monkeypatch.setenv("PACER_RECONCILER_PARTITION_PERIOD_DAYS", refused)
        with pytest.raises(ValidationError, match="partition_period_days"):
            ReconcilerSettings()

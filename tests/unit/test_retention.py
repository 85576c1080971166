"""Retention settings: the rules a setting can break, and what a maintenance run reports."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from psycopg import OperationalError, errors
from pydantic import ValidationError

from pacer_common.db.errors import TransientError
from pacer_reconciler.adapters.partitions import PostgresPartitions
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
    for table in retention().by_table():  # from 0, so that an alert sees a first failure as an increase
        assert value("pacer_reconciler_partitions_total", {"table": table, "action": "failed"}) == 0, table
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


def _transient(cause: Exception) -> TransientError:
    """What ``with_retry`` raises once its retries of ``cause`` are spent."""
    try:
        raise TransientError(str(cause)) from cause
    except TransientError as exc:
        return exc


class ScriptedPrune(PostgresPartitions):
    """Three partitions due; the drop of each raises what ``failures`` holds for it."""

    def __init__(self, failures: dict[str, Exception]) -> None:
        super().__init__(None)  # type: ignore[arg-type]  # no database: _changes is scripted
        self.failures = failures
        self.tried: list[str] = []

    async def _changes(self, name: str, params: dict[str, Any]) -> list[PartitionChange]:
        if name == "prune_partitions":
            return [PartitionChange(p, "due", None) for p in ("items_p20261105", "items_p20261112", "item_events_p20261105")]
        self.tried.append(params["partition"])
        if (exc := self.failures.get(params["partition"])) is not None:
            raise exc
        return [PartitionChange(params["partition"], "dropped", None)]


@pytest.mark.parametrize("error,detail", [
    (_transient(errors.QueryCanceled("canceling statement due to statement timeout")),
     "QueryCanceled: canceling statement due to statement timeout"),
    (_transient(errors.LockNotAvailable("canceling statement due to lock timeout")),
     "LockNotAvailable: canceling statement due to lock timeout"),
    (errors.InsufficientPrivilege("must be owner of table items_p20261105"),
     "InsufficientPrivilege: must be owner of table items_p20261105"),
], ids=["statement_timeout", "lock_timeout", "not_owner"])
def test_a_partition_whose_drop_keeps_failing_is_reported_and_the_others_are_dropped(error: Exception,
                                                                                   detail: str) -> None:
    prune = ScriptedPrune({"items_p20261105": error})
    changes = asyncio.run(prune.prune({"items": 7, "item_events": 7}))
    assert [(c.partition, c.action, c.detail) for c in changes] == [
        ("items_p20261105", "failed", f"is past retention and could not be dropped: {detail}"),
        ("items_p20261112", "dropped", None),
        ("item_events_p20261105", "dropped", None)]


def test_a_database_out_of_reach_fails_the_prune_run() -> None:
    """Its retries spent on a lost connection, the run fails (and is tried again after a
    back-off) rather than report every later partition failed in turn."""
    prune = ScriptedPrune({"items_p20261105": _transient(OperationalError("connection refused"))})
    with pytest.raises(TransientError):
        asyncio.run(prune.prune({"items": 7, "item_events": 7}))
    assert prune.tried == ["items_p20261105"]

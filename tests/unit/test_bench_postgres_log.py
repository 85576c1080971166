"""``make bench`` counts the deadlocks its Postgres logged during each scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common import PostgresLog

DEADLOCK = "2026-12-05 01:13:45.974 UTC [12376] ERROR:  deadlock detected\n"


def test_only_the_lines_each_scenario_added_are_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PACER_DATABASE_URL", raising=False)
    path = tmp_path / "postgres.log"
    path.write_text(DEADLOCK * 3)  # an earlier run's
    log = PostgresLog(path)
    with path.open("a") as f:
        f.write("LOG:  checkpoint starting\n")
    log.note("planner")
    with path.open("a") as f:
        f.write(DEADLOCK + "DETAIL: Process 1 waits\n" + DEADLOCK)
    log.note("fleet")
    log.note("peer")
    assert log.summary() == f"bench postgres: deadlocks=2 in=fleet:2 log={path}"


def test_a_run_without_deadlocks_says_none_and_a_configured_server_is_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PACER_DATABASE_URL", raising=False)
    path = tmp_path / "postgres.log"
    path.write_text("LOG:  ready\n")
    log = PostgresLog(path)
    log.note("sender")
    assert log.summary() == f"bench postgres: deadlocks=0 in=none log={path}"
    monkeypatch.setenv("PACER_DATABASE_URL", "postgresql://elsewhere/pacer")
    assert log.summary().startswith("bench postgres: deadlocks=n/a")
